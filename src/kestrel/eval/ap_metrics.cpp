#include "kestrel/eval/ap_metrics.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "kestrel/core/error.h"

namespace kestrel::eval {
namespace {

// [M, 4] x [N, 4] xyxy -> [M, N]; eps: YOLOv5's 1e-7 in the denominator (YOLOv7's box_iou has none).
at::Tensor box_iou(const at::Tensor& a, const at::Tensor& b, double eps = 1e-7) {
  const at::Tensor lt = at::max(a.slice(1, 0, 2).unsqueeze(1), b.slice(1, 0, 2).unsqueeze(0));  // [M, N, 2]
  const at::Tensor rb = at::min(a.slice(1, 2, 4).unsqueeze(1), b.slice(1, 2, 4).unsqueeze(0));
  const at::Tensor inter = (rb - lt).clamp_min(0).prod(2);                                      // [M, N]
  const at::Tensor area_a = (a.slice(1, 2, 4) - a.slice(1, 0, 2)).prod(1);                      // [M]
  const at::Tensor area_b = (b.slice(1, 2, 4) - b.slice(1, 0, 2)).prod(1);                      // [N]
  return inter / (area_a.unsqueeze(1) + area_b.unsqueeze(0) - inter + eps);
}

void check_shape(const at::Tensor& t, int64_t dims, int64_t last, const char* name) {
  if (t.dim() != dims || (last >= 0 && t.size(-1) != last))
    fail("eval: ", name, " has shape ", t.sizes(), ", expected ", dims, " dimension(s)",
         last >= 0 ? cat(" ending in ", last) : std::string());
}

void check_match_arguments(const at::Tensor& pred_boxes, const at::Tensor& pred_classes, const at::Tensor& gt_boxes,
                           const at::Tensor& gt_classes, const at::Tensor& iou_thresholds) {
  check_shape(pred_boxes, 2, 4, "pred_boxes");
  check_shape(gt_boxes, 2, 4, "gt_boxes");
  check_shape(pred_classes, 1, pred_boxes.size(0), "pred_classes");
  check_shape(gt_classes, 1, gt_boxes.size(0), "gt_classes");
  check_shape(iou_thresholds, 1, -1, "iou_thresholds");
}

// numpy.linspace(0, 1, n): i * (1 / (n - 1)), the last one exactly 1 (see coco_eval.cpp).
std::vector<double> unit_linspace(int n) {
  std::vector<double> out(n);
  const double step = 1.0 / (n - 1);
  for (int i = 0; i < n - 1; ++i) {
    volatile double scaled = i * step;
    out[i] = scaled + 0.0;
  }
  out[n - 1] = 1.0;
  return out;
}

// numpy.interp at one point, for increasing (possibly repeated) xp: the segment starting at the last
// xp <= x; at a repeated xp the last of its values.
double interp(double x, const std::vector<double>& xp, const std::vector<double>& fp, double left, double right) {
  const size_t n = xp.size();
  if (x > xp[n - 1]) return right;
  if (x < xp[0]) return left;
  const size_t j = std::upper_bound(xp.begin(), xp.end(), x) - xp.begin() - 1;
  if (j == n - 1 || xp[j] == x) return fp[j];
  const double slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j]);
  return slope * (x - xp[j]) + fp[j];
}

// numpy's sum of a contiguous float64 array (np.sum, np.mean, np.trapz's .sum()): pairwise, eight running
// sums per block of up to 128 values, so that APs and their means equal upstream's to the last bit.
double numpy_sum(const double* a, size_t n) {
  if (n < 8) {
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += a[i];
    return sum;
  }
  if (n <= 128) {
    double r[8];
    std::copy(a, a + 8, r);
    size_t i = 8;
    for (; i < n - n % 8; i += 8)
      for (size_t j = 0; j < 8; ++j) r[j] += a[i + j];
    double sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) sum += a[i];
    return sum;
  }
  size_t half = n / 2;
  half -= half % 8;
  return numpy_sum(a, half) + numpy_sum(a + half, n - half);
}

double numpy_mean(const at::Tensor& values) {  // a contiguous float64 vector
  const at::Tensor v = values.contiguous();
  return numpy_sum(v.data_ptr<double>(), static_cast<size_t>(v.numel())) / static_cast<double>(v.numel());
}

