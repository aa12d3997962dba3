#include "kestrel/eval/nms.h"

#include <cmath>
#include <limits>
#include <tuple>

#include "kestrel/core/error.h"

namespace kestrel::eval {
namespace {

// The largest float <= t. For every float x, x > t (compared in double) exactly when x > this value:
// if t is not a float, no float lies between it and t. Lets both kernels compare in float and still
// decide like torchvision's CPU kernel, which compares the float IoU with the double threshold.
float float_threshold(double t) {
  float f = static_cast<float>(t);
  if (static_cast<double>(f) > t) f = std::nextafter(f, -std::numeric_limits<float>::infinity());
  return f;
}

// Greedy scan on the host: sorted_boxes [N, 4] float32 contiguous, in visiting order -> keep [N] bool.
// A box that is already removed cannot remove others, so its IoUs are never computed.
at::Tensor greedy_keep_cpu(const at::Tensor& sorted_boxes, float threshold) {
  const int64_t n = sorted_boxes.size(0);
  at::Tensor keep = at::zeros({n}, at::kBool);
  bool* kept = keep.data_ptr<bool>();
  const float* box = sorted_boxes.data_ptr<float>();
  std::vector<char> removed(n, 0);
  for (int64_t i = 0; i < n; ++i) {
    if (removed[i]) continue;
    kept[i] = true;
    for (int64_t j = i + 1; j < n; ++j)
      if (!removed[j] && detail::iou_above(box + 4 * i, box + 4 * j, threshold)) removed[j] = 1;
  }
  return keep;
}

void check_nms_inputs(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold) {
  if (boxes.dim() != 2 || boxes.size(1) != 4) fail("nms: boxes have shape ", boxes.sizes(), ", expected [N, 4]");
  if (scores.dim() != 1 || scores.size(0) != boxes.size(0))
    fail("nms: scores have shape ", scores.sizes(), ", expected [", boxes.size(0), "] (one per box)");
  if (!boxes.is_floating_point() || !scores.is_floating_point())
    fail("nms: boxes (", boxes.scalar_type(), ") and scores (", scores.scalar_type(), ") must be floating point");
  if (boxes.device() != scores.device())
    fail("nms: boxes are on ", boxes.device(), " but scores on ", scores.device());
  if (std::isnan(iou_threshold)) fail("nms: the IoU threshold is NaN");
}

// The device-specific part of nms_indices: which of the sorted boxes survive.
at::Tensor greedy_keep(const at::Tensor& sorted_boxes, float threshold) {
  if (sorted_boxes.is_cpu()) return greedy_keep_cpu(sorted_boxes, threshold);
  if (sorted_boxes.is_cuda()) {
#ifdef KESTREL_WITH_CUDA
    return detail::greedy_keep_cuda(sorted_boxes, threshold);
#else
    fail("nms: boxes are on ", sorted_boxes.device(), " but this kestrel was built without CUDA (KESTREL_WITH_CUDA=OFF)");
#endif
  }
  fail("nms: no NMS kernel for device ", sorted_boxes.device(), " (CPU and CUDA have one)");
}

void check_options(const at::Tensor& prediction, const NmsOptions& o) {
  if (prediction.dim() != 3 || prediction.size(2) < 6)
    fail("nms: prediction has shape ", prediction.sizes(), ", expected [batch, boxes, 5 + classes] with classes >= 1");
  if (!prediction.is_floating_point()) fail("nms: prediction is ", prediction.scalar_type(), ", expected floating point");
  // Upstream asserts the same ranges.
  if (!(o.conf_thres >= 0 && o.conf_thres <= 1)) fail("nms: conf_thres ", o.conf_thres, " is outside [0, 1]");
  if (!(o.iou_thres >= 0 && o.iou_thres <= 1)) fail("nms: iou_thres ", o.iou_thres, " is outside [0, 1]");
  if (o.max_det < 0) fail("nms: max_det is ", o.max_det, ", expected >= 0");
  if (o.max_nms < 1) fail("nms: max_nms is ", o.max_nms, ", expected >= 1");
}

// One image's candidates x [n, 5 + nc] (obj > conf_thres) -> rows [m, 6] (x1, y1, x2, y2, conf, cls) with
// conf > conf_thres, in candidate order (multi-label: box, then class). conf and the corners are computed
// in x's dtype and then widened, as upstream computes them before torch.cat promotes to float32.
at::Tensor candidate_rows(const at::Tensor& x, const NmsOptions& o) {
  const at::ScalarType row_type = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const bool objectness_only = o.yolov7 && x.size(1) == 6;
  const at::Tensor cls_conf = objectness_only ? x.slice(1, 4, 5) : x.slice(1, 5) * x.slice(1, 4, 5);  // [n, nc]: obj * cls
  const at::Tensor center = x.slice(1, 0, 2), half_size = x.slice(1, 2, 4) / 2;  // [n, 2] each
  const at::Tensor box = at::cat({center - half_size, center + half_size}, 1).to(row_type);  // [n, 4]
  if (o.multi_label && cls_conf.size(1) > 1) {
    const at::Tensor pairs = (cls_conf > o.conf_thres).nonzero();                // [m, 2] (box, class), row-major
    const at::Tensor i = pairs.select(1, 0), j = pairs.select(1, 1).unsqueeze(1);  // [m], [m, 1]
    const at::Tensor conf = cls_conf.index_select(0, i).gather(1, j);            // [m, 1]
    return at::cat({box.index_select(0, i), conf.to(row_type), j.to(row_type)}, 1);
  }
  const auto [conf, j] = cls_conf.max(1, /*keepdim=*/true);                      // [n, 1] each, first max on ties
  const at::Tensor rows = at::cat({box, conf.to(row_type), j.to(row_type)}, 1);  // [n, 6]
  return rows.index_select(0, (conf.squeeze(1) > o.conf_thres).nonzero().squeeze(1));
}

// rows [m, 6] -> the rows whose class is one of `classes` (all rows when it is empty).
at::Tensor filter_classes(const at::Tensor& rows, const std::vector<int>& classes) {
  if (classes.empty()) return rows;
  const std::vector<double> wanted_values(classes.begin(), classes.end());
  const at::Tensor wanted = at::tensor(wanted_values, at::kDouble).to(rows.options());  // [k]
  const at::Tensor hit = (rows.slice(1, 5, 6) == wanted.unsqueeze(0)).any(1);          // [m]
  return rows.index_select(0, hit.nonzero().squeeze(1));
}

// One image: x [N, 5 + nc] -> [n, 6] sorted by conf, n <= max_det.
at::Tensor suppress_image(const at::Tensor& x, const NmsOptions& o) {
  const at::ScalarType row_type = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor candidates = x.index_select(0, (x.select(1, 4) > o.conf_thres).nonzero().squeeze(1));
  if (candidates.size(0) == 0) return at::zeros({0, 6}, x.options().dtype(row_type));
  at::Tensor rows = filter_classes(candidate_rows(candidates, o), o.classes);
  if (rows.size(0) == 0) return rows;
  // The bound on the O(n^2) work that replaces upstream's time limit: the max_nms most confident rows.
  const at::Tensor order = std::get<1>(at::sort(rows.select(1, 4), /*stable=*/true, /*dim=*/0, /*descending=*/true));
  rows = rows.index_select(0, order.slice(0, 0, o.max_nms));                     // [min(m, max_nms), 6]
  // Per-class NMS in one call: each class lives in its own kMaxWh-wide tile.
  const double tile = o.yolov7 || o.yolov3 ? kMaxWhYolov7 : kMaxWh;
  const at::Tensor boxes = o.agnostic ? rows.slice(1, 0, 4) : rows.slice(1, 0, 4) + rows.slice(1, 5, 6) * tile;
  const at::Tensor keep = nms_indices(boxes, rows.select(1, 4), o.iou_thres);  // already descending conf
  return rows.index_select(0, keep.slice(0, 0, o.max_det));
}

}  // namespace

at::Tensor nms_indices(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold) {
  check_nms_inputs(boxes, scores, iou_threshold);
  at::NoGradGuard no_grad;
  if (boxes.size(0) == 0) return at::empty({0}, boxes.options().dtype(at::kLong));
  // Visiting order: descending score, equal scores by index (a stable sort), on the boxes' device.
  const at::Tensor order = std::get<1>(at::sort(scores, /*stable=*/true, /*dim=*/0, /*descending=*/true));  // [N]
  const at::Tensor sorted_boxes = boxes.to(at::kFloat).index_select(0, order).contiguous();                // [N, 4]
  const at::Tensor keep = greedy_keep(sorted_boxes, float_threshold(iou_threshold));                       // [N] bool
  return order.masked_select(keep);
}

std::vector<at::Tensor> non_max_suppression(const at::Tensor& prediction, const NmsOptions& o) {
  check_options(prediction, o);
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> out;
  out.reserve(prediction.size(0));
  for (int64_t b = 0; b < prediction.size(0); ++b) out.push_back(suppress_image(prediction[b], o));
  return out;
}

}  // namespace kestrel::eval
