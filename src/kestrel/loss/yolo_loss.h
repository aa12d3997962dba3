// YOLOv5's training loss (ComputeLoss: 1 - CIoU box loss, objectness BCE, class BCE) as tensor code over
// the whole batch. Targets come padded to a fixed capacity M with a mask, and every level builds the
// same fixed set of candidates [B, M, na, 5] (target x anchor x cell offset) with a validity mask, so the
// step has static shapes, never reads a value back to the host and can be captured in a CUDA graph.
// Invalid candidates still gather a (clamped, in-range) cell; they contribute through zero weights.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "kestrel/models/detect.h"

namespace kestrel::loss {

// Keys and defaults of YOLOv5's hyp.scratch-low.yaml (the loss part), plus train.py's --label-smoothing.
struct LossOptions {
  double box = 0.05;              // box loss gain
  double cls = 0.5;               // class loss gain
  double cls_pw = 1.0;            // class BCE pos_weight
  double obj = 1.0;               // objectness loss gain
  double obj_pw = 1.0;            // objectness BCE pos_weight
  double anchor_t = 4.0;          // a target matches an anchor when max(r, 1/r) < anchor_t for w and h
  double fl_gamma = 0.0;          // focal loss gamma (0 = plain BCE); alpha is 0.25 as upstream
  double label_smoothing = 0.0;   // eps: class targets 1 - eps/2 (positive) and eps/2 (negative)
  bool yolov7_iou = false;        // YOLOv7's CIoU (bbox_ciou below): its recipes' losses; OtaLoss always
};

// The gains as upstream train.py rescales them for the model and image size:
// box *= 3/nl, cls *= nc/80 * 3/nl, obj *= (img_size/640)^2 * 3/nl. Other keys are unchanged.
LossOptions scale_gains(LossOptions options, int64_t nl, int64_t nc, int64_t img_size);

// Objectness weight per level: [4.0, 1.0, 0.4] for 3 levels, else the first nl of [4.0, 1.0, 0.25, 0.06, 0.02].
std::vector<double> level_balance(int64_t nl);

// Complete IoU of boxes given as (cx, cy, w, h) in the last dimension (broadcasting): [..., 4] x [..., 4] -> [...].
// IoU - rho^2/c^2 - alpha v, v = 4/pi^2 (atan(w2/h2) - atan(w1/h1))^2, alpha = v / (v - IoU + 1 + eps) taken
// without gradient, eps 1e-7 in the union, the enclosing diagonal and alpha (YOLOv5's bbox_iou(CIoU=True)).
// yolov7: YOLOv7's bbox_iou, which takes w and h from the corners, adds eps to h (in the union too) and again
// in v's w/(h + eps): a box of zero size stays finite, where YOLOv5's divides 0 by 0.
at::Tensor bbox_ciou(const at::Tensor& box1, const at::Tensor& box2, double eps = 1e-7, bool yolov7 = false);

// Number of cell offsets per (target, anchor): the own cell, then left, up, right, down neighbours
// (upstream's j, k, l, m). A neighbour is used when the centre's fraction in the cell is < g towards
// it and the centre is more than one cell away from that image border: g = 0.5 gives YOLOv5's 3 positive
// cells per target and anchor (own and the two nearer neighbours), g = 1 YOLOv7's find_5_positive (all four).
constexpr int64_t kCellOffsets = 5;

// The candidates of one level: every (target m, anchor a, offset o) of every image b.
struct LevelTargets {
  at::Tensor valid;  // [B, M, na, 5] bool: a real target whose wh ratio to anchor a passes and offset o applies
  at::Tensor cell;   // [B, M, na, 5] int64: flat index into the level's [B, na, ny, nx] cells (always in range)
  at::Tensor box;    // [B, M, 1, 5, 4] float: target (x, y) relative to that cell's corner and (w, h), grid units
  at::Tensor cls;    // [B, M] int64: class id (0 for padding)
};

// targets [B, M, 5] (class, cx, cy, w, h) normalised to the image, mask [B, M] bool (false = padding,
// whose values are ignored, even NaN); anchors [na, 2] in grid units of this level; ny, nx its grid size.
LevelTargets build_targets(const at::Tensor& targets, const at::Tensor& mask, const at::Tensor& anchors, int64_t ny,
                           int64_t nx, double anchor_t, double g = 0.5);

// Element-wise BCE with logits (pos_weight as nn.BCEWithLogitsLoss), focal when gamma > 0 (upstream FocalLoss,
// alpha 0.25, before its reduction). logits and target have the same shape.
at::Tensor bce_elementwise(const at::Tensor& logits, const at::Tensor& target, double pos_weight, double gamma);

// The box, objectness and class terms of one output level from its candidates: the last step of both
// losses, which differ in how a candidate gets its target. level [B, na, ny, nx, no]; rows [B, M, na, 5, no]
// float32, the level's rows at the candidates' cells (with grad); positive [B, M, na, 5] bool; tbox
// [B, M, na, 5, 4] (or broadcastable) the targets, (x, y) relative to the candidate's cell and (w, h), grid
// units; cls int64 class ids broadcastable to [B, M, na, 5]; cell [B, M, na, 5] flat indices into the
// level's [B, na, ny, nx] cells; anchors [na, 2] grid units; balance: the level's objectness weight.
struct LevelTerms {
  at::Tensor box;  // scalar: 1 - CIoU, mean over positives
  at::Tensor obj;  // scalar: objectness BCE against the detached CIoU of positive cells, mean x balance
  at::Tensor cls;  // scalar: smoothed one-hot class BCE, mean over positives x classes (0 for one class)
};
LevelTerms candidate_terms(const at::Tensor& level, const at::Tensor& rows, const at::Tensor& positive, const at::Tensor& tbox,
                           const at::Tensor& cls, const at::Tensor& cell, const at::Tensor& anchors, int64_t nc,
                           double balance, const LossOptions& options);

// Throws kestrel::Error unless levels are nl floating tensors [B, na, ny_i, nx_i, nc + 5], targets [B, M, 5] and
// mask bool [B, M], all on one device.
void check_loss_inputs(const std::vector<at::Tensor>& levels, const at::Tensor& targets, const at::Tensor& mask,
                       int64_t nl, int64_t na, int64_t nc);

// The constructor checks shared by YoloLoss and OtaLoss: an initialised head (anchors in grid units) and
// option values in range (anchor_t > 1, fl_gamma >= 0, label smoothing in [0, 1], positive pos_weights).
void check_loss_setup(const models::Detect& head, const LossOptions& options);

class YoloLoss {
 public:
  // options: the hyp file's values; the constructor applies scale_gains for the head's nl, nc and img_size.
  // The head must be initialised (anchors in grid units). Its anchors are copied once, on its device.
  YoloLoss(const models::Detect& head, LossOptions options, int64_t img_size);

  struct Result {
    at::Tensor total;  // scalar float, with grad: (box * lbox + obj * lobj + cls * lcls) * batch size
    at::Tensor items;  // [3] float, detached: box * lbox, obj * lobj, cls * lcls (for logging)
  };
  // levels[i] [B, na, ny_i, nx_i, nc + 5] raw head outputs (any float dtype; the loss is computed in float32);
  // targets [B, M, 5], target_mask [B, M] bool, on the levels' device.
  Result operator()(const std::vector<at::Tensor>& levels, const at::Tensor& targets,
                    const at::Tensor& target_mask) const;

  const LossOptions& options() const { return options_; }  // after scale_gains
  const std::vector<double>& balance() const { return balance_; }

 private:
  LevelTerms level_loss(int64_t i, const at::Tensor& level, const at::Tensor& targets, const at::Tensor& mask,
                       const at::Tensor& anchors) const;
  const at::Tensor& anchors_on(const at::Device& device) const;

  LossOptions options_;
  int64_t nc_, nl_, na_;
  std::vector<double> balance_;
  mutable at::Tensor anchors_;  // [nl, na, 2] float, grid units; moved once if the levels live elsewhere
};

}  // namespace kestrel::loss
