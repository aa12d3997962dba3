#include "kestrel/loss/ota_loss.h"

#include <algorithm>
#include <limits>

#include "kestrel/core/error.h"

namespace kestrel::loss {
namespace {

constexpr int64_t kTopIous = 10;       // dynamic k: the sum of a target's 10 largest IoUs
constexpr int64_t kAuxTopIous = 20;    // ... 20 in ComputeLossAuxOTA
constexpr double kLeadOffsetBias = 0.5, kAuxOffsetBias = 1.0;  // find_3_positive's and find_5_positive's g
constexpr double kAuxWeight = 0.25;    // the auxiliary levels' share of every term
constexpr double kIouCostWeight = 3.0;
constexpr double kLogEps = 1e-8;       // -log(IoU + eps)
constexpr double kCostCap = 1e30;      // stands in for a non-finite cost of a real pair

// A level's prediction rows at the candidates' cells: level [B, na, ny, nx, no], cell [B, M, na, 5] flat
// indices -> [B, M, na, 5, no] float32.
at::Tensor rows_at(const at::Tensor& level, const at::Tensor& cell) {
  std::vector<int64_t> shape = cell.sizes().vec();
  shape.push_back(level.size(-1));
  return level.reshape({-1, level.size(-1)}).index_select(0, cell.view(-1)).to(at::kFloat).view(shape);
}

// (cx, cy, w, h) -> (x1, y1, x2, y2) in the last dimension.
at::Tensor xywh_to_xyxy(const at::Tensor& b) {
  const at::Tensor xy = b.narrow(-1, 0, 2), half = b.narrow(-1, 2, 2) / 2;
  return at::cat({xy - half, xy + half}, -1);
}

at::Tensor corner_area(const at::Tensor& b) {
  return (b.select(-1, 2) - b.select(-1, 0)) * (b.select(-1, 3) - b.select(-1, 1));
}

// Pairwise IoU of corner boxes, a [B, P, 4] x b [B, Q, 4] -> [B, P, Q] (no eps, as upstream box_iou).
at::Tensor pairwise_iou(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor a4 = a.unsqueeze(2), b4 = b.unsqueeze(1);  // [B, P, 1, 4], [B, 1, Q, 4]
  const at::Tensor wh = (at::minimum(a4.narrow(-1, 2, 2), b4.narrow(-1, 2, 2)) -
                         at::maximum(a4.narrow(-1, 0, 2), b4.narrow(-1, 0, 2)))
                            .clamp_min(0);  // [B, P, Q, 2]
  const at::Tensor inter = wh.select(-1, 0) * wh.select(-1, 1);
  return inter / (corner_area(a).unsqueeze(2) + corner_area(b).unsqueeze(1) - inter);
}

// build_targets' layout [B, M, na, 5, ...] -> upstream's candidate order within an image [B, 5 na M, ...]
// (offset, then anchor, then target), and back.
at::Tensor to_image_order(const at::Tensor& t) {
  std::vector<int64_t> perm = {0, 3, 2, 1}, shape = {t.size(0), -1};
  for (int64_t d = 4; d < t.dim(); ++d) perm.push_back(d), shape.push_back(t.size(d));
  return t.permute(perm).reshape(shape);
}
at::Tensor from_image_order(const at::Tensor& t, int64_t M, int64_t na) {  // [B, 5 na M] -> [B, M, na, 5]
  return t.view({t.size(0), kCellOffsets, na, M}).permute({0, 3, 2, 1}).contiguous();
}

}  // namespace

OtaLoss::OtaLoss(const models::Detect& head, LossOptions options, int64_t img_size)
    : nc_(head.nc()), nl_(head.num_levels()), na_(head.num_anchors()), aux_(head.aux()),
      top_ious_(head.aux() ? kAuxTopIous : kTopIous), strides_(head.strides()) {
  check_loss_setup(head, options);
  options_ = scale_gains(options, nl_, nc_, img_size);
  options_.yolov7_iou = true;  // YOLOv7's loss code, whatever the recipe
  balance_ = level_balance(nl_);
  anchors_ = head.anchors().detach().to(at::kFloat).clone();  // [nl, na, 2], on the head's device
}

const at::Tensor& OtaLoss::anchors_on(const at::Device& device) const {
  if (anchors_.device() != device) anchors_ = anchors_.to(device);
  return anchors_;
}

void OtaLoss::check_inputs(const std::vector<at::Tensor>& levels, const at::Tensor& targets,
                           const at::Tensor& mask) const {
  if (!aux_) return check_loss_inputs(levels, targets, mask, nl_, na_, nc_);
  if (static_cast<int64_t>(levels.size()) != 2 * nl_)
    fail("loss: an IAuxDetect head gives ", 2 * nl_, " levels in training (lead, then auxiliary), got ", levels.size());
  const std::vector<at::Tensor> lead(levels.begin(), levels.begin() + nl_), auxiliary(levels.begin() + nl_, levels.end());
  check_loss_inputs(lead, targets, mask, nl_, na_, nc_);
  check_loss_inputs(auxiliary, targets, mask, nl_, na_, nc_);
  for (int64_t i = 0; i < nl_; ++i)
    if (lead[i].sizes() != auxiliary[i].sizes())
      fail("loss: auxiliary level ", i, " is ", auxiliary[i].sizes(), ", unlike its lead level ", lead[i].sizes());
}

std::vector<OtaLoss::LevelCandidates> OtaLoss::candidates(const std::vector<at::Tensor>& levels,
                                                          const at::Tensor& targets, const at::Tensor& mask,
                                                          double g) const {
  const at::Tensor& anchors = anchors_on(targets.device());
  std::vector<LevelCandidates> out;
  for (int64_t i = 0; i < nl_; ++i) {
    const at::Tensor& level = levels[i];
    const int64_t ny = level.size(2), nx = level.size(3);
    LevelCandidates c;
    c.lt = build_targets(targets, mask, anchors[i], ny, nx, options_.anchor_t, g);
    c.rows = rows_at(level, c.lt.cell);
    c.gi = c.lt.cell.remainder(nx);  // cell = ((b na + a) ny + gj) nx + gi
    c.gj = at::div(c.lt.cell, nx, "floor").remainder(ny);
    out.push_back(std::move(c));
  }
  return out;
}

OtaLoss::Assignment OtaLoss::assign(const std::vector<LevelCandidates>& cands, const std::vector<at::Tensor>& levels,
                                    const at::Tensor& targets, const at::Tensor& mask) const {
  at::NoGradGuard no_grad;
  const at::Tensor& anchors = anchors_on(targets.device());
  const int64_t B = targets.size(0), M = targets.size(1);

  // Every candidate of every level in upstream's order: pred_box [B, N, 4] corners in input pixels,
  // obj [B, N], cls [B, N, nc] logits, valid [B, N], key [B, N] its cell among all levels' cells; N = nl 5 na M.
  std::vector<at::Tensor> boxes, obj, cls, valid, keys;
  int64_t cells = 0;  // all levels' cells, B na ny_i nx_i each
  for (int64_t i = 0; i < nl_; ++i) {
    const LevelCandidates& c = cands[i];
    const at::Tensor rows = c.rows.detach();  // [B, M, na, 5, no]
    const double stride = strides_[i];
    const at::Tensor grid = at::stack({c.gi, c.gj}, -1).to(at::kFloat);  // [B, M, na, 5, 2]
    const at::Tensor pxy = (rows.narrow(-1, 0, 2).sigmoid() * 2 - 0.5 + grid) * stride;
    const at::Tensor pwh = (rows.narrow(-1, 2, 2).sigmoid() * 2).pow(2) * anchors[i].view({1, 1, na_, 1, 2}) * stride;
    boxes.push_back(to_image_order(xywh_to_xyxy(at::cat({pxy, pwh}, -1))));
    obj.push_back(to_image_order(rows.select(-1, 4)));
    cls.push_back(to_image_order(rows.narrow(-1, 5, nc_)));
    valid.push_back(to_image_order(c.lt.valid));
    keys.push_back(to_image_order(c.lt.cell + cells));
    cells += levels[i].size(0) * na_ * levels[i].size(2) * levels[i].size(3);
  }
  const at::Tensor pred_box = at::cat(boxes, 1), pred_obj = at::cat(obj, 1), pred_cls = at::cat(cls, 1);
  const at::Tensor cand_valid = at::cat(valid, 1);
  const int64_t N = cand_valid.size(1);

  // The same (cell, anchor) reached twice in an image (by two targets, or a neighbour offset clamped back to
  // the own cell) must tie exactly; elementwise kernels may round the same value differently by position, so
  // every candidate reads IoU and cost from the first candidate with its cell. first [B, M, N] (along N)
  const auto long_opts = cand_valid.options().dtype(at::kLong);
  const at::Tensor order = at::arange(N, long_opts).expand({B, N});
  const at::Tensor key = at::where(cand_valid, at::cat(keys, 1), cells);  // invalid ones share a spare slot
  const at::Tensor first_of_key = at::full({cells + 1}, N, long_opts)
                                      .scatter_reduce(0, key.reshape(-1), order.reshape(-1), "amin", true);
  const at::Tensor first = at::where(cand_valid, first_of_key.index_select(0, key.reshape(-1)).view({B, N}), order)
                               .unsqueeze(1).expand({B, M, N});

  // Targets in input pixels (padding rows zeroed, whatever they hold). [B, M, 4] corners
  const at::Tensor t = targets.to(at::kFloat).masked_fill(mask.logical_not().unsqueeze(-1), 0);  // [B, M, 5]
  const double height = static_cast<double>(levels[0].size(2)) * strides_[0];
  const double width = static_cast<double>(levels[0].size(3)) * strides_[0];
  const at::Tensor gt_box = xywh_to_xyxy(at::stack({t.select(2, 1) * width, t.select(2, 2) * height,
                                                    t.select(2, 3) * width, t.select(2, 4) * height}, -1));

  // IoU of every (target, candidate) pair of an image; 0 where either is not real. [B, M, N]
  const at::Tensor pair_valid = mask.unsqueeze(2) & cand_valid.unsqueeze(1);
  const at::Tensor iou = at::where(pair_valid, pairwise_iou(gt_box, pred_box), 0).gather(2, first);
  const int64_t k = std::min(top_ious_, N);
  const at::Tensor dynamic_k = std::get<0>(iou.topk(k, -1)).sum(-1).to(at::kLong).clamp(1, k);  // [B, M]

  // Class cost: sum over classes of BCE(logit(y), onehot), y = sqrt(sigmoid(cls) sigmoid(obj)), that is
  // -log(1 - y) per class, but -log(y) at the target's class: a per-candidate sum plus a correction. [B, M, N]
  const at::Tensor y = (pred_cls.sigmoid() * pred_obj.sigmoid().unsqueeze(-1)).sqrt();  // [B, N, nc]
  const at::Tensor neg_sum = -at::log1p(-y).sum(-1);                                     // [B, N]
  const at::Tensor cls_id = t.select(2, 0).to(at::kLong).clamp(0, nc_ - 1);            // [B, M]
  const at::Tensor y_at_cls = y.transpose(1, 2).gather(1, cls_id.unsqueeze(-1).expand({B, M, N}));
  const at::Tensor cost_raw = neg_sum.unsqueeze(1) + at::log1p(-y_at_cls) - at::log(y_at_cls) -
                              kIouCostWeight * at::log(iou + kLogEps);
  const at::Tensor cost = at::where(pair_valid, cost_raw.nan_to_num(kCostCap, kCostCap, kCostCap),
                                    std::numeric_limits<double>::infinity()).gather(2, first);  // [B, M, N]

  // Each target claims its dynamic_k cheapest candidates: those below the k-th smallest cost, then those equal
  // to it in candidate order until the count is reached. [B, M, N]
  const at::Tensor smallest = std::get<0>(cost.topk(k, -1, /*largest=*/false, /*sorted=*/true));  // [B, M, k]
  const at::Tensor threshold = smallest.gather(-1, (dynamic_k - 1).unsqueeze(-1));               // [B, M, 1]
  const at::Tensor below = cost < threshold, tied = cost == threshold;
  const at::Tensor quota = dynamic_k.unsqueeze(-1) - below.sum(-1, /*keepdim=*/true);
  const at::Tensor claimed = pair_valid & (below | (tied & (tied.cumsum(-1) <= quota)));

  // A candidate claimed more than once goes to the image's cheapest target. [B, N]
  const at::Tensor claims = claimed.sum(1);
  const at::Tensor owner_flat = at::where(claims > 1, cost.argmin(1), claimed.to(at::kInt).argmax(1));
  const at::Tensor matched_flat = claims > 0;

  Assignment out;
  out.dynamic_k = dynamic_k;
  const int64_t n_i = M * na_ * kCellOffsets;  // candidates per image and level
  for (int64_t i = 0, offset = 0; i < nl_; ++i) {
    const at::Tensor matched = from_image_order(matched_flat.narrow(1, offset, n_i), M, na_);
    out.owner.push_back(at::where(matched, from_image_order(owner_flat.narrow(1, offset, n_i), M, na_), 0));
    out.matched.push_back(matched);
    offset += n_i;
  }
  return out;
}

OtaLoss::Assignment OtaLoss::assign(const std::vector<at::Tensor>& levels, const at::Tensor& targets,
                                    const at::Tensor& target_mask, bool auxiliary) const {
  if (auxiliary && !aux_) fail("loss: an auxiliary assignment needs an IAuxDetect head");
  const std::vector<at::Tensor> lead(levels.begin(), levels.begin() + std::min<int64_t>(nl_, levels.size()));
  check_loss_inputs(lead, targets, target_mask, nl_, na_, nc_);
  if (targets.size(1) == 0)  // as operator(): one padding row
    return assign(levels, at::zeros({targets.size(0), 1, 5}, targets.options()),
                  at::zeros({targets.size(0), 1}, target_mask.options()), auxiliary);
  at::NoGradGuard no_grad;
  return assign(candidates(lead, targets, target_mask, auxiliary ? kAuxOffsetBias : kLeadOffsetBias), lead, targets,
                target_mask);
}

OtaLoss::Result OtaLoss::operator()(const std::vector<at::Tensor>& levels, const at::Tensor& targets,
                                    const at::Tensor& target_mask) const {
  check_inputs(levels, targets, target_mask);
  // No target rows at all: one padding row instead, which matches nothing (the assignment's top-k needs a row).
  if (targets.size(1) == 0)
    return (*this)(levels, at::zeros({targets.size(0), 1, 5}, targets.options()),
                   at::zeros({targets.size(0), 1}, target_mask.options()));
  const std::vector<at::Tensor> lead(levels.begin(), levels.begin() + nl_);
  const std::vector<LevelCandidates> cands = candidates(lead, targets, target_mask, kLeadOffsetBias);
  const Assignment assigned = assign(cands, lead, targets, target_mask);
  // ComputeLossAuxOTA: the auxiliary assignment also reads the lead predictions; its candidates' rows for the
  // loss come from the auxiliary levels.
  std::vector<LevelCandidates> aux_cands;
  Assignment aux_assigned;
  if (aux_) {
    at::NoGradGuard no_grad;  // the auxiliary candidates' lead rows only feed the assignment
    aux_cands = candidates(lead, targets, target_mask, kAuxOffsetBias);
    aux_assigned = assign(aux_cands, lead, targets, target_mask);
  }
  const int64_t B = targets.size(0);
  const at::Tensor t = targets.to(at::kFloat).masked_fill(target_mask.logical_not().unsqueeze(-1), 0);  // [B, M, 5]

  at::Tensor lbox, lobj, lcls;
  for (int64_t i = 0; i < nl_; ++i) {
    LevelTerms sum = level_terms(i, cands[i], cands[i].rows, assigned.matched[i], assigned.owner[i], levels[i], t);
    if (aux_) {
      const at::Tensor& aux_level = levels[nl_ + i];  // [B, na, ny, nx, no], the lead level's shape
      const LevelTerms a = level_terms(i, aux_cands[i], rows_at(aux_level, aux_cands[i].lt.cell), aux_assigned.matched[i],
                                  aux_assigned.owner[i], aux_level, t);
      sum = {sum.box + kAuxWeight * a.box, sum.obj + kAuxWeight * a.obj, sum.cls + kAuxWeight * a.cls};
    }
    lbox = i == 0 ? sum.box : lbox + sum.box;
    lobj = i == 0 ? sum.obj : lobj + sum.obj;
    lcls = i == 0 ? sum.cls : lcls + sum.cls;
  }
  const at::Tensor items = at::stack({lbox * options_.box, lobj * options_.obj, lcls * options_.cls});  // [3]
  Result out;
  out.total = items.sum() * static_cast<double>(B);
  out.items = items.detach();
  return out;
}

LevelTerms OtaLoss::level_terms(int64_t i, const LevelCandidates& c, const at::Tensor& rows, const at::Tensor& matched,
                                const at::Tensor& owner, const at::Tensor& level, const at::Tensor& t) const {
  const at::Tensor& anchors = anchors_on(t.device());
  const int64_t B = t.size(0), M = t.size(1), ny = level.size(2), nx = level.size(3);
  // The assigned target of every candidate, in this level's grid units relative to the candidate's cell.
  const int64_t slots = M * na_ * kCellOffsets;
  const at::Tensor tgt = t.gather(1, owner.reshape({B, slots, 1}).expand({B, slots, 5})).view({B, M, na_, kCellOffsets, 5});
  const at::Tensor tbox = at::stack({tgt.select(-1, 1) * nx - c.gi.to(at::kFloat),
                                     tgt.select(-1, 2) * ny - c.gj.to(at::kFloat), tgt.select(-1, 3) * nx,
                                     tgt.select(-1, 4) * ny}, -1);  // [B, M, na, 5, 4]
  return candidate_terms(level, rows, matched, tbox, tgt.select(-1, 0).to(at::kLong), c.lt.cell, anchors[i], nc_,
                         balance_[i], options_);
}

}  // namespace kestrel::loss
