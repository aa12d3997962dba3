// YOLOv5 loss: hand-derived values on tiny grids, target assignment edges, padding invariance, gradients,
// autocast, and a randomized cross-check (loss and gradients) against an independent loop-based Python
// implementation of the same semantics run by the project's Python.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kestrel/core/error.h"
#include "kestrel/loss/yolo_loss.h"
#include "loss/loss_test_support.h"

namespace kestrel::loss {
namespace {

using test::all_real, test::bce, test::bools, test::Evaluated, test::evaluate, test::longs, test::make_head,
    test::softplus;

constexpr double kPi = 3.14159265358979323846;
double aspect_v(double r1, double r2) { return 4 / (kPi * kPi) * std::pow(std::atan(r2) - std::atan(r1), 2); }

at::Tensor rows(std::vector<float> values) { return at::tensor(values, at::kFloat).view({1, -1, 5}); }

TEST(LossOptions, DefaultsAreScratchLowAndGainsScaleAsTrainPy) {
  LossOptions o;  // hyp.scratch-low.yaml: box 0.05 cls 0.5 cls_pw 1 obj 1 obj_pw 1 anchor_t 4 fl_gamma 0
  EXPECT_EQ(std::vector<double>({o.box, o.cls, o.cls_pw, o.obj, o.obj_pw, o.anchor_t, o.fl_gamma, o.label_smoothing}),
            std::vector<double>({0.05, 0.5, 1.0, 1.0, 1.0, 4.0, 0.0, 0.0}));
  o = scale_gains(LossOptions{}, 3, 80, 640);  // the COCO reference: unchanged
  EXPECT_EQ(std::vector<double>({o.box, o.cls, o.obj}), std::vector<double>({0.05, 0.5, 1.0}));
  o = scale_gains(LossOptions{}, 4, 20, 1280);  // 3/4; 20/80 * 3/4; (1280/640)^2 * 3/4
  EXPECT_DOUBLE_EQ(o.box, 0.0375);
  EXPECT_DOUBLE_EQ(o.cls, 0.09375);
  EXPECT_DOUBLE_EQ(o.obj, 3.0);
  EXPECT_EQ(o.anchor_t, 4.0);
  EXPECT_EQ(level_balance(3), (std::vector<double>{4.0, 1.0, 0.4}));
  EXPECT_EQ(level_balance(4), (std::vector<double>{4.0, 1.0, 0.25, 0.06}));
  EXPECT_EQ(level_balance(1), (std::vector<double>{4.0}));
  EXPECT_THROW(level_balance(6), Error);
}

TEST(Ciou, ValuesByHand) {
  auto ciou = [](std::vector<double> a, std::vector<double> b) {
    return bbox_ciou(at::tensor(a, at::kDouble), at::tensor(b, at::kDouble)).item<double>();
  };
  EXPECT_NEAR(ciou({3, 4, 2, 5}, {3, 4, 2, 5}), 1.0, 1e-6);
  // Same shape, shifted 1 in x: inter 1*2, union 6, enclosing 3 x 2 (c^2 13), centre distance^2 1.
  EXPECT_NEAR(ciou({0, 0, 2, 2}, {1, 0, 2, 2}), 2.0 / 6 - 1.0 / 13, 1e-6);
  // Disjoint: IoU 0, enclosing 4 x 1 (c^2 17), centre distance^2 9.
  EXPECT_NEAR(ciou({0, 0, 1, 1}, {3, 0, 1, 1}), -9.0 / 17, 1e-6);
  // Same centre, 2x1 vs 1x2: IoU 1/3, rho 0, v = 4/pi^2 (atan 2 - atan 0.5)^2, alpha = v / (v - IoU + 1).
  const double v = aspect_v(2.0, 0.5);
  EXPECT_NEAR(ciou({0, 0, 2, 1}, {0, 0, 1, 2}), 1.0 / 3 - v * v / (v - 1.0 / 3 + 1), 1e-6);
}

TEST(Ciou, AlphaCarriesNoGradient) {
  // d CIoU / d w1 for box1 (0, 0, w1, 1) vs box2 (0, 0, 1, 2) at w1 = 2, alpha frozen at its value there.
  auto with_alpha = [](double w1, double alpha) {
    const double inter = std::min(w1, 1.0), iou = inter / (w1 + 2 - inter);
    return iou - aspect_v(w1, 0.5) * alpha;  // centres coincide: no distance term
  };
  const double v0 = aspect_v(2.0, 0.5), alpha0 = v0 / (v0 - 1.0 / 3 + 1);
  const double h = 1e-6, expected = (with_alpha(2 + h, alpha0) - with_alpha(2 - h, alpha0)) / (2 * h);
  at::Tensor box1 = at::tensor({0.0, 0.0, 2.0, 1.0}, at::kDouble).requires_grad_();
  bbox_ciou(box1, at::tensor({0.0, 0.0, 1.0, 2.0}, at::kDouble)).backward();
  EXPECT_NEAR(box1.grad()[2].item<double>(), expected, 1e-6);
}

// YOLOv7's bbox_iou: eps added to the heights (union and aspect term), so a predicted box of zero size (a w/h
// logit so negative that (2 sigmoid)^2 underflows) stays finite. By hand, box1 (0.5, 0.5, 0, 0) against the
// unit box: IoU 0, rho 0, v = 4/pi^2 (atan(1 / (1 + 2 eps)) - atan(0))^2 = 1/4 (to ~1e-7), alpha = v / (v + 1)
// = 1/5: CIoU = -v alpha = -0.05. YOLOv5's formula divides 0 by 0 there, as upstream v7.0 does.
TEST(Ciou, Yolov7KeepsAZeroSizeBoxFinite) {
  const at::Tensor empty = at::tensor({0.5, 0.5, 0.0, 0.0}, at::kDouble), unit = at::tensor({0.5, 0.5, 1.0, 1.0}, at::kDouble);
  EXPECT_NEAR(bbox_ciou(empty, unit, 1e-7, /*yolov7=*/true).item<double>(), -0.05, 1e-6);
  EXPECT_TRUE(std::isnan(bbox_ciou(empty, unit).item<double>()));
  // Ordinary boxes: the two agree to the eps terms (same shape shifted 1 in x, as above).
  EXPECT_NEAR(bbox_ciou(at::tensor({0.0, 0.0, 2.0, 2.0}, at::kDouble), at::tensor({1.0, 0.0, 2.0, 2.0}, at::kDouble), 1e-7, true)
                  .item<double>(),
              2.0 / 6 - 1.0 / 13, 1e-6);
}

TEST(BuildTargets, AnchorRatioThreshold) {
  // 4x4 grid, anchor 1x1 cell: w = 0.999 * 4 = 3.996 (ratio < 4: match), 4.0 (= anchor_t: no),
  // 0.0625 * 4 = 0.25 (1/r = 4: no), 0.0626 * 4 = 0.2504 (1/r < 4: match), h too large with w fine: no.
  const at::Tensor t = rows({0, .375, .375, .999, .5, 0, .375, .375, 1, .5, 0, .375, .375, .0625, .5,
                             0, .375, .375, .0626, .5, 0, .375, .375, .5, 1});
  const at::Tensor anchor = at::ones({1, 2});
  LevelTargets lt = build_targets(t, all_real(t), anchor, 4, 4, 4.0);
  EXPECT_EQ(bools(lt.valid.select(-1, 0)), (std::vector<bool>{true, false, false, true, false}));
  lt = build_targets(t, all_real(t), anchor, 4, 4, 4.5);  // a looser threshold admits ratio 4
  EXPECT_EQ(bools(lt.valid.select(-1, 0)), (std::vector<bool>{true, true, true, true, true}));
}

TEST(BuildTargets, NeighbourCells) {
  // gx = 2.25 (fraction 0.25 < 0.5, gx > 1: left cell too); gy = 2.75 (distance from the bottom 1.25,
  // fraction 0.25 < 0.5 and > 1: lower cell too). Candidates: own (2,2), left (1,2), down (2,3).
  const at::Tensor t = rows({3, .5625, .6875, .25, .25});
  const LevelTargets lt = build_targets(t, all_real(t), at::ones({1, 2}), 4, 4, 4.0);
  EXPECT_EQ(bools(lt.valid), (std::vector<bool>{true, true, false, false, true}));
  // flat index = gj * 4 + gi (image 0, anchor 0)
  EXPECT_EQ(longs(lt.cell), (std::vector<int64_t>{10, 9, 10, 10, 14}));
  const at::Tensor box = lt.box.view({5, 4});
  EXPECT_EQ(box[1][0].item<float>(), 1.25f);   // 2.25 - 1
  EXPECT_EQ(box[4][1].item<float>(), -0.25f);  // 2.75 - 3
  EXPECT_EQ(box[0][2].item<float>(), 1.0f);    // w in grid units
  EXPECT_EQ(longs(lt.cls), (std::vector<int64_t>{3}));
}

TEST(BuildTargets, CentreFractionHalfAndZero) {
  // (0.375, 0.625) -> gx 1.5, gy 2.5: fraction exactly 0.5 is not < 0.5, own cell only.
  // (0.5, 0.5) -> gx = gy = 2.0: fraction 0 < 0.5 towards both sides (each more than 1 from the border);
  // the high neighbours' shifted centre 2.5 truncates back to cell 2, as upstream.
  const at::Tensor t = rows({0, .375, .625, .25, .25, 0, .5, .5, .25, .25});
  const LevelTargets lt = build_targets(t, all_real(t), at::ones({1, 2}), 4, 4, 4.0);
  EXPECT_EQ(bools(lt.valid), (std::vector<bool>{true, false, false, false, false, true, true, true, true, true}));
  EXPECT_EQ(longs(lt.cell.select(1, 1)), (std::vector<int64_t>{10, 9, 6, 10, 10}));
}

TEST(BuildTargets, ImageEdgesNeverReachOutside) {
  // (0.1, 0.9) -> gx 0.4, gy 3.6: close to the left / bottom borders, no neighbour beyond them.
  // (1.0, 0.0) -> gx 4 (clamped to cell 3, x 1.0 in it), gy 0: left neighbour (3) and, since the
  // distance to the bottom is 4, the lower one, whose shifted centre 0.5 stays in row 0.
  const at::Tensor t = rows({0, .1, .9, .2, .2, 0, 1, 0, .2, .2});
  const LevelTargets lt = build_targets(t, all_real(t), at::ones({1, 2}), 4, 4, 4.0);
  EXPECT_EQ(bools(lt.valid), (std::vector<bool>{true, false, false, false, false, true, true, false, false, true}));
  EXPECT_EQ(longs(lt.cell.select(1, 0)), (std::vector<int64_t>{12, 12, 12, 12, 12}));  // only row 3, col 0
  EXPECT_EQ(longs(lt.cell.select(1, 1)), (std::vector<int64_t>{3, 3, 3, 3, 3}));  // only row 0, col 3
  EXPECT_EQ(lt.box[0][1][0][0][0].item<float>(), 1.0f);
  EXPECT_EQ(lt.box[0][1][0][0][1].item<float>(), 0.0f);
}

TEST(BuildTargets, PaddingAndCellLayout) {
  // 2 images, 2 anchors (1x1 and 3x2 cells), grid 3 x 5. Image 1 row 0: a 3x2-cell box in cell (gi 2, gj 1):
  // matches both anchors; flat index ((b * na + a) * ny + gj) * nx + gi. Padding rows hold garbage.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const at::Tensor t = at::tensor(std::vector<float>{nan, nan, nan, nan, nan, 9, -3, 7, 1e30f, 2, 1, .5, .5, .6,
                                                     2.0f / 3, 0, 0, 0, 0, 0}).view({2, 2, 5});
  const at::Tensor mask = at::tensor({0, 0, 1, 0}).to(at::kBool).view({2, 2});
  const LevelTargets lt = build_targets(t, mask, at::tensor({1.f, 1.f, 3.f, 2.f}).view({2, 2}), 3, 5, 4.0);
  EXPECT_EQ(bools(lt.valid.select(-1, 0)), (std::vector<bool>{false, false, false, false, true, true, false, false}));
  EXPECT_EQ(lt.cell[1][0][0][0].item<int64_t>(), ((1 * 2 + 0) * 3 + 1) * 5 + 2);
  EXPECT_EQ(lt.cell[1][0][1][0].item<int64_t>(), ((1 * 2 + 1) * 3 + 1) * 5 + 2);
  EXPECT_TRUE((lt.cell >= 0).all().item<bool>() && (lt.cell < 2 * 2 * 3 * 5).all().item<bool>());
  EXPECT_TRUE(at::isfinite(lt.box).all().item<bool>());
}

