#include "kestrel/loss/yolo_loss.h"

#include <cmath>

#include "kestrel/core/error.h"

namespace kestrel::loss {
namespace {

constexpr double kFocalAlpha = 0.25;  // upstream FocalLoss default
constexpr double kPi = 3.14159265358979323846;

// True where v is less than g past a cell border and more than one cell from the low image edge:
// upstream's (v % 1 < g) & (v > 1), with Python's % (remainder, not fmod).
at::Tensor near_low_border(const at::Tensor& v, double g) { return (at::remainder(v, 1.0) < g) & (v > 1.0); }

// Candidate cell coordinate for each of the 5 offsets along one axis: own, the "low" neighbour for the
// axis' own offset slot, the "high" neighbour for its far-side slot. v [B, M] -> [B, M, 5].
// slots: x uses (own, low x, own, high x, own); y uses (own, own, low y, own, high y).
at::Tensor offset_coords(const at::Tensor& v, int64_t low_slot, int64_t high_slot, double g) {
  std::vector<at::Tensor> cols(kCellOffsets, v);
  cols[low_slot] = v - g;   // centre moved g cells towards the low neighbour
  cols[high_slot] = v + g;  // ... towards the high neighbour
  return at::stack(cols, -1);
}

}  // namespace

at::Tensor bce_elementwise(const at::Tensor& logits, const at::Tensor& target, double pos_weight, double gamma) {
  // A device-side fill, not a host copy: keeps the step capturable.
  const at::Tensor pw = at::full({1}, pos_weight, logits.options());
  at::Tensor loss = at::binary_cross_entropy_with_logits(logits, target, {}, pw, at::Reduction::None);
  if (gamma > 0) {
    const at::Tensor p = logits.sigmoid();
    const at::Tensor p_t = target * p + (1 - target) * (1 - p);
    const at::Tensor alpha_factor = target * kFocalAlpha + (1 - target) * (1 - kFocalAlpha);
    loss = loss * alpha_factor * (1 - p_t).pow(gamma);
  }
  return loss;
}

LossOptions scale_gains(LossOptions options, int64_t nl, int64_t nc, int64_t img_size) {
  if (nl < 1 || nc < 1 || img_size < 1)
    fail("loss: cannot scale the gains for ", nl, " levels, ", nc, " classes, image size ", img_size);
  const double per_level = 3.0 / static_cast<double>(nl);
  options.box *= per_level;
  options.cls *= static_cast<double>(nc) / 80.0 * 3.0 / static_cast<double>(nl);
  options.obj *= std::pow(static_cast<double>(img_size) / 640.0, 2) * 3.0 / static_cast<double>(nl);
  return options;
}

std::vector<double> level_balance(int64_t nl) {
  if (nl == 3) return {4.0, 1.0, 0.4};
  const std::vector<double> p3_p7 = {4.0, 1.0, 0.25, 0.06, 0.02};
  if (nl < 1 || nl > static_cast<int64_t>(p3_p7.size()))
    fail("loss: objectness balance is defined for 1 to 5 detection levels, not ", nl);
  return std::vector<double>(p3_p7.begin(), p3_p7.begin() + nl);
}

at::Tensor bbox_ciou(const at::Tensor& box1, const at::Tensor& box2, double eps, bool yolov7) {
  const at::Tensor x1 = box1.select(-1, 0), y1 = box1.select(-1, 1), x2 = box2.select(-1, 0), y2 = box2.select(-1, 1);
  at::Tensor w1 = box1.select(-1, 2), h1 = box1.select(-1, 3), w2 = box2.select(-1, 2), h2 = box2.select(-1, 3);
  const at::Tensor l1 = x1 - w1 / 2, r1 = x1 + w1 / 2, t1 = y1 - h1 / 2, b1 = y1 + h1 / 2;
  const at::Tensor l2 = x2 - w2 / 2, r2 = x2 + w2 / 2, t2 = y2 - h2 / 2, b2 = y2 + h2 / 2;
  if (yolov7) {
    w1 = r1 - l1, h1 = b1 - t1 + eps;
    w2 = r2 - l2, h2 = b2 - t2 + eps;
  }
  const at::Tensor inter = (at::minimum(r1, r2) - at::maximum(l1, l2)).clamp_min(0) *
                           (at::minimum(b1, b2) - at::maximum(t1, t2)).clamp_min(0);
  const at::Tensor iou = inter / (w1 * h1 + w2 * h2 - inter + eps);
  const at::Tensor cw = at::maximum(r1, r2) - at::minimum(l1, l2);  // enclosing box
  const at::Tensor ch = at::maximum(b1, b2) - at::minimum(t1, t2);
  const at::Tensor c2 = cw.pow(2) + ch.pow(2) + eps;
  const at::Tensor rho2 = ((l2 + r2 - l1 - r1).pow(2) + (t2 + b2 - t1 - b1).pow(2)) / 4;  // centre distance^2
  const double h_eps = yolov7 ? eps : 0.0;
  const at::Tensor v = (4 / (kPi * kPi)) * (at::atan(w2 / (h2 + h_eps)) - at::atan(w1 / (h1 + h_eps))).pow(2);
  const at::Tensor alpha = (v / (v - iou + (1 + eps))).detach();  // a weight, not a path for the gradient
  return iou - (rho2 / c2 + v * alpha);
}

LevelTargets build_targets(const at::Tensor& targets, const at::Tensor& mask, const at::Tensor& anchors, int64_t ny,
                           int64_t nx, double anchor_t, double g) {
  const int64_t B = targets.size(0), M = targets.size(1), na = anchors.size(0);
  // Padding rows become zeros whatever they hold (even NaN): w = h = 0 fails the ratio test below.
  const at::Tensor t = targets.to(at::kFloat).masked_fill(mask.logical_not().unsqueeze(-1), 0);  // [B, M, 5]
  const at::Tensor gx = t.select(2, 1) * nx, gy = t.select(2, 2) * ny;  // [B, M], grid units
  const at::Tensor gw = t.select(2, 3) * nx, gh = t.select(2, 4) * ny;

  // Anchor match: both wh ratios within a factor anchor_t of the anchor. [B, M, na]
  const at::Tensor r = at::stack({gw, gh}, -1).unsqueeze(2) / anchors.to(at::kFloat).view({1, 1, na, 2});
  const at::Tensor match = (at::maximum(r, r.reciprocal()).amax(-1) < anchor_t) & mask.unsqueeze(-1);

  // Offsets (own, left, up, right, down) that apply; "far side" uses the distance to the high border. [B, M, 5]
  const at::Tensor gxi = nx - gx, gyi = ny - gy;
  const at::Tensor own = at::ones_like(match.select(2, 0));
  const at::Tensor use = at::stack({own, near_low_border(gx, g), near_low_border(gy, g), near_low_border(gxi, g),
                                    near_low_border(gyi, g)}, -1);

  // Cells: truncate the shifted centre, clamp into the grid (a centre on the far border, cx = 1, falls on
  // the last cell). Target xy is relative to the clamped cell's corner. [B, M, 5]
  const at::Tensor gi = at::trunc(offset_coords(gx, 1, 3, g)).clamp(0, nx - 1);
  const at::Tensor gj = at::trunc(offset_coords(gy, 2, 4, g)).clamp(0, ny - 1);
  const at::Tensor box = at::stack({gx.unsqueeze(-1) - gi, gy.unsqueeze(-1) - gj,
                                    gw.unsqueeze(-1).expand_as(gi), gh.unsqueeze(-1).expand_as(gi)}, -1);

  const auto long_opts = targets.options().dtype(at::kLong);
  const at::Tensor b = at::arange(B, long_opts).view({B, 1, 1, 1});
  const at::Tensor a = at::arange(na, long_opts).view({1, 1, na, 1});
  const at::Tensor cell = ((b * na + a) * ny + gj.to(at::kLong).unsqueeze(2)) * nx + gi.to(at::kLong).unsqueeze(2);

  LevelTargets out;
  out.valid = match.unsqueeze(-1) & use.unsqueeze(2);  // [B, M, na, 5]
  out.cell = cell.expand({B, M, na, kCellOffsets}).contiguous();
  out.box = box.unsqueeze(2);                          // [B, M, 1, 5, 4]
  out.cls = t.select(2, 0).to(at::kLong);              // [B, M]
  return out;
}

void check_loss_setup(const models::Detect& head, const LossOptions& options) {
  if (head.strides().empty()) fail("loss: the detection head is not initialised (anchors are not in grid units yet)");
  if (!(options.anchor_t > 1)) fail("loss: anchor_t must be > 1, got ", options.anchor_t);
  if (!(options.fl_gamma >= 0)) fail("loss: fl_gamma must be >= 0, got ", options.fl_gamma);
  if (!(options.label_smoothing >= 0 && options.label_smoothing <= 1))
    fail("loss: label_smoothing must be in [0, 1], got ", options.label_smoothing);
  if (!(options.cls_pw > 0 && options.obj_pw > 0)) fail("loss: cls_pw and obj_pw must be > 0");
}

YoloLoss::YoloLoss(const models::Detect& head, LossOptions options, int64_t img_size)
    : nc_(head.nc()), nl_(head.num_levels()), na_(head.num_anchors()) {
  check_loss_setup(head, options);
  options_ = scale_gains(options, nl_, nc_, img_size);
  balance_ = level_balance(nl_);
  anchors_ = head.anchors().detach().to(at::kFloat).clone();  // [nl, na, 2], on the head's device
}

const at::Tensor& YoloLoss::anchors_on(const at::Device& device) const {
  // Normally the head and its outputs share a device and this never copies; otherwise copy once and keep.
  if (anchors_.device() != device) anchors_ = anchors_.to(device);
  return anchors_;
}

void check_loss_inputs(const std::vector<at::Tensor>& levels, const at::Tensor& targets, const at::Tensor& mask,
                       int64_t nl, int64_t na, int64_t nc) {
  if (static_cast<int64_t>(levels.size()) != nl) fail("loss: expected ", nl, " levels, got ", levels.size());
  if (targets.dim() != 3 || targets.size(2) != 5)
    fail("loss: targets must be [B, M, 5] (class, cx, cy, w, h), got ", targets.sizes());
  if (mask.dim() != 2 || mask.scalar_type() != at::kBool || mask.size(0) != targets.size(0) ||
      mask.size(1) != targets.size(1))
    fail("loss: target_mask must be bool [B, M] = ", targets.sizes().slice(0, 2), ", got ", mask.sizes());
  for (int64_t i = 0; i < nl; ++i) {
    const at::Tensor& p = levels[i];
    if (p.dim() != 5 || p.size(0) != targets.size(0) || p.size(1) != na || p.size(4) != nc + 5)
      fail("loss: level ", i, " must be [B=", targets.size(0), ", na=", na, ", ny, nx, nc+5=", nc + 5, "], got ",
           p.sizes());
    if (!at::isFloatingType(p.scalar_type())) fail("loss: level ", i, " is not a floating-point tensor");
    if (p.device() != targets.device() || p.device() != mask.device())
      fail("loss: level ", i, ", targets and target_mask must be on one device");
  }
}

LevelTerms candidate_terms(const at::Tensor& level, const at::Tensor& rows, const at::Tensor& positive, const at::Tensor& tbox,
                           const at::Tensor& cls, const at::Tensor& cell, const at::Tensor& anchors, int64_t nc,
                           double balance, const LossOptions& options) {
  const int64_t na = anchors.size(0);
  const at::Tensor n = positive.sum().to(at::kFloat);  // positives (a device scalar, never read back)
  const at::Tensor positive4 = positive.unsqueeze(-1);

  // Box: 1 - CIoU, mean over positives. Other candidates compare two unit boxes, not their cell's
  // prediction: a prediction of zero height there (saturated logits) would turn the masked-out CIoU's zero
  // gradient into NaN (0 x inf) in that cell; upstream computes CIoU for positives only.
  const at::Tensor pxy = rows.narrow(-1, 0, 2).sigmoid() * 2 - 0.5;
  const at::Tensor pwh = (rows.narrow(-1, 2, 2).sigmoid() * 2).pow(2) * anchors.view({1, 1, na, 1, 2});
  const at::Tensor pbox = at::where(positive4, at::cat({pxy, pwh}, -1), 1.0);  // [B, M, na, 5, 4]
  const at::Tensor iou = bbox_ciou(pbox, at::where(positive4, tbox, 1.0), 1e-7, options.yolov7_iou);  // [B, M, na, 5]
  LevelTerms out;
  out.box = at::where(positive, 1 - iou, 0).sum() / n.clamp_min(1);

  // Objectness: target = detached CIoU clamped at 0 at positive cells, 0 elsewhere. Several candidates can
  // hit one (image, anchor, cell); upstream keeps whichever write lands last, kestrel keeps the largest IoU
  // (deterministic; equals upstream with sort_obj_iou = True).
  const at::Tensor obj_logits = level.select(-1, 4).to(at::kFloat);  // [B, na, ny, nx]
  const at::Tensor score = at::where(positive, iou.detach().clamp_min(0), 0);
  const at::Tensor tobj = at::zeros({obj_logits.numel()}, obj_logits.options())
                              .scatter_reduce(0, cell.reshape(-1), score.reshape(-1), "amax", /*include_self=*/true)
                              .view_as(obj_logits);
  out.obj = bce_elementwise(obj_logits, tobj, options.obj_pw, options.fl_gamma).mean() * balance;

  // Classes (only with more than one): smoothed one-hot targets, mean over positives x classes.
  // A class id outside [0, nc) gets no positive entry (cannot be checked here without reading it back).
  if (nc > 1) {
    const at::Tensor logits = rows.narrow(-1, 5, nc);  // [B, M, na, 5, nc]
    const double cp = 1.0 - 0.5 * options.label_smoothing, cn = 0.5 * options.label_smoothing;
    const at::Tensor hot = at::arange(nc, cls.options()) == cls.unsqueeze(-1);
    const at::Tensor t = at::where(hot, cp, cn).to(at::kFloat).expand_as(logits);
    const at::Tensor loss = bce_elementwise(logits, t, options.cls_pw, options.fl_gamma);
    out.cls = at::where(positive4, loss, 0).sum() / (n * nc).clamp_min(1);
  } else {
    out.cls = at::zeros({}, obj_logits.options());
  }
  return out;
}

LevelTerms YoloLoss::level_loss(int64_t i, const at::Tensor& level, const at::Tensor& targets, const at::Tensor& mask,
                                const at::Tensor& anchors) const {
  const int64_t B = level.size(0), ny = level.size(2), nx = level.size(3), no = level.size(4);
  const int64_t M = targets.size(1);
  const LevelTargets lt = build_targets(targets, mask, anchors, ny, nx, options_.anchor_t);
  // Each candidate's prediction row (in the level's dtype, then float32). [B, M, na, 5, no]
  const at::Tensor rows =
      level.reshape({-1, no}).index_select(0, lt.cell.view(-1)).to(at::kFloat).view({B, M, na_, kCellOffsets, no});
  return candidate_terms(level, rows, lt.valid, lt.box, lt.cls.view({B, M, 1, 1}), lt.cell, anchors, nc_, balance_[i],
                         options_);
}

YoloLoss::Result YoloLoss::operator()(const std::vector<at::Tensor>& levels, const at::Tensor& targets,
                                      const at::Tensor& target_mask) const {
  check_loss_inputs(levels, targets, target_mask, nl_, na_, nc_);
  const at::Tensor& anchors = anchors_on(targets.device());
  at::Tensor lbox, lobj, lcls;
  for (int64_t i = 0; i < nl_; ++i) {
    const LevelTerms l = level_loss(i, levels[i], targets, target_mask, anchors[i]);
    lbox = i == 0 ? l.box : lbox + l.box;
    lobj = i == 0 ? l.obj : lobj + l.obj;
    lcls = i == 0 ? l.cls : lcls + l.cls;
  }
  const at::Tensor items = at::stack({lbox * options_.box, lobj * options_.obj, lcls * options_.cls});  // [3]
  Result out;
  out.total = items.sum() * static_cast<double>(targets.size(0));
  out.items = items.detach();
  return out;
}

}  // namespace kestrel::loss
