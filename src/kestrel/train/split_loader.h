// The loaders of dataset splits as `kestrel train` builds them: the training loader (augmentations,
// shuffling, ranks), shared by the trainer and `kestrel bench e2e` so that the benchmark measures
// exactly the training pipeline; and val.py's loader, shared by training's validation and `kestrel val`.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <c10/core/Device.h>

#include "kestrel/core/host_memory.h"
#include "kestrel/data/dataset.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/data/loader.h"
#include "kestrel/train/hyperparameters.h"
#include "kestrel/train/trainer.h"

namespace kestrel::train {

struct SplitLoader {
  std::shared_ptr<const data::YoloDataset> dataset;
  std::unique_ptr<data::DataLoader> loader;
  uint64_t ram_cache_bytes = 0;   // what its --cache ram holds once filled (0: it caches nothing in RAM)
  uint64_t disk_cache_bytes = 0;  // what its --cache disk still has to write (0: nothing, or no disk cache)
};

// Upstream's check_cache_ram for --cache ram: a split's images are kept in memory only when each of the
// `processes` on this machine can hold `required` bytes, plus `other` bytes it already promised to other
// caches, with a 10 % margin. The cache fills during the first epoch, so this is checked before it.
// Returns "" when they fit (or the memory is unknown), else the line saying that they will not be cached.
std::string ram_cache_refusal(const std::string& split, uint64_t required, uint64_t other,
                              const core::HostMemory& memory, int processes);

// --cache disk's check, as upstream YOLOv5's check_cache_disk (after v7.0): the cache files still to be
// written, `required` bytes, must fit in the free space of the images' file system with a 50 % margin,
// and their folder must be writable; else the line saying that the images will not be cached on disk.
std::string disk_cache_refusal(const std::string& split, uint64_t required, uint64_t free_bytes, uint64_t total_bytes,
                               bool writable);

// Indexes and verifies the training split of `cfg` (skipped files are reported on stdout), then builds
// its dataset and loader from the training options: --img, --batch-size (divided over `world_size`
// ranks), --rect, --cache, --workers, --single-cls, --quad, --seed. Class ids must be < nc_for_check.
// repeat: the split that many times per epoch (benchmarks: a small dataset as a large one).
// device: where this process trains (not o.device, which may list one device per rank); batches are
// page-locked for a CUDA device.
SplitLoader make_train_loader(const data::DatasetConfig& cfg, const TrainOptions& o, const Hyperparameters& hyp,
                              int stride, int nc_for_check, const c10::Device& device, int rank = 0, int world_size = 1,
                              int repeat = 1);

// val.py's loader: letterboxed rectangular batches (pad 0.5) in file order, no augmentation.
struct ValLoaderOptions {
  int img_size = 640;       // a multiple of stride
  int batch_size = 32;
  int stride = 32;
  int workers = 8;
  bool single_cls = false;  // every class becomes 0
  int nc_for_check = 0;     // class ids must be below it
  int max_boxes = 400;      // target capacity per image; raised to the split's fullest image (no label is lost)
  std::string cache;        // "", "ram" or "disk"
  uint64_t other_ram_cache_bytes = 0;   // promised to other RAM caches on this machine (training's, every rank's)
  uint64_t other_disk_cache_bytes = 0;  // still to be written by the training split's --cache disk
  bool pin_memory = false;  // page-locked batches for asynchronous copies to a GPU
  bool rect = true;         // rectangular batches (val.py), or square letterboxes (its --task speed)
  double pad = 0.5;         // rectangular batches' padding, in strides
};
SplitLoader make_val_loader(const data::DatasetConfig& cfg, const std::string& split, const ValLoaderOptions& o);

}  // namespace kestrel::train
