// YOLOv7 OTA loss: assignments and values derived by hand on a 4x4 grid (dynamic k, a neighbour cell beating
// the own cell, a target without candidates of its own, a conflict), equality with YOLOv5's loss where a target
// has a single candidate, empty images, padding invariance, per-image independence of the assignment, and a
// randomised cross-check (loss and gradients) against an independent loop-based Python implementation of
// upstream's ComputeLossOTA semantics run by the project's Python. With KESTREL_YOLOV7_DIR set to a checkout of
// WongKinYiu/yolov7 (checked at a207844), one more test runs upstream's own ComputeLossOTA on a random batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kestrel/core/error.h"
#include "kestrel/loss/ota_loss.h"
#include "loss/loss_test_support.h"

namespace kestrel::loss {
namespace {

using test::all_real, test::bce, test::bools, test::Evaluated, test::evaluate, test::focal_smoothing_weights,
    test::kSquare, test::kWide, test::longs, test::make_head, test::softplus;
using RandomCase = test::RandomCase<OtaLoss>;  // 96 x 96 input by default

double logit(double p) { return std::log(p / (1 - p)); }
double item_at(const at::Tensor& items, int64_t k) { return items[k].item<double>(); }

// One level 4x4 (stride 16, input 64), one anchor of one cell, nc 2: gains box 0.05 * 3 = 0.15,
// cls 0.5 * 2/80 * 3 = 0.0375, obj (64/640)^2 * 3 = 0.03, objectness balance 4. Objectness logits
// 0.1 c - 0.8 at flat cell c = 4 gj + gi; box logits 0: a one-cell box at the cell centre; class logits 0.
// Target A (class 0): one cell at (1.25, 1.25) cells; its candidates are its own cell (gi 1, gj 1, offset 0),
// the left (0, 1, offset 1) and the upper one (1, 0, offset 2). IoUs of the default predictions with A:
// own [1, 2]^2 vs [0.75, 1.75]^2: 0.5625 / 1.4375; left and up: 0.1875 / 1.8125.
constexpr double kBoxGain = 0.15, kClsGain = 0.0375, kObjGain = 0.03, kBalance = 4.0;
struct Grid4 {
  Grid4() {
    level.select(-1, 4).view(-1).copy_(at::arange(16, at::kFloat) * 0.1 - 0.8);
    // The left cell predicts A exactly: centre x 1.25 = 2 s - 0.5 + 0, y 1.25 = 2 s - 0.5 + 1; class logits.
    place(0, 1, 1.25, 1.25);
    level[0][0][1][0].narrow(0, 5, 2).copy_(at::tensor({1.f, -.5f}));
  }
  // Moves the one-cell box predicted at cell (gi, gj) to centre (x, y), grid units.
  void place(int64_t gi, int64_t gj, double x, double y) {
    level[0][0][gj][gi][0] = logit((x - gi + 0.5) / 2);
    level[0][0][gj][gi][1] = logit((y - gj + 0.5) / 2);
  }
  double obj_logit(int64_t cell) const { return 0.1 * cell - 0.8; }
  // Objectness BCE (before gains) with targets `tobj` at the given cells, 0 elsewhere.
  double lobj(const std::vector<std::pair<int64_t, double>>& tobj) const {
    double sum = 0;
    for (int64_t c = 0; c < 16; ++c) sum += softplus(obj_logit(c));
    for (auto [c, t] : tobj) sum -= obj_logit(c) * t;
    return sum / 16 * kBalance;
  }
  std::shared_ptr<models::Detect> head = make_head(2, {{16, 16}}, {16});
  OtaLoss loss{*head, LossOptions{}, 64};
  at::Tensor level = at::zeros({1, 1, 4, 4, 7});
};
const std::vector<float> kTargetA = {0, .3125f, .3125f, .25f, .25f};
at::Tensor batch_of(std::vector<std::vector<float>> rows) {
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return at::tensor(flat, at::kFloat).view({1, -1, 5});
}

TEST(OtaLoss, NeighbourCellWithTheBestBoxWins) {
  // IoUs 1 (left), 0.39 (own), 0.10 (up): dynamic k = trunc(1.49) = 1, and the cheapest is the left cell
  // (IoU cost 0, against 3 * 0.94 for the own cell; class costs differ by less). YOLOv5 would take all three.
  Grid4 s;
  const at::Tensor t = batch_of({kTargetA});
  const OtaLoss::Assignment a = s.loss.assign({s.level}, t, all_real(t));
  EXPECT_EQ(longs(a.dynamic_k), (std::vector<int64_t>{1}));
  EXPECT_EQ(bools(a.matched[0]), (std::vector<bool>{false, true, false, false, false}));
  const OtaLoss::Result r = s.loss({s.level}, t, all_real(t));
  EXPECT_NEAR(item_at(r.items, 0), 0.0, 1e-6);  // 1 - CIoU of an exact box
  EXPECT_NEAR(item_at(r.items, 1), s.lobj({{4, 1.0}}) * kObjGain, 1e-6);
  EXPECT_NEAR(item_at(r.items, 2), (bce(1, 1) + softplus(-.5)) / 2 * kClsGain, 1e-6);
  EXPECT_NEAR(r.total.item<double>(), r.items.sum().item<double>(), 1e-7);
  EXPECT_FALSE(r.items.requires_grad());
}

TEST(OtaLoss, DynamicKFromTheIouSum) {
  // The own cell predicts A exactly too: IoUs 1, 1, 0.10, dynamic k 2: own and left.
  Grid4 s;
  s.place(1, 1, 1.25, 1.25);
  const at::Tensor t = batch_of({kTargetA});
  const OtaLoss::Assignment a = s.loss.assign({s.level}, t, all_real(t));
  EXPECT_EQ(longs(a.dynamic_k), (std::vector<int64_t>{2}));
  EXPECT_EQ(bools(a.matched[0]), (std::vector<bool>{true, true, false, false, false}));
  const OtaLoss::Result r = s.loss({s.level}, t, all_real(t));
  EXPECT_NEAR(item_at(r.items, 0), 0.0, 1e-6);
  EXPECT_NEAR(item_at(r.items, 1), s.lobj({{4, 1.0}, {5, 1.0}}) * kObjGain, 1e-6);
  EXPECT_NEAR(item_at(r.items, 2), (bce(1, 1) + softplus(-.5) + 2 * std::log(2.0)) / 4 * kClsGain, 1e-6);
}

TEST(OtaLoss, TargetWithoutOwnCandidatesTakesTheImagesCheapest) {
  // Target B (class 1) covers the image (4 x 4 cells: ratio 4 to the anchor is not < anchor_t), so it has no
  // candidates of its own; it still competes for A's. Every candidate box lies inside B: IoU 1/16, dynamic k 1,
  // and the class cost decides: -log y1 - log(1 - y0), y_c = sqrt(sigmoid(cls_c) sigmoid(obj)): left 1.72,
  // own 1.39, up 1.42. B takes the own cell, A keeps the left one.
  Grid4 s;
  const at::Tensor t = batch_of({kTargetA, {1, .5f, .5f, 1, 1}});
  const OtaLoss::Assignment a = s.loss.assign({s.level}, t, all_real(t));
  EXPECT_EQ(longs(a.dynamic_k), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(bools(a.matched[0][0][0][0]), (std::vector<bool>{true, true, false, false, false}));
  EXPECT_EQ(longs(a.owner[0][0][0][0]), (std::vector<int64_t>{1, 0, 0, 0, 0}));
  EXPECT_FALSE(a.matched[0][0][1].any().item<bool>());  // B generates no candidates
  // Own cell vs B, relative to the cell: pred (0.5, 0.5, 1, 1), target (1, 1, 4, 4): IoU 1/16, centre distance^2
  // 0.5, enclosing box = B (c^2 32), same aspect: CIoU 0.0625 - 0.5/32.
  const double ciou_b = 0.0625 - 0.5 / 32;
  const OtaLoss::Result r = s.loss({s.level}, t, all_real(t));
  EXPECT_NEAR(item_at(r.items, 0), (0 + 1 - ciou_b) / 2 * kBoxGain, 1e-6);
  EXPECT_NEAR(item_at(r.items, 1), s.lobj({{4, 1.0}, {5, ciou_b}}) * kObjGain, 1e-6);
  EXPECT_NEAR(item_at(r.items, 2), (bce(1, 1) + softplus(-.5) + 2 * std::log(2.0)) / 4 * kClsGain, 1e-6);
}

TEST(OtaLoss, ConflictGoesToTheCheapestTargetAndALoserKeepsNothing) {
  // C = A's box with class 1. Every candidate exists twice (once per target): IoU sums 2 + 0.78 + 0.21,
  // dynamic k 2 each, and both targets claim both copies of the left cell. Class costs there: A 1.11, C 1.72,
  // so A gets both copies (also the one C generated) and C none. In either row order.
  for (bool a_first : {true, false}) {
    Grid4 s;
    const std::vector<float> c = {1, .3125f, .3125f, .25f, .25f};
    const at::Tensor t = a_first ? batch_of({kTargetA, c}) : batch_of({c, kTargetA});
    const int64_t row_a = a_first ? 0 : 1;
    const OtaLoss::Assignment a = s.loss.assign({s.level}, t, all_real(t));
    EXPECT_EQ(longs(a.dynamic_k), (std::vector<int64_t>{2, 2}));
    for (int64_t m = 0; m < 2; ++m) {
      EXPECT_EQ(bools(a.matched[0][0][m][0]), (std::vector<bool>{false, true, false, false, false})) << m;
      EXPECT_EQ(a.owner[0][0][m][0][1].item<int64_t>(), row_a) << m;
    }
    const OtaLoss::Result r = s.loss({s.level}, t, all_real(t));
    EXPECT_NEAR(item_at(r.items, 0), 0.0, 1e-6);
    EXPECT_NEAR(item_at(r.items, 1), s.lobj({{4, 1.0}}) * kObjGain, 1e-6);
    EXPECT_NEAR(item_at(r.items, 2), (bce(1, 1) + softplus(-.5)) / 2 * kClsGain, 1e-6);
  }
}

void expect_same(const Evaluated& a, const Evaluated& b, double tol) {
  EXPECT_NEAR(a.total.item<double>(), b.total.item<double>(), tol);
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(item_at(a.items, k), item_at(b.items, k), tol) << k;
  for (size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_TRUE(at::allclose(a.grads[i], b.grads[i], 1e-5, 1e-7)) << "level " << i;
}

TEST(OtaLoss, SingleCandidateEqualsYoloLoss) {
  // 2x2 grid, one target at the centre of cell (0, 0): its only candidate is its own cell, so OTA assigns
  // exactly what YOLOv5 does, whatever the predictions.
  at::manual_seed(7);
  auto head = make_head(3, {{32, 32}}, {32});
  const OtaLoss ota(*head, LossOptions{}, 64);
  const YoloLoss yolo(*head, LossOptions{}, 64);
  const at::Tensor level = at::randn({1, 1, 2, 2, 8}) * 2;
  const at::Tensor t = batch_of({{2, .25f, .25f, .5f, .5f}});
  expect_same(evaluate(ota, {level}, t, all_real(t)), evaluate(yolo, {level}, t, all_real(t)), 1e-6);
}

TEST(OtaLoss, ImagesWithoutBoxesOrCandidatesGiveObjectnessOnly) {
  const RandomCase c(1);
  const YoloLoss yolo(*c.head, LossOptions{}, 96);
  const at::Tensor none = at::zeros_like(c.mask);
  const Evaluated expected = evaluate(yolo, c.levels, c.t, none);
  EXPECT_GT(item_at(expected.items, 1), 0.0);
  EXPECT_EQ(item_at(expected.items, 0), 0.0);
  expect_same(evaluate(c.loss, c.levels, c.t, none), expected, 1e-7);
  // Targets whose shape fits no anchor (a ratio >= anchor_t on every level) have no candidates.
  at::Tensor huge = c.t.clone();
  huge[1][0].copy_(at::tensor({2.f, .5f, .5f, 1.f, .001f}));
  huge[1][1].copy_(at::tensor({1.f, .5f, .5f, .001f, .001f}));
  at::Tensor mask = none.clone();
  mask[1][0] = true, mask[1][1] = true;
  expect_same(evaluate(c.loss, c.levels, huge, mask), expected, 1e-7);
  // No target rows at all ([B, 0, 5], as YoloLoss takes them): the same, not LibTorch's argmax error.
  const int64_t B = c.t.size(0);
  expect_same(evaluate(c.loss, c.levels, at::zeros({B, 0, 5}), at::zeros({B, 0}, at::kBool)), expected, 1e-7);
  EXPECT_EQ(c.loss.assign(c.levels, at::zeros({B, 0, 5}), at::zeros({B, 0}, at::kBool)).matched.size(), c.levels.size());
}

TEST(OtaLoss, PaddingRowsNeverContribute) {
  const RandomCase c(2);
  const Evaluated a = evaluate(c.loss, c.levels, c.t, c.mask);
  const at::Tensor garbage = test::with_garbage_padding(c.t, c.mask);
  test::expect_identical(evaluate(c.loss, c.levels, garbage, c.mask), a);
  // More padding rows (a larger capacity M) change nothing either.
  const at::Tensor wider = at::cat({garbage, at::randn({3, 5, 5})}, 1);
  const at::Tensor wider_mask = at::cat({c.mask, at::zeros({3, 5}, at::kBool)}, 1);
  const Evaluated w = evaluate(c.loss, c.levels, wider, wider_mask);
  EXPECT_NEAR(w.total.item<double>(), a.total.item<double>(), 1e-6 * a.total.item<double>());
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(at::allclose(w.grads[i], a.grads[i], 1e-5, 1e-8)) << "level " << i;
}

TEST(OtaLoss, AssignmentIsPerImage) {
  // Assigning the batch equals assigning every image on its own.
  const RandomCase c(3);
  const OtaLoss::Assignment all = c.loss.assign(c.levels, c.t, c.mask);
  for (int64_t b = 0; b < 3; ++b) {
    std::vector<at::Tensor> one;
    for (const auto& l : c.levels) one.push_back(l.narrow(0, b, 1));
    const OtaLoss::Assignment a = c.loss.assign(one, c.t.narrow(0, b, 1), c.mask.narrow(0, b, 1));
    EXPECT_TRUE(at::equal(a.dynamic_k[0], all.dynamic_k[b])) << b;
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(at::equal(a.matched[i][0], all.matched[i][b])) << b << " " << i;
      EXPECT_TRUE(at::equal(a.owner[i][0], all.owner[i][b])) << b << " " << i;
    }
  }
  EXPECT_FALSE(all.matched[0][1].any().item<bool>());  // image 1 has no boxes
  EXPECT_TRUE(all.matched[0][2].any().item<bool>());
}

TEST(OtaLoss, GradientsFlow) {
  const RandomCase c(4);
  const Evaluated e = evaluate(c.loss, c.levels, c.t, c.mask);
  for (int k = 0; k < 3; ++k) EXPECT_GT(item_at(e.items, k), 0.0);
  bool box = false, cls = false;
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(e.grads[i].defined());
    EXPECT_TRUE(at::isfinite(e.grads[i]).all().item<bool>());
    EXPECT_TRUE((e.grads[i].select(-1, 4) != 0).all().item<bool>()) << "objectness reaches every cell";
    box |= (e.grads[i].narrow(-1, 0, 4) != 0).any().item<bool>();
    cls |= (e.grads[i].narrow(-1, 5, 4) != 0).any().item<bool>();
    EXPECT_FALSE((e.grads[i][1].narrow(-1, 0, 4) != 0).any().item<bool>()) << "image 1 has no boxes";
  }
  EXPECT_TRUE(box && cls);
}

TEST(OtaLoss, DegenerateUnmatchedPredictionsGiveFiniteGradients) {
  test::expect_finite_gradients_with_degenerate_unmatched_boxes(RandomCase(4));
}

TEST(OtaLoss, AutocastComputesInFloat32) { test::expect_autocast_computes_in_float32(RandomCase(5)); }

TEST(OtaLoss, RejectsBadInputs) {
  RandomCase c(0);
  EXPECT_THROW(c.loss({c.levels[0], c.levels[1]}, c.t, c.mask), Error);
  EXPECT_THROW(c.loss(c.levels, c.t, c.mask.to(at::kFloat)), Error);
  EXPECT_THROW(c.loss.assign(c.levels, c.t.narrow(2, 0, 4), c.mask), Error);
  models::Detect raw(4, {{2, 3}}, {4}, false);  // not initialised: anchors still in pixels
  EXPECT_THROW(OtaLoss(raw, LossOptions{}, 96), Error);
}

// Independent loop-based implementation of upstream ComputeLossOTA's assignment (kestrel's documented choices:
// ties go to the earlier candidate, x scaled by the input width), in float64 except where a threshold decides
// the 3-positive cells (float32, as the data); the loss over the positives, with the larger IoU for a cell
// assigned twice, is the prelude's write_loss.
const char* kPythonReference = R"PY(
import math
H, W = shapes[0][0] * strides[0], shapes[0][1] * strides[0]
sig = lambda v: 1 / (1 + math.exp(-v))

def iou_corners(a, b):  # (x1, y1, x2, y2)
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)

# The 3-positive cells of image b as (level, anchor, gj, gi), ordered by level, offset, anchor, target.
def image_candidates(b):
    out = []
    for i, (ny, nx) in enumerate(shapes):
        for o in range(5):
            for a in range(na):
                for m in np.nonzero(mask[b])[0]:
                    c, cx, cy, w, hh = targets[b, m]
                    gx, gy, gw, gh = cx * f32(nx), cy * f32(ny), w * f32(nx), hh * f32(ny)
                    rw, rh = gw / anchors[i, a, 0], gh / anchors[i, a, 1]
                    if not max(rw, f32(1) / rw, rh, f32(1) / rh) < f32(h['anchor_t']): continue
                    near = [True, gx % 1 < 0.5 and gx > 1, gy % 1 < 0.5 and gy > 1,
                            (f32(nx) - gx) % 1 < 0.5 and f32(nx) - gx > 1, (f32(ny) - gy) % 1 < 0.5 and f32(ny) - gy > 1]
                    if not near[o]: continue
                    sx, sy = [(gx, gy), (gx - f32(0.5), gy), (gx, gy - f32(0.5)), (gx + f32(0.5), gy), (gx, gy + f32(0.5))][o]
                    out.append((i, a, min(max(int(sy), 0), ny - 1), min(max(int(sx), 0), nx - 1)))
    return out

positives = [[] for _ in range(nl)]  # per level, as write_loss takes them
for b in range(B):
    gts, cands = list(np.nonzero(mask[b])[0]), image_candidates(b)
    if not gts or not cands: continue
    ious, costs = [], []
    for m in gts:
        c, cx, cy, w, hh = [float(v) for v in targets[b, m]]
        g = (cx * W - w * W / 2, cy * H - hh * H / 2, cx * W + w * W / 2, cy * H + hh * H / 2)
        row_iou, row_cost = [], []
        for i, a, gj, gi in cands:
            r, s = levels[i][b, a, gj, gi].detach().numpy(), strides[i]
            px, py = (2 * sig(r[0]) - 0.5 + gi) * s, (2 * sig(r[1]) - 0.5 + gj) * s
            pw, ph = (2 * sig(r[2])) ** 2 * float(anchors[i, a, 0]) * s, (2 * sig(r[3])) ** 2 * float(anchors[i, a, 1]) * s
            u = iou_corners(g, (px - pw / 2, py - ph / 2, px + pw / 2, py + ph / 2))
            cost = 3 * -math.log(u + 1e-8)
            for k in range(nc):
                y = math.sqrt(sig(r[5 + k]) * sig(r[4]))
                cost += -math.log(y) if k == int(c) else -math.log(1 - y)
            row_iou.append(u)
            row_cost.append(cost)
        ious.append(row_iou)
        costs.append(row_cost)
    claims = {}
    for g in range(len(gts)):
        dk = max(1, int(sum(sorted(ious[g], reverse=True)[:10])))
        for n in sorted(range(len(cands)), key=lambda n: (costs[g][n], n))[:dk]:
            claims.setdefault(n, []).append(g)
    for n, who in sorted(claims.items()):
        g = who[0] if len(who) == 1 else min(range(len(gts)), key=lambda g: (costs[g][n], g))
        i, a, gj, gi = cands[n]
        c, cx, cy, w, hh = [float(v) for v in targets[b, gts[g]]]
        ny, nx = shapes[i]
        positives[i].append((b, a, gj, gi, (cx * nx - gi, cy * ny - gj, w * nx, hh * ny), int(c)))
write_loss(positives)
)PY";

