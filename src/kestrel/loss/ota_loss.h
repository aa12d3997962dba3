// YOLOv7's OTA training loss (upstream ComputeLossOTA, hyp loss_ota: 1) as tensor code over the whole batch.
//
// Assignment, per image: the candidates are YOLOv5's 3-positive cells (build_targets) of every target of the
// image on every level. Each real target g and candidate n get
//   IoU(g, n)  between g and the box predicted at n (decoded, in input pixels),
//   cost(g, n) = sum_c BCE(sqrt(sigmoid(cls_c) sigmoid(obj)), onehot(class g)_c) + 3 (-log(IoU + 1e-8)).
// g's dynamic k = max(1, trunc(sum of its 10 largest IoUs over the image's candidates)); g claims its k cheapest
// candidates; a candidate claimed by several targets goes to the target (of the image) with the smallest cost.
// Then, on every level, as YOLOv5's loss over the assigned candidates: box 1 - CIoU against the assigned
// target, objectness target CIoU (detached, clamped at 0) with the level balance, class BCE with label
// smoothing; the same means, gains (scale_gains) and total = (box + obj + cls) * batch size.
//
// Fixed capacity: an image has M x nl x 5 x na candidate slots (valid or not) in upstream's order (level,
// offset, anchor, target), the cost matrix is [B, M, M nl 5 na], the dynamic-k selection is a top-10 plus a
// tie-aware threshold, so shapes never depend on the data, nothing is read back to the host and the step stays
// graph-capturable. Memory grows with M^2: B 16, M 50, 3 levels, 3 anchors is a 1.8 M-entry cost matrix.
//
// Deliberate differences from upstream (WongKinYiu/yolov7 a207844, utils/loss.py):
// - Ties: among candidates of equal cost a target claims those earliest in upstream's candidate order
//   (torch.topk leaves the order of ties unspecified). Equal costs occur for the same (cell, anchor) reached
//   twice in an image (by two targets, or by a neighbour offset that truncates back to the own cell; kestrel
//   makes their IoUs and costs bit-identical); they only matter when the k-th cheapest is such a duplicate, and
//   then upstream may spread the copies over targets differently. Conflicts go to the first of equally cheap
//   targets, as upstream's torch.min.
// - Objectness at a cell assigned more than once keeps the largest IoU (upstream: the last write wins), as
//   YoloLoss does.
// - Target boxes are scaled to pixels by the input width for x, w and its height for y, h; upstream scales all
//   four by the height (the same for square inputs, which upstream training uses).
// - Costs that are not finite (saturated sigmoids) are replaced by 1e30, so the assignment stays defined;
//   upstream would get NaN there. A class id outside [0, nc) costs as class nc - 1 but, as in YoloLoss, gets no
//   positive class target in the loss (upstream's one_hot would raise).
// - autobalance is not supported (upstream's default is off); model.gr is 1 (upstream's value).
//
// With an IAuxDetect head (the P6 models; upstream ComputeLossAuxOTA, which train_aux.py always uses) the
// levels are the nl lead levels and then the nl auxiliary ones. Two assignments are made, both from the lead
// predictions and with a dynamic k from the 20 largest IoUs: the lead one from the 3-positive candidates as
// above, the auxiliary one from find_5_positive's (own cell and all four neighbours, g = 1). The loss is
// the lead levels' terms against the lead assignment plus 0.25 times the auxiliary levels' terms (box, objectness
// and class, each with the same means, balance and gains) against the auxiliary assignment.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "kestrel/loss/yolo_loss.h"
#include "kestrel/models/detect.h"

namespace kestrel::loss {

class OtaLoss {
 public:
  // options: the hyp file's values; the constructor applies scale_gains for the head's nl, nc and img_size.
  // The head must be initialised (anchors in grid units, strides known). Its anchors are copied once.
  // An aux head (head.aux()) makes this upstream's ComputeLossAuxOTA.
  OtaLoss(const models::Detect& head, LossOptions options, int64_t img_size);

  using Result = YoloLoss::Result;
  // levels[i] [B, na, ny_i, nx_i, nc + 5] raw head outputs (any float dtype; computed in float32), with the
  // input size ny_0 * stride_0 x nx_0 * stride_0 (2 nl levels, lead then auxiliary, with an aux head);
  // targets [B, M, 5] (class, cx, cy, w, h normalised), target_mask [B, M] bool (false = padding, values
  // ignored), on the levels' device.
  Result operator()(const std::vector<at::Tensor>& levels, const at::Tensor& targets,
                    const at::Tensor& target_mask) const;

  // The assignment alone (no gradient), in build_targets' layout per level.
  struct Assignment {
    std::vector<at::Tensor> matched;  // per level [B, M, na, 5] bool: candidate (m, a, o) is a positive
    std::vector<at::Tensor> owner;    // per level [B, M, na, 5] int64: the target row it is assigned to (0 if not)
    at::Tensor dynamic_k;             // [B, M] int64 (1 for padding rows)
  };
  // `auxiliary`: an aux head's auxiliary assignment (5-positive candidates) instead of the lead one; either
  // reads only the first nl levels.
  Assignment assign(const std::vector<at::Tensor>& levels, const at::Tensor& targets, const at::Tensor& target_mask,
                    bool auxiliary = false) const;

  bool aux() const { return aux_; }
  const LossOptions& options() const { return options_; }  // after scale_gains
  const std::vector<double>& balance() const { return balance_; }

 private:
  // Candidates of one level, gathered once for assignment and loss.
  struct LevelCandidates {
    LevelTargets lt;          // build_targets' candidates [B, M, na, 5]
    at::Tensor rows;          // [B, M, na, 5, no] float32 prediction rows (with grad)
    at::Tensor gi, gj;        // [B, M, na, 5] int64: the candidate's cell
  };
  // g: the neighbour rule of build_targets (0.5: 3-positive, 1: 5-positive).
  std::vector<LevelCandidates> candidates(const std::vector<at::Tensor>& levels, const at::Tensor& targets,
                                          const at::Tensor& mask, double g) const;
  Assignment assign(const std::vector<LevelCandidates>& cands, const std::vector<at::Tensor>& levels,
                    const at::Tensor& targets, const at::Tensor& mask) const;
  // Level i's box, objectness and class terms for the candidates' assignment, read from `level`
  // ([B, na, ny, nx, no], the lead or the auxiliary level i) and `rows` (its [B, M, na, 5, no] float32 rows
  // at the candidates' cells); t [B, M, 5] the targets with padding zeroed.
  LevelTerms level_terms(int64_t i, const LevelCandidates& c, const at::Tensor& rows, const at::Tensor& matched,
                    const at::Tensor& owner, const at::Tensor& level, const at::Tensor& t) const;
  void check_inputs(const std::vector<at::Tensor>& levels, const at::Tensor& targets, const at::Tensor& mask) const;
  const at::Tensor& anchors_on(const at::Device& device) const;

  LossOptions options_;
  int64_t nc_, nl_, na_;
  bool aux_;
  int64_t top_ious_;  // dynamic k: the sum of a target's largest IoUs, this many (10; 20 with an aux head)
  std::vector<double> strides_;
  std::vector<double> balance_;
  mutable at::Tensor anchors_;  // [nl, na, 2] float, grid units; moved once if the levels live elsewhere
};

}  // namespace kestrel::loss
