#include "kestrel/data/loader.h"

#include <malloc.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>

#include <ATen/ATen.h>
#include <opencv2/core.hpp>
#include <torch/cuda.h>

#include "kestrel/core/error.h"
#include "kestrel/data/quad.h"

namespace kestrel::data {

BatchWriter::BatchWriter(int64_t batch_size, int max_boxes, bool pin_memory, float min_box_pixels, float edge_margin)
    : batch_size_(batch_size), max_boxes_(max_boxes), pin_memory_(pin_memory), min_box_pixels_(min_box_pixels),
      edge_margin_(edge_margin) {
  if (batch_size < 1) fail("collate: no samples");
  if (max_boxes < 0) fail("collate: max_boxes must be >= 0, got ", max_boxes);
  batch_.meta.reserve(static_cast<size_t>(batch_size));
}

void BatchWriter::add(const Sample& s, const SampleMeta& meta) {
  if (added_ == batch_size_) fail("collate: more than the batch's ", batch_size_, " samples");
  if (added_ == 0) {
    if (s.image.empty()) fail("collate: sample 0 has no image");
    auto bytes = at::TensorOptions().dtype(at::kByte).pinned_memory(pin_memory_);
    batch_.images = at::empty({batch_size_, 3, s.image.rows, s.image.cols}, bytes);
    // Allocated, then zeroed by memset: a worker runs no ATen kernel, since one over ATen's grain size
    // (64 x 400 x 5 targets) would start an OpenMP team for every worker thread.
    batch_.targets = at::empty({batch_size_, max_boxes_, 5}, at::TensorOptions().dtype(at::kFloat).pinned_memory(pin_memory_));
    batch_.target_mask = at::empty({batch_size_, max_boxes_}, at::TensorOptions().dtype(at::kBool).pinned_memory(pin_memory_));
    std::memset(batch_.targets.data_ptr<float>(), 0, batch_.targets.nbytes());
    std::memset(batch_.target_mask.data_ptr<bool>(), 0, batch_.target_mask.nbytes());
  }
  const int64_t i = added_;
  const int h = static_cast<int>(batch_.images.size(2)), w = static_cast<int>(batch_.images.size(3));
  if (s.image.rows != h || s.image.cols != w || s.image.type() != CV_8UC3)
    fail("collate: sample ", i, " is ", s.image.cols, "x", s.image.rows, ", the batch is ", w, "x", h);
  // BGR interleaved -> three RGB planes written straight into the batch tensor: B to plane 2, G to 1,
  // R to 0. cv::split deinterleaves with SIMD (mixChannels copies byte by byte: 10 % of the loader).
  uint8_t* base = batch_.images.data_ptr<uint8_t>() + i * 3 * h * w;
  cv::Mat planes[3] = {cv::Mat(h, w, CV_8UC1, base + 2 * h * w), cv::Mat(h, w, CV_8UC1, base + h * w), cv::Mat(h, w, CV_8UC1, base)};
  cv::split(s.image, planes);
  if (planes[0].data != base + 2 * h * w || planes[2].data != base) fail("collate: the image planes were reallocated");
  float* targets = batch_.targets.data_ptr<float>();
  bool* mask = batch_.target_mask.data_ptr<bool>();
  int64_t kept = 0;
  for (const Box& box : s.boxes) {
    const float x1 = std::clamp(box.x1, 0.f, w - edge_margin_), x2 = std::clamp(box.x2, 0.f, w - edge_margin_);
    const float y1 = std::clamp(box.y1, 0.f, h - edge_margin_), y2 = std::clamp(box.y2, 0.f, h - edge_margin_);
    if (x2 - x1 < min_box_pixels_ || y2 - y1 < min_box_pixels_) continue;
    if (kept == max_boxes_) {
      ++batch_.dropped_boxes;
      continue;
    }
    float* row = targets + (i * max_boxes_ + kept) * 5;
    row[0] = box.cls;
    row[1] = (x1 + x2) / 2 / w;
    row[2] = (y1 + y2) / 2 / h;
    row[3] = (x2 - x1) / w;
    row[4] = (y2 - y1) / h;
    mask[i * max_boxes_ + kept] = true;
    ++kept;
  }
  batch_.boxes += kept;
  batch_.meta.push_back(meta);
  ++added_;
}

Batch BatchWriter::finish() {
  if (added_ != batch_size_) fail("collate: ", added_, " samples for a batch of ", batch_size_);
  Batch done = std::move(batch_);
  batch_ = Batch{};  // ready for the next batch: counts from zero
  batch_.meta.reserve(static_cast<size_t>(batch_size_));
  added_ = 0;
  return done;
}

Batch collate(const std::vector<Sample>& samples, const std::vector<SampleMeta>& meta, int max_boxes, bool pin_memory,
              float min_box_pixels) {
  if (samples.empty()) fail("collate: no samples");
  if (meta.size() != samples.size()) fail("collate: ", meta.size(), " meta entries for ", samples.size(), " samples");
  BatchWriter writer(static_cast<int64_t>(samples.size()), max_boxes, pin_memory, min_box_pixels);
  for (size_t i = 0; i < samples.size(); ++i) writer.add(samples[i], meta[i]);
  return writer.finish();
}

DataLoader::DataLoader(std::shared_ptr<const YoloDataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  // Every sample allocates several multi-megabyte images (mosaic canvas, warps). Above glibc's default
  // 128 KiB mmap threshold each one is a fresh mmap: page faults and kernel zeroing on every sample.
  // Serving them from the heap instead reuses the memory (process-wide setting, harmless elsewhere).
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // OpenCV's own thread pool off, as upstream's cv2.setNumThreads(0): the workers are the parallelism.
  // Otherwise each cvtColor or resize of one worker fans out to a pool as large as the machine while the
  // other workers run theirs serially, and the pool's threads compete with the workers for the cores.
  cv::setNumThreads(0);
  if (options_.batch_size < 1) fail("--batch-size must be >= 1");
  if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size) fail("invalid rank/world size");
  options_.workers = std::max(1, options_.workers);
  if (options_.prefetch <= 0) options_.prefetch = 2 * options_.workers;
  options_.pin_memory = options_.pin_memory && torch::cuda::is_available();
  if (dataset_->options().rect && options_.shuffle) fail("rectangular batches keep their order: do not shuffle them");
}