// YOLOv5's compute_ap: sentinels (recall 0 -> precision 1, recall 1 -> precision 0), precision envelope,
// trapezoid rule over the envelope sampled at 101 recall points. YOLOv7's default puts the last sentinel
// at the last recall + 0.01 instead of 1 (`v7_sentinel`): the curve drops to 0 just after the last point.
// With `envelope`, also upstream's py row: the envelope interpolated at recall `px` (for PR_curve.png).
double compute_ap(const std::vector<double>& recall, const std::vector<double>& precision, bool v7_sentinel,
                  const std::vector<double>* px = nullptr, double* envelope = nullptr) {
  std::vector<double> mrec{0.0}, mpre{1.0};
  mrec.insert(mrec.end(), recall.begin(), recall.end());
  mpre.insert(mpre.end(), precision.begin(), precision.end());
  mrec.push_back(v7_sentinel ? recall.back() + 0.01 : 1.0);
  mpre.push_back(0.0);
  for (size_t i = mpre.size() - 1; i-- > 0;) mpre[i] = std::max(mpre[i], mpre[i + 1]);
  if (px && envelope)
    for (size_t k = 0; k < px->size(); ++k) envelope[k] = interp((*px)[k], mrec, mpre, mpre.front(), mpre.back());
  static const std::vector<double> x = unit_linspace(101);
  // np.trapz: (diff(x) * (y[1:] + y[:-1]) / 2.0).sum(), numpy's summation order included.
  std::vector<double> trapezoids(x.size() - 1);
  double previous = interp(x[0], mrec, mpre, mpre.front(), mpre.back());
  for (size_t i = 1; i < x.size(); ++i) {
    const double y = interp(x[i], mrec, mpre, mpre.front(), mpre.back());
    trapezoids[i - 1] = (x[i] - x[i - 1]) * (y + previous) / 2.0;
    previous = y;
  }
  return numpy_sum(trapezoids.data(), trapezoids.size());
}

// Box filter over fraction f of the curve, ends padded with the end values (upstream's smooth()).
std::vector<double> smooth(const std::vector<double>& y, double f) {
  const int64_t n = static_cast<int64_t>(y.size());
  const int64_t taps = static_cast<int64_t>(std::nearbyint(static_cast<double>(n) * f * 2)) / 2 + 1;  // odd
  std::vector<double> padded(taps / 2, y.front());
  padded.insert(padded.end(), y.begin(), y.end());
  padded.insert(padded.end(), taps / 2, y.back());
  const double weight = 1.0 / static_cast<double>(taps);
  std::vector<double> out(n, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < taps; ++k) out[i] += padded[i + k] * weight;
  return out;
}

std::vector<double> to_doubles(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU, at::kDouble).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

std::vector<int64_t> to_longs(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

constexpr int kCurvePoints = 1000;  // confidence axis of the P, R, F1 curves

// One class's predictions, in descending confidence: AP per threshold, and P and R as functions of the
// confidence threshold px (interpolated between predictions, as upstream).
void class_curves(const std::vector<int64_t>& rows, const std::vector<uint8_t>& correct, int64_t T,
                  const std::vector<double>& conf, double targets, const std::vector<double>& px, bool v7_sentinel,
                  double* ap, double* p_curve, double* r_curve, double* pr_curve) {
  const size_t n = rows.size();
  std::vector<double> neg_conf(n);
  for (size_t i = 0; i < n; ++i) neg_conf[i] = -conf[rows[i]];
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> recall(n), precision(n);
    double tp = 0, fp = 0;
    for (size_t i = 0; i < n; ++i) {
      (correct[rows[i] * T + t] ? tp : fp) += 1;
      recall[i] = tp / (targets + 1e-16);
      precision[i] = tp / (tp + fp);
    }
    ap[t] = t == 0 ? compute_ap(recall, precision, v7_sentinel, &px, pr_curve) : compute_ap(recall, precision, v7_sentinel);
    if (t != 0) continue;
    for (int k = 0; k < kCurvePoints; ++k) {
      r_curve[k] = interp(-px[k], neg_conf, recall, 0.0, recall.back());
      p_curve[k] = interp(-px[k], neg_conf, precision, 1.0, precision.back());
    }
  }
}

}  // namespace