// Runs upstream's own ComputeLossOTA (ComputeLossAuxOTA when AUX: the case's levels are then the lead ones
// followed by as many auxiliary ones) from the checkout YOLOV7, imported with its heavy imports stubbed, on the
// same files, in float32 as upstream trains; writes result.bin and grad<i>.bin like the reference.
const char* kPythonUpstream = R"PY(
import sys, json, types
from unittest import mock
sys.path.insert(0, YOLOV7)
for name in ['cv2', 'pandas', 'torchvision', 'yaml', 'utils.google_utils', 'utils.metrics', 'utils.torch_utils']:
    sys.modules[name] = mock.MagicMock()
sys.modules['utils.torch_utils'].is_parallel = lambda m: False
import numpy as np, torch
from utils.loss import ComputeLossOTA, ComputeLossAuxOTA
meta = json.load(open(DIR + '/meta.json'))
B, M, nc, na, img, shapes, strides = [meta[k] for k in ['B', 'M', 'nc', 'na', 'img_size', 'shapes', 'strides']]
nl, f32, h = len(shapes), np.float32, dict(meta['hyp'])
levels = [torch.from_numpy(np.fromfile(f'{DIR}/level{i}.bin', dtype=f32).reshape(B, na, ny, nx, nc + 5)).requires_grad_()
          for i, (ny, nx) in enumerate(shapes + shapes if AUX else shapes)]  # AUX: lead, then auxiliary levels