// One level 2x2 (stride 32, image 64), one anchor of one cell, nc 2: gains box 0.05 * 3 = 0.15,
// cls 0.5 * 2/80 * 3 = 0.0375, obj 1 * (64/640)^2 * 3 = 0.03, balance 4.
struct Tiny {
  std::shared_ptr<models::Detect> head = make_head(2, {{32, 32}}, {32});
  YoloLoss loss{*head, LossOptions{}, 64};
  at::Tensor level = at::zeros({1, 1, 2, 2, 7});  // all logits 0: box at a cell centre, one cell in size
  at::Tensor targets = at::tensor({1.f, .25f, .25f, .5f, .5f, 5.f, 5.f, 5.f, 5.f, 5.f}).view({1, 2, 5});
  at::Tensor mask = at::tensor({1, 0}).to(at::kBool).view({1, 2});
};

TEST(Loss, ExactMatchByHand) {
  Tiny s;  // target (class 1) = cell (0,0) centre, 1x1 cell = the prediction: CIoU 1 (minus eps), lbox 0
  s.level.select(-1, 4).view(-1).copy_(at::tensor({1.5f, -2.f, 1.f, 3.f}));  // objectness; tobj 1 at cell 0
  s.level[0][0][0][0].narrow(0, 5, 2).copy_(at::tensor({.5f, -1.f}));      // class logits (targets 0, 1)
  const YoloLoss::Result r = s.loss({s.level}, s.targets, s.mask);
  const double lobj = (bce(1.5, 1) + softplus(-2) + softplus(1) + softplus(3)) / 4 * 4.0;
  const double lcls = (softplus(0.5) + bce(-1, 1)) / 2;
  EXPECT_NEAR(r.items[0].item<double>(), 0.0, 1e-6);
  EXPECT_NEAR(r.items[1].item<double>(), lobj * 0.03, 1e-6);
  EXPECT_NEAR(r.items[2].item<double>(), lcls * 0.0375, 1e-6);
  EXPECT_NEAR(r.total.item<double>(), (lobj * 0.03 + lcls * 0.0375) * 1, 1e-6);
  EXPECT_FALSE(r.items.requires_grad());
}