at::Tensor default_iou_thresholds() { return at::linspace(0.5, 0.95, 10, at::kFloat); }

namespace {

// val.py's two steps at each threshold, from iou [M, N] and same_class [M, N]: winner [T, M], the
// prediction each gt goes to (N: none).
at::Tensor winners_per_threshold(const at::Tensor& iou, const at::Tensor& same_class, const at::Tensor& iou_thresholds) {
  const int64_t M = iou.size(0), N = iou.size(1), T = iou_thresholds.size(0);
  const at::Tensor thresholds = iou_thresholds.to(iou.options()).view({T, 1, 1});
  const at::Tensor candidate = (iou.unsqueeze(0) >= thresholds) & same_class.unsqueeze(0);         // [T, M, N]

  // Step 1: each prediction keeps its highest-IoU candidate gt; among equal IoUs the highest gt index, as
  // val.py's argsort()[::-1] orders them where numpy's sort keeps equal keys in order (torch.where lists the
  // pairs gt by gt, and the reversal puts the last first; ap_metrics.h says where numpy does not).
  const at::Tensor scored = at::where(candidate, iou.unsqueeze(0), -1.0);
  const at::Tensor best = scored.amax(1, /*keepdim=*/true);                                        // [T, 1, N]
  const at::Tensor gt_index = at::arange(M, iou.options().dtype(at::kLong)).view({1, M, 1});
  const at::Tensor best_gt = at::where(candidate & (scored == best), gt_index, -1).amax(1);        // [T, N]
  const at::Tensor kept = best_gt >= 0;

  // Step 2: each gt goes to the lowest-index prediction that kept it. Keys are t * M + gt.
  const at::Tensor pred_index = at::arange(N, gt_index.options()).expand({T, N});
  const at::Tensor key = at::arange(T, gt_index.options()).unsqueeze(1) * M + best_gt;             // [T, N]
  at::Tensor winner = at::full({T * M}, N, gt_index.options());
  winner.scatter_reduce_(0, key.masked_select(kept), pred_index.masked_select(kept), "amin");
  return winner.view({T, M});
}

at::Tensor same_class_matrix(const at::Tensor& gt_classes, const at::Tensor& pred_classes) {
  return gt_classes.to(pred_classes.device(), at::kLong).unsqueeze(1) == pred_classes.to(at::kLong).unsqueeze(0);  // [M, N]
}

}  // namespace

at::Tensor match_predictions(const at::Tensor& pred_boxes, const at::Tensor& pred_classes,
                             const at::Tensor& gt_boxes, const at::Tensor& gt_classes,
                             const at::Tensor& iou_thresholds) {
  check_match_arguments(pred_boxes, pred_classes, gt_boxes, gt_classes, iou_thresholds);
  const int64_t N = pred_boxes.size(0), M = gt_boxes.size(0), T = iou_thresholds.size(0);
  at::Tensor correct = at::zeros({N, T}, pred_boxes.options().dtype(at::kBool));
  if (N == 0 || M == 0) return correct;
  const at::Tensor iou = box_iou(gt_boxes.to(pred_boxes.options()), pred_boxes);                  // [M, N]
  const at::Tensor winner = winners_per_threshold(iou, same_class_matrix(gt_classes, pred_classes), iou_thresholds).view(-1);
  const at::Tensor won = winner < N;
  const at::Tensor threshold_of_key = at::arange(T * M, winner.options()).div(M, "floor");
  correct.index_put_({winner.masked_select(won), threshold_of_key.masked_select(won)}, true);
  return correct;
}