targets = np.fromfile(DIR + '/targets.bin', dtype=f32).reshape(B, M, 5)
mask = np.fromfile(DIR + '/mask.bin', dtype=np.uint8).reshape(B, M).astype(bool)
anchors = torch.from_numpy(np.fromfile(DIR + '/anchors.bin', dtype=f32).reshape(nl, na, 2))
labels = torch.tensor([[b] + targets[b, m].tolist() for b in range(B) for m in range(M) if mask[b, m]]).view(-1, 6)
h['box'] *= 3 / nl; h['cls'] *= nc / 80 * 3 / nl; h['obj'] *= (img / 640) ** 2 * 3 / nl  # as train.py
det = types.SimpleNamespace(na=na, nc=nc, nl=nl, anchors=anchors, stride=torch.tensor(strides, dtype=torch.float32))
model = types.SimpleNamespace(hyp=h, gr=1.0, model=[det], parameters=lambda: iter([torch.zeros(1)]))
imgs = torch.zeros(B, 3, shapes[0][0] * strides[0], shapes[0][1] * strides[0])
loss, items = (ComputeLossAuxOTA if AUX else ComputeLossOTA)(model)(levels, labels, imgs)
loss.backward()
np.array([loss.item()] + items[:3].tolist(), dtype=np.float64).tofile(DIR + '/result.bin')
for i, p in enumerate(levels): p.grad.numpy().astype(np.float64).tofile(f'{DIR}/grad{i}.bin')
print('upstream', loss.item(), items[:3].tolist())
)PY";