TEST(Loss, LargerPredictionByHand) {
  // wh logits ln 3: sigmoid 0.75, side (2 * 0.75)^2 = 2.25 cells around the 1-cell target at the same
  // centre, both square: CIoU = IoU = 1 / 2.25^2.
  Tiny s;
  s.level.narrow(-1, 2, 2).fill_(std::log(3.0));
  s.level.select(-1, 4).fill_(0.7);
  const YoloLoss::Result r = s.loss({s.level}, s.targets, s.mask);
  const double iou = 1 / (2.25 * 2.25), lobj = (bce(0.7, iou) + 3 * softplus(0.7)) / 4 * 4.0;
  const double lcls = std::log(2.0);  // class logits 0: BCE log 2 against 0 and against 1
  EXPECT_NEAR(r.items[0].item<double>(), (1 - iou) * 0.15, 1e-6);
  EXPECT_NEAR(r.items[1].item<double>(), lobj * 0.03, 1e-6);
  EXPECT_NEAR(r.items[2].item<double>(), lcls * 0.0375, 1e-6);
  // A second image without boxes doubles the batch: obj mean over 8 cells, total x 2.
  const at::Tensor level2 = at::cat({s.level, at::full({1, 1, 2, 2, 7}, -1.0)});
  const YoloLoss::Result r2 = s.loss({level2}, s.targets.repeat({2, 1, 1}), at::cat({s.mask, at::zeros_like(s.mask)}));
  const double lobj2 = (bce(0.7, iou) + 3 * softplus(0.7) + 4 * softplus(-1)) / 8 * 4.0;
  EXPECT_NEAR(r2.items[1].item<double>(), lobj2 * 0.03, 1e-6);
  EXPECT_NEAR(r2.total.item<double>(), ((1 - iou) * 0.15 + lobj2 * 0.03 + lcls * 0.0375) * 2, 1e-6);
}