at::Tensor match_predictions_yolov3(const at::Tensor& pred_boxes, const at::Tensor& pred_classes,
                                    const at::Tensor& gt_boxes, const at::Tensor& gt_classes,
                                    const at::Tensor& iou_thresholds) {
  check_match_arguments(pred_boxes, pred_classes, gt_boxes, gt_classes, iou_thresholds);
  const int64_t N = pred_boxes.size(0), M = gt_boxes.size(0), T = iou_thresholds.size(0);
  at::Tensor correct = at::zeros({N, T}, pred_boxes.options().dtype(at::kBool));
  if (N == 0 || M == 0 || T == 0) return correct;
  const at::Tensor iou = box_iou(gt_boxes.to(pred_boxes.options()), pred_boxes, /*eps=*/0.0);     // [M, N]
  const at::Tensor winner = winners_per_threshold(iou, same_class_matrix(gt_classes, pred_classes), iou_thresholds.slice(0, 0, 1))[0];
  const at::Tensor won = winner < N;                                                                // [M]
  const at::Tensor gts = at::arange(M, winner.options()).masked_select(won), preds = winner.masked_select(won);
  const at::Tensor matched_iou = iou.index({gts, preds});                                          // [K]
  correct.index_put_({preds}, matched_iou.unsqueeze(1) >= iou_thresholds.to(iou.options()).unsqueeze(0));
  return correct;
}

at::Tensor match_predictions_yolov7(const at::Tensor& pred_boxes, const at::Tensor& pred_classes,
                                    const at::Tensor& gt_boxes, const at::Tensor& gt_classes,
                                    const at::Tensor& iou_thresholds) {
  check_match_arguments(pred_boxes, pred_classes, gt_boxes, gt_classes, iou_thresholds);
  const int64_t N = pred_boxes.size(0), M = gt_boxes.size(0), T = iou_thresholds.size(0);
  at::Tensor correct = at::zeros({N, T}, pred_boxes.options().dtype(at::kBool));
  if (N == 0 || M == 0 || T == 0) return correct;

  const at::Tensor iou = box_iou(pred_boxes, gt_boxes.to(pred_boxes.options()), /*eps=*/0.0);      // [N, M]
  const at::Tensor same_class = same_class_matrix(gt_classes, pred_classes).t();                 // [N, M]
  // Each prediction's best gt of its own class: the first maximum, as test.py's ious.max(1) over the
  // class's gts in index order.
  const auto [best_iou, best_gt] = at::where(same_class, iou, -1.0).max(1);                     // [N], [N]
  const at::Tensor thresholds = iou_thresholds.to(iou.options());
  const at::Tensor eligible = best_iou > thresholds[0];
  // Claims in prediction order: each gt goes to the lowest-index eligible prediction that chose it.
  const at::Tensor pred_index = at::arange(N, best_gt.options());
  at::Tensor winner = at::full({M}, N, best_gt.options());
  winner.scatter_reduce_(0, best_gt.masked_select(eligible), pred_index.masked_select(eligible), "amin");
  const at::Tensor claimed = winner.masked_select(winner < N);                                     // [K] pred indices
  correct.index_put_({claimed}, best_iou.index({claimed}).unsqueeze(1) > thresholds.unsqueeze(0));
  return correct;
}

namespace {

// P, R and F1 of every class where the mean F1 over classes peaks along the confidence axis (the first
// peak; of the box-filtered curve when `smoothed`, as YOLOv5; of the raw one, as YOLOv7).
//   p, r: [nc, kCurvePoints] curves; counts: [nc] targets per class.
void take_operating_point(const std::vector<double>& p, const std::vector<double>& r,
                          const std::vector<int64_t>& counts, bool smoothed, ApPerClass& out) {
  const int64_t nc = static_cast<int64_t>(counts.size());
  std::vector<double> f1(nc * kCurvePoints), mean_f1(kCurvePoints, 0.0);
  for (int64_t c = 0; c < nc; ++c)
    for (int k = 0; k < kCurvePoints; ++k) {
      const size_t at = c * kCurvePoints + k;
      f1[at] = 2 * p[at] * r[at] / (p[at] + r[at] + 1e-16);
      mean_f1[k] += f1[at];
    }
  for (double& v : mean_f1) v /= static_cast<double>(nc);
  const std::vector<double> peaked = smoothed ? smooth(mean_f1, 0.1) : mean_f1;
  const int64_t best = std::max_element(peaked.begin(), peaked.end()) - peaked.begin();  // first peak
  out.best_confidence = unit_linspace(kCurvePoints)[best];
  std::copy(f1.begin(), f1.end(), out.f1_curve.data_ptr<double>());
  for (int64_t c = 0; c < nc; ++c) {
    const size_t at = c * kCurvePoints + best;
    const double tp = std::nearbyint(r[at] * static_cast<double>(counts[c]));  // half to even, like np.round
    out.precision.data_ptr<double>()[c] = p[at];
    out.recall.data_ptr<double>()[c] = r[at];
    out.f1.data_ptr<double>()[c] = f1[at];
    out.true_positives.data_ptr<double>()[c] = tp;
    out.false_positives.data_ptr<double>()[c] = std::nearbyint(tp / (p[at] + 1e-16) - tp);
  }
}

}  // namespace