DataLoader::~DataLoader() { stop_workers(); }

size_t DataLoader::batches_ready() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ready_.size();
}

size_t DataLoader::num_batches() const {
  const size_t per_rank = (dataset_->size() + options_.world_size - 1) / options_.world_size;
  const size_t b = static_cast<size_t>(options_.batch_size);
  // --quad: a short last batch still counts when it makes a group of 4 (collate_fn4 takes its r // 4 groups).
  if (options_.quad) return per_rank / b + (per_rank % b >= 4 ? 1 : 0);
  return options_.drop_last ? per_rank / b : (per_rank + b - 1) / b;
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void DataLoader::start_epoch(int epoch, int64_t first_batch) {
  stop_workers();
  epoch_ = epoch;
  // The epoch order: a permutation seeded by (seed, epoch), padded by wrapping so that every rank
  // gets the same count, then every world_size-th entry from this rank (as DistributedSampler).
  std::vector<int64_t> all(dataset_->size());
  std::iota(all.begin(), all.end(), 0);
  weighted_draw_.clear();
  if (!sample_weights_.empty()) {
    std::mt19937_64 rng(sample_seed(options_.seed, epoch, ~1ull));
    std::discrete_distribution<int64_t> draw(sample_weights_.begin(), sample_weights_.end());
    for (auto& i : all) i = draw(rng);
    weighted_draw_ = all;
  } else if (options_.shuffle) {
    std::shuffle(all.begin(), all.end(), std::mt19937_64(sample_seed(options_.seed, epoch, ~0ull)));
  }
  const size_t per_rank = (all.size() + options_.world_size - 1) / options_.world_size;
  for (size_t i = 0; all.size() < per_rank * options_.world_size; ++i) all.push_back(all[i]);
  order_.clear();
  for (size_t i = static_cast<size_t>(options_.rank); i < all.size(); i += static_cast<size_t>(options_.world_size)) order_.push_back(all[i]);
  ready_.clear();
  next_to_build_ = next_to_return_ = std::clamp<int64_t>(first_batch, 0, static_cast<int64_t>(num_batches()));
  stopping_ = false;
  error_ = nullptr;
  for (int w = 0; w < options_.workers; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
}

void DataLoader::set_sample_weights(std::vector<double> weights) {
  if (!weights.empty()) {
    if (weights.size() != dataset_->size())
      fail("image weights: ", weights.size(), " weights for ", dataset_->size(), " images");
    if (!options_.shuffle) fail("image weights need a shuffled loader (not --rect)");
    double sum = 0;
    for (double w : weights) {
      if (!(w >= 0) || !std::isfinite(w)) fail("image weights: a weight is negative or not finite (", w, ")");
      sum += w;
    }
    if (sum <= 0) fail("image weights: every weight is zero (no image has a label?)");
  }
  sample_weights_ = std::move(weights);
}

Batch DataLoader::build_batch(int64_t batch) const {
  const size_t b = static_cast<size_t>(options_.batch_size);
  const size_t start = static_cast<size_t>(batch) * b, end = std::min(order_.size(), start + b);
  // Validation keeps every label, however small (as upstream val.py: its gt count includes them).
  const float min_box_pixels = dataset_->options().augment ? 1.f : 0.f;
  // BatchWriter's note; YOLOv5's training samples were clipped before their flips (training_sample).
  const bool yolov5_clip = dataset_->options().dialect == Dialect::yolov5 && !dataset_->options().augment;
  const float edge_margin = yolov5_clip ? kYolov5ClipMargin : 0.f;
  BatchWriter writer(static_cast<int64_t>(end - start), options_.max_boxes, options_.pin_memory, min_box_pixels,
                     edge_margin);
  // Rectangular batches: one shape for the batch, its first sample's (the padding that evens the ranks
  // wraps around to the epoch's first samples, of another shape).
  const std::optional<size_t> shape_batch =
      dataset_->options().rect ? std::optional<size_t>(static_cast<size_t>(order_[start]) / static_cast<size_t>(dataset_->options().batch_size))
                               : std::nullopt;
  for (size_t i = start; i < end; ++i) {
    SampleMeta meta;
    // This rank's i-th sample is entry rank + i * world_size of the epoch's (padded) order.
    const WeightedDraw weighted{&weighted_draw_, static_cast<uint64_t>(options_.rank) + i * static_cast<uint64_t>(options_.world_size)};
    const Sample sample = dataset_->get(static_cast<size_t>(order_[i]), epoch_, &meta, shape_batch,
                                        weighted_draw_.empty() ? nullptr : &weighted);
    writer.add(sample, meta);  // now, while its pixels are in cache
  }
  Batch out = writer.finish();
  out.index = batch;
  if (options_.quad) {
    // The coin of each group, seeded by (seed, epoch, batch): the same batches for any worker count.
    std::mt19937_64 rng(sample_seed(options_.seed, epoch_, static_cast<uint64_t>(batch) + (1ull << 41)));
    std::vector<bool> stitch(static_cast<size_t>(out.images.size(0) / 4));
    for (size_t g = 0; g < stitch.size(); ++g) stitch[g] = std::uniform_real_distribution<double>(0, 1)(rng) >= 0.5;
    out = quad_collate(out, stitch);
  }
  return out;
}

std::vector<int> allowed_cpu_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cores;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  return cores;
}

std::vector<int> rank_cpu_cores(const std::vector<int>& allowed, int local_rank, int local_world_size) {
  if (allowed.empty()) return {};
  if (local_world_size < 1 || local_rank < 0 || local_rank >= local_world_size)
    fail("core binding: local rank ", local_rank, " of ", local_world_size, " processes");
  const size_t n = allowed.size(), ranks = static_cast<size_t>(local_world_size), r = static_cast<size_t>(local_rank);
  if (n < ranks) return {allowed[r % n]};
  const size_t share = n / ranks;
  return std::vector<int>(allowed.begin() + static_cast<std::ptrdiff_t>(r * share),
                          allowed.begin() + static_cast<std::ptrdiff_t>((r + 1) * share));
}

void DataLoader::worker_loop(int worker) {
  if (!options_.cpu_cores.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    const int core = options_.cpu_cores[static_cast<size_t>(worker) % options_.cpu_cores.size()];
    CPU_SET(core, &set);
    // A core outside the allowed set is refused (EINVAL): the worker runs unbound, and says so once per
    // process (the test of this warning relies on running in a process of its own, as ctest runs it).
    static std::atomic<bool> warned{false};
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0 && !warned.exchange(true))
      std::cerr << "WARNING: loader worker " << worker << " could not be bound to CPU core " << core << "; workers run unbound\n";
  }
  const int64_t total = static_cast<int64_t>(num_batches());
  while (true) {
    int64_t batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Bounded prefetch: never more than `prefetch` batches ahead of the consumer.
      changed_.wait(lock, [&] { return stopping_ || next_to_build_ >= total || next_to_build_ < next_to_return_ + options_.prefetch; });
      if (stopping_ || next_to_build_ >= total) return;
      batch = next_to_build_++;
    }
    try {
      Batch built = build_batch(batch);
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.emplace(batch, std::move(built));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    changed_.notify_all();
  }
}

