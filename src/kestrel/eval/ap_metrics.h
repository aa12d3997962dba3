// YOLOv5's own validation metrics (val.py + utils/metrics.py of ultralytics/yolov5 v7.0): the P, R,
// mAP@0.5 and mAP@0.5:0.95 that YOLOv5 prints after every epoch and uses for its fitness. They differ
// from COCO's (eval/coco_eval.h): one pooled ranking per class over the whole set, no area ranges, no
// crowd handling, no maxDets, and AP integrates the 101-point interpolated curve with the trapezoid rule,
// recall running to a sentinel of 1.0 with precision 0 (so a perfect detector scores 0.995).
// YOLOv7's test.py computes the same quantities with three differences (MetricStyle below).
#pragma once
#include <ATen/ATen.h>

namespace kestrel::eval {

// Whose validation metric. kestrel's default is each model family's own (docs/design.md):
//   yolov5: val.py v7.0 (match_predictions; AP recall sentinel 1.0; P and R where the smoothed mean F1
//           peaks).
//   yolov7: YOLOv7's test.py (match_predictions_yolov7; AP recall sentinel = last recall + 0.01, the "old
//           YOLOv5 metric"; P and R where the unsmoothed mean F1 peaks).
//   yolov7_v5_metric: test.py --v5-metric, i.e. yolov7 with the recall sentinel 1.0.
//   yolov3: ultralytics/yolov3 v9.6.0's val.py (--v3-metric; match_predictions_yolov3; recall sentinel 1.0;
//           P and R where the unsmoothed mean F1 peaks).
enum class MetricStyle { yolov5, yolov7, yolov7_v5_metric, yolov3 };
inline bool is_yolov7_style(MetricStyle s) { return s == MetricStyle::yolov7 || s == MetricStyle::yolov7_v5_metric; }

// val.py's process_batch for one image: which predictions are correct at each IoU threshold.
//   pred_boxes [N, 4] xyxy, pred_classes [N], gt_boxes [M, 4] xyxy, gt_classes [M], iou_thresholds [T]
//   -> correct [N, T] bool (on pred_boxes' device).
// Rule, per threshold: candidate (gt, prediction) pairs have IoU >= t and the same class; each
// prediction keeps its highest-IoU candidate gt; each gt then goes to the first prediction (lowest
// index) that kept it. Predictions are expected in descending confidence, as NMS returns them, so the
// first is the most confident. A prediction whose best gt went to an earlier prediction does not fall
// back to its second-best gt (v7.0 behaviour: the re-sort by IoU between the two steps is commented out
// upstream). Exact IoU ties go to the highest gt index, as upstream's argsort()[::-1] puts them where numpy's
// sort keeps equal keys in order: always for 2-3 candidate pairs; from 4 on, numpy builds with x86-simd-sort
// (AVX-512) reorder ties by the data, so upstream's own result varies there, and kestrel's rule is fixed.
// IoU = inter / (area1 + area2 - inter + 1e-7), in pred_boxes' dtype, as upstream's box_iou.
at::Tensor match_predictions(const at::Tensor& pred_boxes, const at::Tensor& pred_classes,
                             const at::Tensor& gt_boxes, const at::Tensor& gt_classes,
                             const at::Tensor& iou_thresholds);

// YOLOv7 test.py's rule for one image, same arguments and result. Per class, each prediction takes its
// highest-IoU gt of that class (lowest gt index among equals); in prediction order (descending confidence,
// as NMS returns them) a prediction whose IoU with that gt is > iou_thresholds[0] claims it unless an
// earlier prediction did, and is then correct at every threshold its IoU exceeds (strictly). One claim
// serves all thresholds: a later, tighter prediction of a claimed gt stays wrong even at 0.95, where
// val.py's per-threshold matching would give it the gt.
at::Tensor match_predictions_yolov7(const at::Tensor& pred_boxes, const at::Tensor& pred_classes,
                                    const at::Tensor& gt_boxes, const at::Tensor& gt_classes,
                                    const at::Tensor& iou_thresholds);

// ultralytics/yolov3 v9.6.0 val.py's rule for one image, same arguments and result: match_predictions' two
// steps at the first threshold only, and each matched prediction is then correct at every threshold its
// IoU reaches (>=). One match serves all thresholds, as in YOLOv7's rule. IoU without v7.0's 1e-7 (v9.6.0's
// box_iou has none).
at::Tensor match_predictions_yolov3(const at::Tensor& pred_boxes, const at::Tensor& pred_classes,
                                    const at::Tensor& gt_boxes, const at::Tensor& gt_classes,
                                    const at::Tensor& iou_thresholds);

// The ten thresholds val.py uses: linspace(0.5, 0.95, 10), float32.
at::Tensor default_iou_thresholds();

struct ApPerClass {
  at::Tensor classes;          // [nc] int64: classes that have targets, ascending
  at::Tensor precision;        // [nc] double, at the confidence that maximises the (smoothed) mean F1
  at::Tensor recall;           // [nc] double, same confidence
  at::Tensor f1;               // [nc] double, same confidence
  at::Tensor true_positives;   // [nc] double: round(recall * targets), as upstream
  at::Tensor false_positives;  // [nc] double: round(tp / precision - tp)
  at::Tensor ap;               // [nc, T] double, per IoU threshold
  double best_confidence = 0;  // the confidence chosen for P, R, F1 (a point of linspace(0, 1, 1000))
  double mp = 0, mr = 0;       // mean P and R over classes
  double map50 = 0, map = 0;   // mean AP at the first threshold, and over all thresholds
  bool scored = false;         // some prediction was correct (upstream computes per-class values only then)
  MetricStyle style = MetricStyle::yolov5;  // the rule it was computed with (the charts follow it too)
  // The curves upstream plots (utils/metrics.py plot_pr_curve / plot_mc_curve), rows in `classes` order;
  // always defined (zeros where a class has no prediction, or nothing was correct at all).
  at::Tensor px;               // [1000] double: linspace(0, 1, 1000), the confidence (P/R/F1) or recall (PR) axis
  at::Tensor precision_curve;  // [nc, 1000] double: P at confidence px, IoU 0.5
  at::Tensor recall_curve;     // [nc, 1000] double: R at confidence px
  at::Tensor f1_curve;         // [nc, 1000] double: 2PR/(P+R) at confidence px (unsmoothed)
  at::Tensor pr_curve;         // [nc, 1000] double: upstream's py, the AP@0.5 precision envelope at recall px
};

// ap_per_class over a whole validation set, concatenated over images:
//   correct [N, T] bool, conf [N], pred_cls [N], target_cls [M] (any numeric dtype, on any device).
// Predictions are ranked by confidence with a stable sort (upstream: numpy's default quicksort, whose
// order among equal confidences is unspecified). Classes with targets but no predictions count with AP,
// P and R of 0. With no targets, or no correct prediction at all, everything is zero: val.py skips
// ap_per_class then and reports zeros.
// `style` chooses the recall sentinel and the F1 smoothing (MetricStyle); yolov5 is val.py's.
ApPerClass ap_per_class(const at::Tensor& correct, const at::Tensor& conf, const at::Tensor& pred_cls,
                        const at::Tensor& target_cls, MetricStyle style = MetricStyle::yolov5);

}  // namespace kestrel::eval
