#include "kestrel/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>

#include "kestrel/core/error.h"
#include "kestrel/data/augment.h"
#include "kestrel/data/disk_cache.h"
#include "kestrel/data/image_io.h"
#include "kestrel/data/mosaic.h"
#include "kestrel/data/paste_in.h"

namespace kestrel::data {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Normalised (cls, cx, cy, w, h) rows -> pixel xyxy boxes of a w x h image (and polygons).
Sample labelled(const ImageRecord& record, cv::Mat image) {
  Sample s;
  const float w = static_cast<float>(image.cols), h = static_cast<float>(image.rows);
  s.image = std::move(image);
  for (const auto& row : record.rows) {
    const auto& b = row.box;
    s.boxes.push_back({b[0], (b[1] - b[3] / 2) * w, (b[2] - b[4] / 2) * h, (b[1] + b[3] / 2) * w, (b[2] + b[4] / 2) * h});
    if (!row.polygon.empty()) {
      Polygon poly;
      for (size_t i = 0; i + 1 < row.polygon.size(); i += 2) poly.emplace_back(row.polygon[i] * w, row.polygon[i + 1] * h);
      s.segments.push_back(std::move(poly));
    }
  }
  if (s.segments.size() != s.boxes.size()) s.segments.clear();
  return s;
}

// Upstream's rectangular shapes: batches of similar aspect ratio share the smallest stride-multiple
// shape that holds them at img_size.
std::vector<cv::Size> rect_shapes(const std::vector<ImageRecord>& records, const DatasetOptions& o) {
  std::vector<cv::Size> shapes;
  for (size_t start = 0; start < records.size(); start += static_cast<size_t>(o.batch_size)) {
    const size_t end = std::min(records.size(), start + static_cast<size_t>(o.batch_size));
    double lo = 1e9, hi = 0;
    for (size_t i = start; i < end; ++i) {
      const double ar = static_cast<double>(records[i].height) / records[i].width;
      lo = std::min(lo, ar);
      hi = std::max(hi, ar);
    }
    double sh = 1, sw = 1;  // relative (h, w)
    if (hi < 1) sh = hi;
    else if (lo > 1) sw = 1 / lo;
    auto side = [&](double rel) { return static_cast<int>(std::ceil(rel * o.img_size / o.stride + o.pad)) * o.stride; };
    shapes.emplace_back(side(sw), side(sh));
  }
  return shapes;
}

}  // namespace

uint64_t ram_cache_bytes(const std::vector<ImageRecord>& records, int img_size) {
  uint64_t bytes = 0;
  for (const ImageRecord& r : records) {
    const cv::Size s = long_side_size({r.width, r.height}, img_size);
    bytes += 3ull * static_cast<uint64_t>(s.width) * static_cast<uint64_t>(s.height);
  }
  return bytes;
}

uint64_t sample_seed(uint64_t seed, int epoch, uint64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(epoch)) ^ index);
}

YoloDataset::YoloDataset(DatasetIndex index, DatasetOptions options)
    : options_(std::move(options)), records_(std::move(index.records)) {
  if (records_.empty()) fail("the split has no usable sample");
  if (options_.cache_ram && options_.cache_disk) fail("cache images in RAM or on disk, not both");
  if (options_.img_size < 32 || options_.img_size % options_.stride != 0)
    fail("--img ", options_.img_size, " must be a multiple of the model's largest stride ", options_.stride);
  if (options_.rect) {
    // Sort by aspect ratio (stable: ties keep path order), as upstream does for rectangular batches.
    std::stable_sort(records_.begin(), records_.end(), [](const ImageRecord& a, const ImageRecord& b) {
      return static_cast<double>(a.height) / a.width < static_cast<double>(b.height) / b.width;
    });
    batch_shapes_ = rect_shapes(records_, options_);
  }
  cache_.resize(records_.size());
  // Records keep polygons only when every row of the image has one (labelled() uses them then).
  polygons_ = std::any_of(records_.begin(), records_.end(), [](const ImageRecord& r) {
    return !r.rows.empty() && std::all_of(r.rows.begin(), r.rows.end(), [](const LabelRow& row) { return !row.polygon.empty(); });
  });
}

cv::Size YoloDataset::batch_shape(size_t batch) const {
  if (batch_shapes_.empty()) return {options_.img_size, options_.img_size};
  return batch_shapes_.at(batch);
}

Sample YoloDataset::load_resized(size_t index, cv::Size* original, bool writable) const {
  const ImageRecord& record = records_.at(index);
  std::shared_ptr<const Cached> entry = std::atomic_load(&cache_[index]);
  if (!entry) {
    auto fresh = std::make_shared<Cached>();
    const ResizeKey key{options_.img_size, options_.augment};
    FileStamp stamp;
    std::string cache_file;
    if (options_.cache_disk) {
      stamp = stamp_of_existing(record.image);  // before decoding: a file replaced meanwhile is a miss next time
      cache_file = disk_cache_path(record.image, key);
      if (std::optional<CachedImage> hit = read_disk_cache(cache_file, stamp, key)) {
        fresh->image = std::move(hit->image);
        fresh->original = hit->original;
      }
    }
    if (fresh->image.empty()) {
      DecodedImage decoded = decode_image_file(record.image);
      fresh->original = decoded.image.size();
      fresh->image = resize_long_side(decoded.image, options_.img_size, options_.augment);
      // A miss (missing, stale, truncated or corrupt file) is rewritten from the decoded image.
      if (options_.cache_disk) {
        try {
          write_disk_cache(cache_file, CachedImage{fresh->image, fresh->original}, stamp, key);
        } catch (const Error& e) {  // a full or read-only disk: train on from the decoded image, and say so once
          if (!disk_write_failed_.exchange(true))
            std::cerr << "WARNING: --cache disk: " << e.what() << "; images that are not cached yet are decoded each time\n";
        }
      }
    }
    entry = fresh;
    if (options_.cache_ram) std::atomic_store(&cache_[index], entry);
  }
  if (original) *original = entry->original;
  return labelled(record, writable && options_.cache_ram ? entry->image.clone() : entry->image);
}

