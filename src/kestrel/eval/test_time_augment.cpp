#include "kestrel/eval/test_time_augment.h"

#include <cmath>

#include <ATen/ATen.h>

#include "kestrel/models/model_family.h"
#include "kestrel/models/yolo_model.h"

namespace kestrel::eval {

at::Tensor scale_images(const at::Tensor& images, double ratio, int64_t stride) {
  if (ratio == 1.0) return images;
  const int64_t h = images.size(2), w = images.size(3);
  // Python's int(h * ratio) and math.ceil(h * ratio / gs): the same double arithmetic.
  const int64_t sh = static_cast<int64_t>(static_cast<double>(h) * ratio);
  const int64_t sw = static_cast<int64_t>(static_cast<double>(w) * ratio);
  const auto padded = [&](int64_t side) {
    return static_cast<int64_t>(std::ceil(static_cast<double>(side) * ratio / static_cast<double>(stride))) * stride;
  };
  const at::Tensor resized = at::upsample_bilinear2d(images, {sh, sw}, /*align_corners=*/false);
  return at::constant_pad_nd(resized, {0, padded(w) - sw, 0, padded(h) - sh}, 0.447);
}

at::Tensor descale_predictions(const at::Tensor& predictions, double ratio, bool flipped, int64_t image_width) {
  at::Tensor xywh = predictions.narrow(-1, 0, 4) / ratio;  // [b, n, 4]
  if (flipped) xywh.select(-1, 0).neg_().add_(static_cast<double>(image_width));
  return at::cat({xywh, predictions.narrow(-1, 4, predictions.size(-1) - 4)}, -1);
}

at::Tensor predict_augmented(models::YoloModel& model, const at::Tensor& images) {
  const double ratios[] = {1.0, 0.83, 0.67};
  const bool flips[] = {false, true, false};
  const int64_t stride = model.max_stride();
  const bool trim = !models::is_yolov7_family(model);
  std::vector<at::Tensor> parts;
  for (int k = 0; k < 3; ++k) {
    const at::Tensor input = scale_images(flips[k] ? images.flip({3}) : images, ratios[k], stride);
    const std::vector<at::Tensor> levels = model.forward(input);  // [b, na, ny_i, nx_i, no] per level
    at::Tensor p = descale_predictions(model.head().decode(levels), ratios[k], flips[k], images.size(3));
    // decode() lays the levels out finest first; YOLOv5 drops the coarsest level of the full-scale pass
    // and the finest of the smallest one (its _clip_augmented with one excluded level: the count it
    // derives from the 1:4:16 grid ratio is the level's own size, as every input side is a stride multiple).
    const auto count = [&](size_t i) { return levels[i].numel() / (levels[i].size(0) * levels[i].size(-1)); };
    if (trim) {
      if (k == 0) p = p.narrow(1, 0, p.size(1) - count(levels.size() - 1));
      if (k == 2) p = p.narrow(1, count(0), p.size(1) - count(0));
    }
    parts.push_back(p);
  }
  return at::cat(parts, 1);
}

}  // namespace kestrel::eval