// Runs the Python reference on a random case and compares loss, items and gradients.
void cross_check(const RandomCase& c) {
  test::cross_check(c, "", test::kPythonLossPrelude + std::string(kPythonReference), 1e-4);
}

TEST(OtaLoss, MatchesPythonReferenceDefaults) {
  for (uint64_t seed : {11, 12, 13}) cross_check(RandomCase(seed));
}

TEST(OtaLoss, MatchesPythonReferenceFocalSmoothingWeightsWideInput) {
  const LossOptions o = focal_smoothing_weights();
  cross_check(RandomCase(14, o, kWide));
  cross_check(RandomCase(15, o, kSquare));
}

TEST(OtaLoss, MatchesUpstreamComputeLossOta) {
  const char* checkout = std::getenv("KESTREL_YOLOV7_DIR");
  if (checkout == nullptr) GTEST_SKIP() << "set KESTREL_YOLOV7_DIR to a checkout of WongKinYiu/yolov7";
  // Square inputs (upstream scales x by the height) and no targets on grid-aligned centres or sharing cells
  // on purpose (upstream's tie order among equal costs is torch.topk's). Upstream computes in float32.
  const std::string defines = std::string("YOLOV7 = '") + checkout + "'\nAUX = False\n";
  for (uint64_t seed : {21, 22})
    test::cross_check(RandomCase(seed, LossOptions{}, kSquare, false), defines, kPythonUpstream, 1e-4);
  test::cross_check(RandomCase(23, focal_smoothing_weights(), kSquare, false), defines, kPythonUpstream, 1e-4);
  // Tiny predicted boxes everywhere (w/h logits -12: 2.4e-10 of an anchor): YOLOv7's bbox_iou adds eps to the
  // heights, where YOLOv5's (kestrel's before) differed here by 2.5 % in the box loss.
  RandomCase tiny(24, LossOptions{}, kSquare, false);
  for (at::Tensor& level : tiny.levels) level.narrow(-1, 2, 2).fill_(-12.0);
  test::cross_check(tiny, defines, kPythonUpstream, 1e-4);
}

