// A verified split turned into training or validation samples: decoding (with an optional RAM or disk
// cache of resized images), then YOLOv5/YOLOv7's augmentation recipe or the validation letterbox, with
// rectangular batch shapes for validation.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <opencv2/core.hpp>

#include "kestrel/data/augment.h"
#include "kestrel/data/dataset_index.h"
#include "kestrel/data/hyp.h"

namespace kestrel::data {

struct DatasetOptions {
  int img_size = 640;
  bool augment = true;           // training: mosaic, mixup, perspective, HSV, paste-in, flips
  bool rect = false;             // rectangular batches (validation, and training with upstream's --rect)
  int batch_size = 16;           // for the rectangular shapes
  int stride = 32;               // the model's largest stride
  double pad = 0.0;              // rect shape padding in strides (validation uses 0.5)
  AugmentOptions hyp;
  Dialect dialect = Dialect::yolov5;  // YOLOv7: mosaic9 share, Beta(8, 8) mixup, its perspective limits
  bool cache_ram = false;        // keep decoded, resized images in memory after the first use
  bool cache_disk = false;       // keep them in a .npy file next to each image (disk_cache.h) instead
  uint64_t seed = 0;
};

// --image-weights: the epoch's draw of images by weight, over all ranks (upstream's dataset.indices), and a
// sample's position in it. Mosaic and paste-in partners then come from the draw (upstream's
// random.choices(self.indices, k=3)), and the sample is seeded by its position, so an image drawn twice in an
// epoch is augmented twice, differently.
struct WeightedDraw {
  const std::vector<int64_t>* images = nullptr;
  uint64_t position = 0;
};

// Where a sample came from, to map predictions back to the original image.
struct SampleMeta {
  int64_t index = 0;          // position in the dataset
  cv::Size original;          // decoded size (w, h), EXIF applied
  cv::Point2d ratio{1, 1};    // letterbox scale (w, h) from the original (validation)
  cv::Point2d pad{0, 0};      // letterbox padding (w, h) in pixels (validation)
};

class YoloDataset {
 public:
  YoloDataset(DatasetIndex index, DatasetOptions options);

  size_t size() const { return records_.size(); }
  const std::vector<ImageRecord>& records() const { return records_; }
  const DatasetOptions& options() const { return options_; }

  // The sample at `index` for `epoch`: deterministic for (seed, epoch, index), whatever thread asks; with a
  // weighted draw, for (seed, epoch, position in the draw).
  // Training: img_size x img_size with augmentation; with rect (upstream's --rect), no mosaic and the
  // image letterboxed to its batch's shape, then augmented. Validation: the letterboxed image (rect
  // shape). shape_batch: the batch whose rect shape the sample takes (default: index / batch_size; a
  // loader batch whose samples wrap around the epoch's end gives them its first sample's).
  Sample get(size_t index, int epoch, SampleMeta* meta = nullptr, std::optional<size_t> shape_batch = std::nullopt,
             const WeightedDraw* weighted = nullptr) const;

  // Rectangular mode: the (w, h) of batch i (samples are ordered by aspect ratio).
  cv::Size batch_shape(size_t batch) const;

  // Decoded and resized so that the long side is img_size (the cache entry), boxes in its pixels.
  // Not writable: with the RAM cache the image is shared with the cache (mosaic only reads its
  // tiles); pass writable = true to get a private copy when the caller changes pixels in place.
  Sample load_resized(size_t index, cv::Size* original = nullptr, bool writable = false) const;

 private:
  // partners: the weighted draw to take mosaic / paste-in partners from (null: every image alike).
  Sample training_sample(size_t index, cv::Size shape, std::mt19937& rng, const std::vector<int64_t>* partners) const;
  Sample mosaic(size_t index, std::mt19937& rng, const std::vector<int64_t>* partners) const;

  DatasetOptions options_;
  std::vector<ImageRecord> records_;
  std::vector<cv::Size> batch_shapes_;  // rect mode only
  bool polygons_ = false;               // some image's labels are polygons (paste-in needs them)
  struct Cached {
    cv::Mat image;
    cv::Size original;
  };
  mutable std::vector<std::shared_ptr<const Cached>> cache_;  // atomic_load / atomic_store per slot
  mutable std::atomic<bool> disk_write_failed_{false};          // --cache disk: warned once
};

// 64-bit mix of (seed, epoch, index) into a generator seed, so each sample has its own stream.
uint64_t sample_seed(uint64_t seed, int epoch, uint64_t index);

// The bytes of pixels a RAM cache of these records holds once every one has been loaded: each image
// resized to `img_size` on its long side, 3 bytes a pixel (a record listed twice is cached twice).
uint64_t ram_cache_bytes(const std::vector<ImageRecord>& records, int img_size);

}  // namespace kestrel::data
