// Test-time augmentation (`kestrel val/detect --augment`), YOLOv5's: the batch is predicted at three
// scales, 1, 0.83 and 0.67 (the middle one flipped left-right), each prediction mapped back to the input's
// pixels, and the three concatenated for NMS. YOLOv5 (and YOLOv3, same code) then drops the full-scale
// pass's coarsest level (large objects, which the smaller scales see better) and the 0.67 pass's finest
// (small objects); YOLOv7's models/yolo.py keeps all three whole. kestrel does each for its own family:
// a YOLOv7 model (models::is_yolov7_family: an IDetect/IAuxDetect head or YOLOv7-only layers) keeps them whole.
#pragma once
#include <vector>

#include <ATen/core/Tensor.h>

namespace kestrel::models {
class YoloModel;
}

namespace kestrel::eval {

// upstream's scale_img: images [b, c, h, w] resized bilinearly (align_corners false) to
// (trunc(h * ratio), trunc(w * ratio)), then padded right and bottom with 0.447 (ImageNet's mean grey)
// to ceil(h * ratio / stride) * stride (same for w). ratio 1 returns the input.
at::Tensor scale_images(const at::Tensor& images, double ratio, int64_t stride);

// Decoded predictions [b, n, no] of an image scaled by `ratio` (and flipped left-right first when
// `flipped`) -> the same in the original image's pixels: x, y, w, h divided by ratio; x mirrored about
// `image_width` when flipped. Returns a new tensor.
at::Tensor descale_predictions(const at::Tensor& predictions, double ratio, bool flipped, int64_t image_width);

// The whole augmented prediction: [b, n, no] (the three passes, trimmed as above), the layout of
// model.predict()'s single pass.
at::Tensor predict_augmented(models::YoloModel& model, const at::Tensor& images);

}  // namespace kestrel::eval