// ---- IAuxDetect heads (ComputeLossAuxOTA) ----------------------------------------------------------------

// A head like make_head's, but IAuxDetect: implicit, with auxiliary convs (input widths are irrelevant here).
std::shared_ptr<models::Detect> aux_head(int64_t nc, const std::vector<std::vector<double>>& anchors_px,
                                         const std::vector<double>& strides) {
  auto head = std::make_shared<models::Detect>(nc, anchors_px, std::vector<int64_t>(2 * anchors_px.size(), 4), true, true);
  head->initialize(strides);
  return head;
}

TEST(OtaLoss, AuxHeadAddsAQuarterOfTheAuxiliaryLevelsTerms) {
  // One level of 1 x 1 cells (input 32, stride 32): no target has a neighbour cell under either rule (a
  // neighbour needs the centre more than one cell from the border), so the lead and the auxiliary
  // assignments both reduce to the own cell, and top-20 and top-10 IoU sums agree (one candidate per
  // anchor). With the auxiliary level equal to the lead one, every term is 1.25 times the plain OTA loss's,
  // and the gradient reaching the auxiliary level is 0.25 times the lead level's.
  at::manual_seed(31);
  const std::vector<std::vector<double>> anchors = {{10, 13, 16, 30, 33, 23}};
  const auto plain_head = make_head(4, anchors, {32});
  const auto head = aux_head(4, anchors, {32});
  const OtaLoss plain(*plain_head, LossOptions{}, 32), aux(*head, LossOptions{}, 32);
  ASSERT_TRUE(aux.aux());
  const at::Tensor level = at::randn({2, 3, 1, 1, 9}) * 1.5;
  // 3 targets an image share its one cell: at most 9 candidates, below either top-k.
  at::Tensor t = at::rand({2, 3, 5});
  t.select(2, 0).copy_(at::randint(0, 4, {2, 3}));
  t.narrow(2, 3, 2).mul_(0.8).add_(0.1);
  const at::Tensor mask = all_real(t);
  const Evaluated p = evaluate(plain, {level}, t, mask);
  const Evaluated a = evaluate(aux, {level, level}, t, mask);
  EXPECT_GT(p.items[0].item<double>(), 0.0);  // the case has positives
  EXPECT_NEAR(a.total.item<double>(), 1.25 * p.total.item<double>(), 1e-5 * p.total.item<double>());
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(item_at(a.items, k), 1.25 * item_at(p.items, k), 1e-6) << k;
  EXPECT_TRUE(at::allclose(a.grads[0], p.grads[0], 1e-5, 1e-8));
  EXPECT_TRUE(at::allclose(a.grads[1], 0.25 * p.grads[0], 1e-5, 1e-8));
  // The lead-only level list of an aux head, or an aux list for a plain head, is an error.
  EXPECT_THROW(aux({level}, t, mask), Error);
  EXPECT_THROW(plain({level, level}, t, mask), Error);
}

