// Non-maximum suppression: the greedy kernel (torchvision.ops.nms semantics, which LibTorch lacks) on
// CPU and CUDA, and YOLOv5 v7.0's non_max_suppression (utils/general.py) around it for val and detect.
//
// Where kestrel differs from upstream on purpose:
//  - Upstream stops after a wall-clock limit (0.5 s + 0.05 s per image, "NMS time limit exceeded") and
//    returns whatever it has, so results depend on machine load. kestrel has no time limit; the work per
//    image is bounded by max_nms instead (at most max_nms boxes, the most confident, enter the O(n^2)
//    kernel), so results are reproducible.
//  - Sorts are stable (upstream: torch's unstable argsort), so equal confidences keep candidate order:
//    box index, then class index for multi-label candidates.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace kestrel::eval {

// Greedy NMS over boxes [N, 4] xyxy and scores [N] (any floating dtype, same device, CPU or CUDA).
// Visits boxes by descending score (stable: equal scores in index order), keeps a box unless a kept
// box overlaps it with IoU > iou_threshold, and returns the kept indices [K] int64 in that order, on
// the input's device. IoU = inter / (area_a + area_b - inter), computed in float32 whatever the box
// dtype; the comparison is exact against the double threshold (as torchvision's CPU kernel). Identical
// boxes of zero area have IoU 0/0 = NaN and never suppress each other (as torchvision).
// The CUDA path sorts on the device, builds a 64-bit overlap bitmask per (box, 64-box block) and
// scans it in one thread block; it syncs once (the number of kept boxes decides the output size), so
// it cannot sit inside a CUDA graph. It takes at most 384000 boxes (the mask alone would be 18 GB).
at::Tensor nms_indices(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold);

// The per-class offset of YOLOv5's batched NMS: boxes of class c move by c * kMaxWh pixels, so one
// nms_indices call never lets two classes suppress each other (for images up to 7680 px).
constexpr double kMaxWh = 7680;
constexpr double kMaxWhYolov7 = 4096;  // YOLOv7's max_wh (and ultralytics/yolov3 v9.6.0's)

// non_max_suppression's arguments; defaults are upstream's (detect.py passes conf 0.25, iou 0.45;
// val.py passes conf 0.001, iou 0.6 and multi_label true).
struct NmsOptions {
  double conf_thres = 0.25;    // candidates need obj > conf_thres, then obj * cls > conf_thres
  double iou_thres = 0.45;     // suppress when IoU > iou_thres
  bool multi_label = false;    // one row per (box, class) with obj * cls > conf_thres (only when nc > 1)
  bool agnostic = false;       // one NMS over all classes instead of one per class
  int64_t max_det = 300;       // kept rows per image, the most confident
  int64_t max_nms = 30000;     // rows per image entering NMS, the most confident (upstream max_nms)
  std::vector<int> classes;    // keep only these classes; empty: all
  // YOLOv7's non_max_suppression: a one-class model's confidence is its objectness alone (YOLOv7 skips the
  // class score, which its loss never trains for nc = 1; YOLOv5 multiplies as for any nc), and classes are
  // shifted by kMaxWhYolov7 instead of kMaxWh (in float32 that decides IoUs within ~1e-4 of the threshold).
  bool yolov7 = false;
  // ultralytics/yolov3 v9.6.0's non_max_suppression (--v3-metric): YOLOv5's, with classes shifted by
  // kMaxWhYolov7, its max_wh.
  bool yolov3 = false;
};

// prediction [B, N, 5 + nc] as the Detect head returns it at inference: cx, cy, w, h (pixels), obj, class
// probabilities (any floating dtype, any device with nms_indices support). Returns B tensors [n, 6]
// (x1, y1, x2, y2, conf, cls) on the prediction's device, sorted by conf descending, n <= max_det.
// conf = obj * cls and the box corners are computed in the prediction's dtype (as upstream), then
// rows are float32 (float64 for float64 input), like upstream's torch.cat promotion. No mask channels
// (upstream's nm, segmentation models) and no autolabelling `labels`.
// Image by image, as upstream: on CUDA each image's candidate selection (nonzero, masked_select) and
// nms_indices wait for the device, a few syncs an image; validation is not inside the training step.
std::vector<at::Tensor> non_max_suppression(const at::Tensor& prediction, const NmsOptions& o = {});

// ---- shared by nms.cpp and nms.cu ---------------------------------------------------------------
namespace detail {

#ifdef __CUDACC__
#define KESTREL_NMS_HD __host__ __device__
#else
#define KESTREL_NMS_HD
#endif

// IoU(a, b) > threshold for two xyxy float boxes. One definition for both kernels so that CPU and CUDA
// agree bit for bit: on the device the explicit round-to-nearest intrinsics keep nvcc from contracting
// `area_a + area_b - w * h` into an FMA (which would round differently); the host build targets plain
// x86-64, which has no FMA instructions (a -march=native build could fuse under GCC's default
// -ffp-contract=fast; NmsCuda.MatchesCpu would show it). `threshold` is the largest float <= the double threshold (float_threshold), which makes
// the float comparison equal to comparing the IoU with the double threshold.
KESTREL_NMS_HD inline bool iou_above(const float* a, const float* b, float threshold) {
#ifdef __CUDA_ARCH__
  const auto sub = [](float x, float y) { return __fsub_rn(x, y); };
  const auto mul = [](float x, float y) { return __fmul_rn(x, y); };
  const auto add = [](float x, float y) { return __fadd_rn(x, y); };
  const auto div = [](float x, float y) { return __fdiv_rn(x, y); };
#else
  const auto sub = [](float x, float y) { return x - y; };
  const auto mul = [](float x, float y) { return x * y; };
  const auto add = [](float x, float y) { return x + y; };
  const auto div = [](float x, float y) { return x / y; };
#endif
  // Ternaries rather than fmaxf/std::max: both sides then treat NaN coordinates alike.
  const float left = a[0] < b[0] ? b[0] : a[0], right = a[2] < b[2] ? a[2] : b[2];
  const float top = a[1] < b[1] ? b[1] : a[1], bottom = a[3] < b[3] ? a[3] : b[3];
  float w = sub(right, left), h = sub(bottom, top);
  w = w < 0.f ? 0.f : w;
  h = h < 0.f ? 0.f : h;
  const float inter = mul(w, h);
  const float area_a = mul(sub(a[2], a[0]), sub(a[3], a[1]));
  const float area_b = mul(sub(b[2], b[0]), sub(b[3], b[1]));
  return div(inter, sub(add(area_a, area_b), inter)) > threshold;
}

#undef KESTREL_NMS_HD

// The CUDA kernel of nms_indices (nms.cu): boxes [N, 4] float32 contiguous, already in visiting order,
// on one CUDA device -> keep [N] bool on that device.
at::Tensor greedy_keep_cuda(const at::Tensor& sorted_boxes, float threshold);

}  // namespace detail
}  // namespace kestrel::eval