std::optional<Batch> DataLoader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (workers_.empty()) fail("DataLoader::next() before start_epoch()");
  if (next_to_return_ >= static_cast<int64_t>(num_batches())) return std::nullopt;
  changed_.wait(lock, [&] { return error_ || ready_.count(next_to_return_); });
  if (error_) std::rethrow_exception(error_);
  Batch batch = std::move(ready_.at(next_to_return_));
  ready_.erase(next_to_return_++);
  lock.unlock();
  changed_.notify_all();
  return batch;
}

void trim_targets(Batch& batch, int64_t multiple) {
  const int64_t capacity = batch.target_mask.size(1);
  if (capacity == 0 || batch.target_mask.size(0) == 0) return;
  const int64_t fullest = batch.target_mask.sum(1).max().item<int64_t>();
  const int64_t rows = std::min(capacity, std::max<int64_t>(1, (fullest + multiple - 1) / multiple) * multiple);
  // Contiguous copies, pinned like the originals: a strided or pageable source would make the
  // host-to-device copy synchronous.
  auto narrow = [rows](const at::Tensor& t) {
    const at::Tensor part = t.slice(1, 0, rows);
    return at::empty(part.sizes(), part.options().pinned_memory(t.is_pinned())).copy_(part);
  };
  batch.targets = narrow(batch.targets);
  batch.target_mask = narrow(batch.target_mask);
}

DeviceBatch to_device(const Batch& batch, const c10::Device& device, bool channels_last) {
  DeviceBatch out;
  // uint8 crosses the bus (4x less than float), the conversion runs on the device.
  at::Tensor images = batch.images.to(device, /*non_blocking=*/true);
  if (channels_last) images = images.contiguous(at::MemoryFormat::ChannelsLast);
  out.images = images.to(at::kFloat).div_(255.0);
  out.targets = batch.targets.to(device, true);
  out.target_mask = batch.target_mask.to(device, true);
  out.meta = batch.meta;
  out.boxes = batch.boxes;
  out.dropped_boxes = batch.dropped_boxes;
  return out;
}

}  // namespace kestrel::data