TEST(OtaLoss, AuxAssignmentUsesAllFourNeighbours) {
  // Grid4's target A at (1.25, 1.25): the lead rule's candidates are the own, left and upper cells; the
  // auxiliary rule (g = 1) adds the right and lower ones. Make the right cell the only good prediction
  // (centre (1.6, 1.25) = 2 s - 0.5 + 2 with s = 0.05, one-cell box: IoU 0.65 / 1.35 with A) and spoil the
  // left one: the auxiliary assignment takes the right cell, which the lead one cannot.
  Grid4 s;
  s.place(0, 1, 0.0, 1.5);   // the left cell's box far from A
  s.level[0][0][1][2][0] = logit(0.05);
  s.level[0][0][1][2][1] = logit((1.25 - 1 + 0.5) / 2);
  const auto head = aux_head(2, {{16, 16}}, {16});
  const OtaLoss loss(*head, LossOptions{}, 64);
  const at::Tensor t = batch_of({kTargetA});
  const OtaLoss::Assignment lead = loss.assign({s.level, s.level}, t, all_real(t));
  const OtaLoss::Assignment auxiliary = loss.assign({s.level, s.level}, t, all_real(t), /*auxiliary=*/true);
  EXPECT_FALSE(lead.matched[0][0][0][0][3].item<bool>());
  EXPECT_TRUE(auxiliary.matched[0][0][0][0][3].item<bool>());  // offset 3: the right neighbour
  EXPECT_THROW(s.loss.assign({s.level}, t, all_real(t), /*auxiliary=*/true), Error);  // not an aux head
}