Sample YoloDataset::mosaic(size_t index, std::mt19937& rng, const std::vector<int64_t>* partners) const {
  const int n = static_cast<int>(records_.size());
  const bool nine = options_.dialect == Dialect::yolov7 && random_unit(rng) >= 1.0 - options_.hyp.mosaic9;
  const size_t tiles = nine ? 9 : 4;
  std::vector<size_t> picks{index};
  for (size_t i = 1; i < tiles; ++i) picks.push_back(draw_partner(rng, n, partners));
  if (!nine && options_.dialect == Dialect::yolov5) python_shuffle(picks, rng);
  if (nine) {
    std::array<Sample, 9> t;
    for (size_t i = 0; i < 9; ++i) t[i] = load_resized(picks[i]);
    return mosaic9(std::move(t), options_.img_size, options_.hyp, rng, options_.dialect);
  }
  std::array<Sample, 4> t;
  for (size_t i = 0; i < 4; ++i) t[i] = load_resized(picks[i]);
  return mosaic4(std::move(t), options_.img_size, options_.hyp, rng, options_.dialect);
}

Sample YoloDataset::training_sample(size_t index, cv::Size shape, std::mt19937& rng,
                                    const std::vector<int64_t>* partners) const {
  const auto& hyp = options_.hyp;
  Sample s;
  // Upstream: mosaic = augment and not rect (mixup only ever mixes mosaics).
  if (!options_.rect && random_unit(rng) < hyp.mosaic) {
    s = mosaic(index, rng, partners);
    if (random_unit(rng) < hyp.mixup) {
      // The other mosaic's first image is any image, its partners from the draw (upstream's randint(0, n - 1)).
      Sample other = mosaic(static_cast<size_t>(random_below(rng, static_cast<int>(records_.size()))), rng, partners);
      mixup(s, other, rng, options_.dialect == Dialect::yolov7 ? 8.0 : 32.0);
    }
  } else {
    Sample resized = load_resized(index, nullptr, /*writable=*/true);
    Letterbox lb = letterbox(resized.image, shape.height, shape.width, LetterboxOptions{false, false, true, options_.stride});
    resized.image = lb.image;
    letterbox_labels(resized, lb);
    s = std::move(resized);
    // Upstream warps this path's boxes (random_perspective without segments): their corners, clipped, with
    // the boxes' area threshold, not the polygons' tighter boxes and lower threshold that a mosaic uses.
    s.segments.clear();
    random_perspective(s, hyp, {0, 0}, rng, options_.dialect);
  }
  augment_hsv(s.image, hyp.hsv_h, hyp.hsv_s, hyp.hsv_v, rng, options_.dialect);
  // YOLOv7's paste-in (paste_in.h) where upstream has it: after the HSV jitter (pasted objects keep
  // their colours), before the flips. Without polygons upstream finds nothing to paste; kestrel then
  // skips it without drawing, so box-only datasets see the same stream whatever paste_in is.
  if (hyp.paste_in > 0 && polygons_ && random_unit(rng) < hyp.paste_in) {
    const auto load = [this](size_t i) { return load_resized(i); };
    paste_in(s, collect_paste_objects(load, records_.size(), options_.img_size, rng, partners), rng);
  }
  if (options_.dialect == Dialect::yolov5) clip_boxes(s, kYolov5ClipMargin);  // then the flips, as upstream
  random_flips(s, hyp, rng);
  return s;
}

Sample YoloDataset::get(size_t index, int epoch, SampleMeta* meta, std::optional<size_t> shape_batch,
                        const WeightedDraw* weighted) const {
  // Positions in a weighted draw seed apart from image indices (bit 43), which stay below 2^43.
  const uint64_t key = weighted ? weighted->position | (1ull << 43) : index;
  std::mt19937 rng(static_cast<uint32_t>(sample_seed(options_.seed, epoch, key)));
  if (meta) meta->index = static_cast<int64_t>(index);
  const cv::Size shape = batch_shape(shape_batch.value_or(index / static_cast<size_t>(options_.batch_size)));
  if (options_.augment) {
    Sample s = training_sample(index, shape, rng, weighted ? weighted->images : nullptr);
    if (meta) meta->original = s.image.size();
    return s;
  }
  cv::Size original;
  Sample s = load_resized(index, &original, /*writable=*/true);
  const cv::Size resized = s.image.size();
  Letterbox lb = letterbox(s.image, shape.height, shape.width, LetterboxOptions{false, false, false, options_.stride});
  s.image = lb.image;
  letterbox_labels(s, lb);
  if (meta) {
    // original -> network input: the resize to img_size, then the letterbox scale, then its padding
    meta->original = original;
    meta->ratio = {lb.ratio.x * resized.width / original.width, lb.ratio.y * resized.height / original.height};
    meta->pad = lb.pad;
  }
  return s;
}

}  // namespace kestrel::data
