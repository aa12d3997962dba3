// The native loader: worker threads build whole batches ahead of the consumer (bounded prefetch),
// in a fixed order, into uint8 tensors (pinned when a GPU will read them). to_device() copies a
// batch without blocking the host and normalises it to 0..1 on the device.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kestrel/data/dataset.h"

namespace kestrel::data {

struct LoaderOptions {
  int batch_size = 16;
  int workers = 8;              // threads building batches (upstream --workers)
  int prefetch = 0;             // batches built ahead of the consumer; 0: two per worker (PyTorch's
                                // prefetch_factor), since each worker builds whole batches: fewer would idle workers
  int max_boxes = 400;          // fixed target capacity per image (static shapes); extra boxes dropped and counted
  bool shuffle = true;
  bool drop_last = false;
  bool pin_memory = false;      // page-locked batches (only when CUDA is available)
  uint64_t seed = 0;
  int rank = 0, world_size = 1; // data parallel: each rank takes every world_size-th sample of the epoch order
  std::vector<int> cpu_cores;   // bind worker i to cpu_cores[i % size] (empty: no binding)
  bool quad = false;            // upstream --quad: groups of 4 images become one 2x image (data/quad.h)
};

// CPU-core binding of loader workers (the accelerator guides' core binding): the cores this process may
// run on (sched_getaffinity), and this rank's share of them when `local_world_size` processes share the
// node: contiguous slices, so that ranks' workers never compete for a core (if there are fewer cores than
// ranks, rank r takes core r mod n).
std::vector<int> allowed_cpu_cores();
std::vector<int> rank_cpu_cores(const std::vector<int>& allowed, int local_rank, int local_world_size);

struct Batch {
  at::Tensor images;       // [B, 3, H, W] uint8, RGB
  at::Tensor targets;      // [B, M, 5] float32: class, cx, cy, w, h normalised to the batch image
  at::Tensor target_mask;  // [B, M] bool: true for real boxes
  std::vector<SampleMeta> meta;
  int64_t boxes = 0;            // real boxes in the batch
  int64_t dropped_boxes = 0;    // boxes beyond max_boxes, left out (the trainer warns once an epoch)
  int64_t index = 0;            // batch number within the epoch
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const YoloDataset> dataset, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts building the epoch's batches (the order depends on seed and epoch only), from batch
  // `first_batch` on (a resumed run continues inside its epoch; earlier batches are never built).
  void start_epoch(int epoch, int64_t first_batch = 0);
  // The next batch in order; nullopt after the last one. Rethrows a worker's error.
  std::optional<Batch> next();
  size_t num_batches() const;
  int workers() const { return options_.workers; }  // the threads building batches
  int batch_size() const { return options_.batch_size; }  // images per batch (the last may hold fewer)
  // --image-weights: from the next start_epoch on, the epoch's order is dataset-size draws with
  // replacement, sample i with probability weights[i] / sum (seeded by seed and epoch), instead of
  // a permutation. Empty: permutations again. Needs shuffle; all weights >= 0, some > 0. Mosaic partners
  // come from the epoch's draw too, and each drawn sample is augmented afresh (WeightedDraw).
  void set_sample_weights(std::vector<double> weights);
  const std::vector<int64_t>& epoch_order() const { return order_; }  // dataset indices of this rank
  int prefetch() const { return options_.prefetch; }  // the bound in effect (after the default)
  size_t batches_ready() const;                        // built and not yet taken

 private:
  void stop_workers();
  void worker_loop(int worker);
  Batch build_batch(int64_t batch) const;

  std::shared_ptr<const YoloDataset> dataset_;
  LoaderOptions options_;
  std::vector<int64_t> order_;
  std::vector<double> sample_weights_;
  std::vector<int64_t> weighted_draw_;  // --image-weights: the epoch's draw over all ranks, before padding
  int epoch_ = 0;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int64_t, Batch> ready_;
  int64_t next_to_build_ = 0, next_to_return_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
};

// Collates samples (same image size) into a Batch, one at a time (the loader adds each as soon as it is
// made, while its pixels are in cache): HWC BGR -> CHW RGB bytes, boxes -> normalised cxcywh clipped to
// [0, size - edge_margin] (YOLOv5's xyxy2xywhn(clip=True, eps=1e-3): 1e-3, where the dataset has not clipped
// already, before the flips of a training sample; YOLOv7 converts without a clip, its augmentations having
// clipped to [0, size]: 0), boxes narrower or lower than min_box_pixels after
// clipping dropped (training: 1; validation: 0, every label counts). Reusable after finish().
class BatchWriter {
 public:
  BatchWriter(int64_t batch_size, int max_boxes, bool pin_memory, float min_box_pixels = 1.f, float edge_margin = 1e-3f);
  // The first sample sets the image size (the tensors are allocated then); the others must match.
  void add(const Sample& sample, const SampleMeta& meta);
  Batch finish();  // fails unless batch_size samples were added

 private:
  int64_t batch_size_;
  int max_boxes_;
  bool pin_memory_;
  float min_box_pixels_, edge_margin_;
  int64_t added_ = 0;
  Batch batch_;
};

// The samples through one BatchWriter; meta[i] belongs to samples[i].
Batch collate(const std::vector<Sample>& samples, const std::vector<SampleMeta>& meta, int max_boxes, bool pin_memory,
              float min_box_pixels = 1.f);

// Narrows targets and mask to the rows the fullest image uses, rounded up to a multiple of `multiple`
// (boxes are packed at the front of each image's rows). The loss then costs O(boxes in the batch)
// rather than O(max_boxes), with few distinct shapes. Host-side: reads the CPU mask only.
void trim_targets(Batch& batch, int64_t multiple = 32);

// The batch on `device`: images float32 [B, 3, H, W] in 0..1 (channels-last memory when asked),
// targets and mask copied as they are. Copies are non-blocking (pinned source) on the current stream.
// The host-side description (samples, box count) comes along for logging and error reports.
struct DeviceBatch {
  at::Tensor images, targets, target_mask;
  std::vector<SampleMeta> meta;
  int64_t boxes = 0;
  int64_t dropped_boxes = 0;  // boxes beyond the capacity, left out (Batch::dropped_boxes)
};
DeviceBatch to_device(const Batch& batch, const c10::Device& device, bool channels_last = false);

}  // namespace kestrel::data