TEST(Loss, NegativeCiouGivesZeroObjectnessTarget) {
  // xy logits ln 19: sigmoid 0.95, centre 2 * 0.95 - 0.5 = 1.4; wh logits -ln 19: side (2 * 0.05)^2 = 0.01.
  // Box [1.395, 1.405]^2 vs target [0, 1]^2: IoU 0, enclosing side 1.405, centre distance^2 2 * 0.9^2, v 0:
  // CIoU = -1.62 / (2 * 1.405^2) < 0, so the objectness target is 0 (clamped) everywhere.
  Tiny s;
  s.level.narrow(-1, 0, 2).fill_(std::log(19.0));
  s.level.narrow(-1, 2, 2).fill_(-std::log(19.0));
  s.level.select(-1, 4).fill_(0.7);
  const YoloLoss::Result r = s.loss({s.level}, s.targets, s.mask);
  EXPECT_NEAR(r.items[0].item<double>(), (1 + 1.62 / (2 * 1.405 * 1.405)) * 0.15, 1e-5);
  EXPECT_NEAR(r.items[1].item<double>(), softplus(0.7) * 4.0 * 0.03, 1e-6);
}

TEST(Loss, SharedCellKeepsLargestIou) {
  // nc 1 (no class loss). Two targets in cell (0,0), anchor 0: A = the predicted box (CIoU 1), B = 0.75 x 0.75
  // cells at the same centre (CIoU 0.5625). lbox = mean(0, 0.4375); tobj = max = 1, in either order.
  auto head = make_head(1, {{32, 32}}, {32});
  const YoloLoss loss(*head, LossOptions{}, 64);
  at::Tensor level = at::zeros({1, 1, 2, 2, 6});
  level.select(-1, 4).fill_(0.3);
  const at::Tensor a = at::tensor({0.f, .25f, .25f, .5f, .5f}), b = at::tensor({0.f, .25f, .25f, .375f, .375f});
  const at::Tensor mask = at::ones({1, 2}, at::kBool);
  const double lobj = (bce(0.3, 1.0) + 3 * softplus(0.3)) / 4 * 4.0;
  for (const at::Tensor& t : {at::stack({a, b}).unsqueeze(0), at::stack({b, a}).unsqueeze(0)}) {
    const YoloLoss::Result r = loss({level}, t, mask);
    EXPECT_NEAR(r.items[0].item<double>(), (0 + 0.4375) / 2 * 0.15, 1e-6);
    EXPECT_NEAR(r.items[1].item<double>(), lobj * 0.03, 1e-6);
    EXPECT_EQ(r.items[2].item<double>(), 0.0);
  }
}