TEST(OtaLoss, AuxHeadMatchesUpstreamComputeLossAuxOta) {
  const char* checkout = std::getenv("KESTREL_YOLOV7_DIR");
  if (checkout == nullptr) GTEST_SKIP() << "set KESTREL_YOLOV7_DIR to a checkout of WongKinYiu/yolov7";
  const std::string defines = std::string("YOLOV7 = '") + checkout + "'\nAUX = True\n";
  for (uint64_t seed : {41, 42}) {
    // The random case's head, levels and targets, its head made IAuxDetect and its levels followed by
    // auxiliary ones; square inputs and no shared cells, as for ComputeLossOTA above.
    test::RandomInputs c(seed, seed == 42 ? focal_smoothing_weights() : LossOptions{}, kSquare, false);
    c.head = aux_head(4, {{2, 3, 3, 6, 6, 4}, {6, 12, 12, 9, 12, 24}, {23, 18, 31, 40, 75, 65}}, {8, 16, 32});
    for (const at::Tensor& l : test::random_levels(3, c.shapes)) c.levels.push_back(l);
    const OtaLoss loss(*c.head, c.hyp, test::RandomInputs::kImgSize);
    test::expect_matches_script(c, evaluate(loss, c.levels, c.t, c.mask), defines, kPythonUpstream, 1e-4);
  }
}