ApPerClass ap_per_class(const at::Tensor& correct, const at::Tensor& conf, const at::Tensor& pred_cls,
                        const at::Tensor& target_cls, MetricStyle style) {
  check_shape(correct, 2, -1, "correct");
  check_shape(conf, 1, correct.size(0), "conf");
  check_shape(pred_cls, 1, correct.size(0), "pred_cls");
  check_shape(target_cls, 1, -1, "target_cls");
  const int64_t N = correct.size(0), T = correct.size(1);
  const at::Tensor correct_cpu = correct.to(at::kCPU, at::kByte).contiguous();
  const std::vector<uint8_t> hits(correct_cpu.data_ptr<uint8_t>(), correct_cpu.data_ptr<uint8_t>() + N * T);
  std::map<int64_t, int64_t> targets;  // class -> number of targets, ascending like np.unique
  for (int64_t c : to_longs(target_cls)) ++targets[c];
  std::vector<int64_t> classes, counts;
  for (const auto& [cls, count] : targets) classes.push_back(cls), counts.push_back(count);

  const int64_t nc = static_cast<int64_t>(classes.size());
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  ApPerClass out;
  out.style = style;
  out.classes = at::tensor(classes, at::kLong);
  out.ap = at::zeros({nc, T}, f64);
  for (at::Tensor* t : {&out.precision, &out.recall, &out.f1, &out.true_positives, &out.false_positives})
    *t = at::zeros({nc}, f64);
  out.px = at::tensor(unit_linspace(kCurvePoints), f64);
  for (at::Tensor* t : {&out.precision_curve, &out.recall_curve, &out.f1_curve, &out.pr_curve})
    *t = at::zeros({nc, kCurvePoints}, f64);
  if (nc == 0 || std::none_of(hits.begin(), hits.end(), [](uint8_t h) { return h != 0; })) return out;
  out.scored = true;

  const std::vector<double> confidence = to_doubles(conf);
  const std::vector<int64_t> predicted = to_longs(pred_cls);
  const std::vector<int64_t> ranked = to_longs(std::get<1>(at::sort(at::tensor(confidence, f64), /*stable=*/true,
                                                                    /*dim=*/0, /*descending=*/true)));
  const std::vector<double> px = unit_linspace(kCurvePoints);
  std::vector<double> p(nc * kCurvePoints, 0.0), r(nc * kCurvePoints, 0.0);  // [nc, kCurvePoints]
  for (int64_t c = 0; c < nc; ++c) {
    std::vector<int64_t> rows;  // this class's predictions, most confident first
    for (int64_t i : ranked)
      if (predicted[i] == classes[c]) rows.push_back(i);
    if (!rows.empty())
      class_curves(rows, hits, T, confidence, static_cast<double>(counts[c]), px, style == MetricStyle::yolov7,
                   out.ap.data_ptr<double>() + c * T,
                   &p[c * kCurvePoints], &r[c * kCurvePoints], out.pr_curve.data_ptr<double>() + c * kCurvePoints);
  }
  take_operating_point(p, r, counts, /*smoothed=*/style == MetricStyle::yolov5, out);
  std::copy(p.begin(), p.end(), out.precision_curve.data_ptr<double>());
  std::copy(r.begin(), r.end(), out.recall_curve.data_ptr<double>());
  // val.py's means, in numpy's summation order: ap.mean(1) per class, then over the classes.
  out.mp = numpy_mean(out.precision);
  out.mr = numpy_mean(out.recall);
  out.map50 = numpy_mean(out.ap.select(1, 0));
  at::Tensor class_map = at::empty({nc}, f64);
  for (int64_t c = 0; c < nc; ++c) class_map[c] = numpy_mean(out.ap[c]);
  out.map = numpy_mean(class_map);
  return out;
}

}  // namespace kestrel::eval