// The three-level head and one random batch for a 64 x 96 input (grids 8x12, 4x6, 2x3).
struct RandomCase : test::RandomCase<YoloLoss> {
  explicit RandomCase(uint64_t seed, const LossOptions& hyp = LossOptions{})
      : test::RandomCase<YoloLoss>(seed, hyp, test::kWide) {}
};

TEST(Loss, ImagesWithoutBoxes) {
  const RandomCase c(1);  // the same targets, all marked padding
  const YoloLoss::Result r = c.loss(c.levels, c.t, at::zeros_like(c.mask));
  double lobj = 0;  // sum over levels of balance x mean softplus(objectness logit) (BCE against 0)
  const std::vector<double> balance = {4.0, 1.0, 0.4};
  for (size_t i = 0; i < 3; ++i)
    lobj += c.levels[i].select(-1, 4).to(at::kDouble).exp().log1p().mean().item<double>() * balance[i];
  const double obj_gain = std::pow(96.0 / 640, 2);
  EXPECT_EQ(r.items[0].item<double>(), 0.0);
  EXPECT_EQ(r.items[2].item<double>(), 0.0);
  EXPECT_NEAR(r.items[1].item<double>(), lobj * obj_gain, 1e-6 * lobj);
  EXPECT_NEAR(r.total.item<double>(), lobj * obj_gain * 3, 1e-6 * lobj);
}

TEST(Loss, PaddingRowsNeverContribute) {
  const RandomCase c(2);
  const Evaluated a = evaluate(c.loss, c.levels, c.t, c.mask);
  test::expect_identical(evaluate(c.loss, c.levels, test::with_garbage_padding(c.t, c.mask), c.mask), a);
}