TEST(OtaLoss, CudaMatchesCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  test::expect_cuda_matches_cpu(RandomCase(6));
}

// Not a check: prints forward + backward times of OtaLoss and YoloLoss for a COCO-sized batch (B 16, 320 px,
// nc 80, 50 targets per image). Run with --gtest_also_run_disabled_tests --gtest_filter='*Timing*'.
TEST(OtaLoss, DISABLED_TimingVsYoloLoss) {
  at::manual_seed(0);
  auto head = make_head(80, {{12, 16, 19, 36, 40, 28}, {36, 75, 76, 55, 72, 146}, {142, 110, 192, 243, 459, 401}},
                        {8, 16, 32});
  const OtaLoss ota(*head, LossOptions{}, 320);
  const YoloLoss yolo(*head, LossOptions{}, 320);
  const int64_t B = 16, M = 50;
  std::vector<at::Tensor> levels;
  for (int64_t n : {40, 20, 10}) levels.push_back((at::randn({B, 3, n, n, 85}) * 1.5).requires_grad_());
  at::Tensor t = at::rand({B, M, 5});
  t.select(2, 0).copy_(at::randint(0, 80, {B, M}));
  t.narrow(2, 3, 2).copy_(at::exp(at::rand({B, M, 2}) * std::log(40.0)) / 50);
  const at::Tensor mask = at::ones({B, M}, at::kBool);
  // Interleaved repetitions, best of each: robust to other load on the machine.
  auto ms = [](const auto& step) {
    const auto start = std::chrono::steady_clock::now();
    step();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  double ms_ota = 1e9, ms_assign = 1e9, ms_yolo = 1e9;
  for (int rep = 0; rep < 8; ++rep) {
    ms_ota = std::min(ms_ota, ms([&] { ota(levels, t, mask).total.backward(); }));
    ms_assign = std::min(ms_assign, ms([&] { ota.assign(levels, t, mask); }));
    ms_yolo = std::min(ms_yolo, ms([&] { yolo(levels, t, mask).total.backward(); }));
  }
  std::printf("B %lld, 320 px, 50 targets/image, %d threads, forward + backward: OtaLoss %.1f ms (assignment %.1f ms), "
              "YoloLoss %.1f ms\n", static_cast<long long>(B), at::get_num_threads(), ms_ota, ms_assign, ms_yolo);
}

}  // namespace
}  // namespace kestrel::loss