TEST(Loss, GradientsFlow) {
  const RandomCase c(3);
  const Evaluated e = evaluate(c.loss, c.levels, c.t, c.mask);
  for (int k = 0; k < 3; ++k) EXPECT_GT(e.items[k].item<double>(), 0.0);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(e.grads[i].defined());
    EXPECT_TRUE(at::isfinite(e.grads[i]).all().item<bool>());
    EXPECT_TRUE((e.grads[i].select(-1, 4) != 0).all().item<bool>()) << "objectness reaches every cell";
    EXPECT_TRUE((e.grads[i].narrow(-1, 0, 4) != 0).any().item<bool>()) << "box grads at matched cells";
    EXPECT_TRUE((e.grads[i].narrow(-1, 5, 4) != 0).any().item<bool>()) << "class grads at matched cells";
  }
  // Image 1 has no boxes: only its objectness channel gets gradient.
  EXPECT_FALSE((e.grads[0][1].narrow(-1, 0, 4) != 0).any().item<bool>());
}

TEST(Loss, DegenerateUnmatchedPredictionsGiveFiniteGradients) {
  test::expect_finite_gradients_with_degenerate_unmatched_boxes(RandomCase(3));
}

TEST(Loss, AutocastComputesInFloat32) { test::expect_autocast_computes_in_float32(RandomCase(4)); }

TEST(Loss, RejectsBadInputs) {
  RandomCase c(0);
  EXPECT_THROW(c.loss({c.levels[0], c.levels[1]}, c.t, c.mask), Error);
  EXPECT_THROW(c.loss(c.levels, c.t, c.mask.to(at::kFloat)), Error);
  EXPECT_THROW(c.loss(c.levels, c.t.narrow(2, 0, 4), c.mask), Error);
  c.levels[2] = at::zeros({3, 3, 2, 3, 8});
  EXPECT_THROW(c.loss(c.levels, c.t, c.mask), Error);
  models::Detect raw(4, {{2, 3}}, {4}, false);  // not initialised: anchors still in pixels
  EXPECT_THROW(YoloLoss(raw, LossOptions{}, 96), Error);
}

// Independent loop-based implementation of YOLOv5's target assignment (build_targets: the anchor ratio
// threshold, the own cell and its two nearest neighbours), in float32 where a threshold decides (grid
// coordinates and ratios, as the data); the loss over the candidates, in float64 with the max-IoU rule for
// shared cells, is the prelude's write_loss.
const char* kPythonReference = R"PY(
def candidates(i):
    ny, nx = shapes[i]
    out = []
    for b, m in zip(*np.nonzero(mask)):
        c, cx, cy, w, hh = targets[b, m]
        gx, gy, gw, gh = cx * f32(nx), cy * f32(ny), w * f32(nx), hh * f32(ny)
        for a in range(na):
            rw, rh = gw / anchors[i, a, 0], gh / anchors[i, a, 1]
            if not max(rw, f32(1) / rw, rh, f32(1) / rh) < f32(h['anchor_t']): continue
            centres = [(gx, gy)]
            if gx % 1 < 0.5 and gx > 1: centres.append((gx - f32(0.5), gy))
            if gy % 1 < 0.5 and gy > 1: centres.append((gx, gy - f32(0.5)))
            if (f32(nx) - gx) % 1 < 0.5 and f32(nx) - gx > 1: centres.append((gx + f32(0.5), gy))
            if (f32(ny) - gy) % 1 < 0.5 and f32(ny) - gy > 1: centres.append((gx, gy + f32(0.5)))
            for sx, sy in centres:
                gi, gj = min(max(int(sx), 0), nx - 1), min(max(int(sy), 0), ny - 1)
                out.append((int(b), a, gj, gi, (gx - f32(gi), gy - f32(gj), gw, gh), int(c)))
    return out
write_loss([candidates(i) for i in range(nl)])
)PY";

// Runs the Python reference on a random case and compares loss, items and gradients.
void cross_check(const LossOptions& hyp, uint64_t seed) {
  test::cross_check(RandomCase(seed, hyp), "", test::kPythonLossPrelude + std::string(kPythonReference), 1e-4);
}

TEST(Loss, MatchesPythonReferenceDefaults) { cross_check(LossOptions{}, 11); }

TEST(Loss, MatchesPythonReferenceFocalSmoothingWeights) { cross_check(test::focal_smoothing_weights(), 12); }

TEST(Loss, CudaMatchesCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  test::expect_cuda_matches_cpu(RandomCase(5));
}

}  // namespace
}  // namespace kestrel::loss
