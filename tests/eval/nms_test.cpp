// NMS: the greedy kernel and YOLOv5 v7.0's non_max_suppression on cases derived by hand (run on CPU and,
// where a GPU is present, on CUDA), cross-checked against an independent numpy/torch reference run by the
// project's Python (torchvision is not installed there: the reference carries its own greedy NMS), and
// CUDA == CPU on random data (skipped without a GPU).
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kestrel/core/error.h"
#include "kestrel/eval/nms.h"
#include "test_support.h"

namespace kestrel::eval {
namespace {

using nlohmann::json;

at::Tensor boxes_of(const std::vector<double>& v) { return at::tensor(v, at::kDouble).to(at::kFloat).view({-1, 4}); }
at::Tensor scores_of(const std::vector<double>& v) { return at::tensor(v, at::kDouble).to(at::kFloat); }

std::vector<int64_t> ints(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU).to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// CPU, plus CUDA where there is a GPU: the hand-made cases run on every device that has a kernel.
std::vector<at::Device> devices() {
  std::vector<at::Device> out{at::kCPU};
  if (torch::cuda::is_available()) out.emplace_back(at::kCUDA, 0);
  return out;
}

std::vector<int64_t> keep(const at::Tensor& boxes, const at::Tensor& scores, double thr, at::Device device) {
  const at::Tensor k = nms_indices(boxes.to(device), scores.to(device), thr);
  EXPECT_EQ(k.device(), device);
  EXPECT_EQ(k.scalar_type(), at::kLong);
  return ints(k);
}

using Keep = std::vector<int64_t>;

TEST(NmsIndices, SuppressesOnlyAboveTheThreshold) {
  // Against A = [0,0,10,10] (area 100), B = [0,0,10,6] has IoU 60/100 = 0.6 and C = [0,0,10,4] 40/100 = 0.4.
  // B is removed by A, so B (IoU(B,C) = 40/60) cannot remove C.
  const at::Tensor abc = boxes_of({0, 0, 10, 10, 0, 0, 10, 6, 0, 0, 10, 4});
  // D = [0,0,10,5] has IoU exactly 50/100 = 0.5 with A: kept at 0.5 (suppression needs IoU > threshold).
  const at::Tensor ad = boxes_of({0, 0, 10, 10, 0, 0, 10, 5});
  for (const at::Device d : devices()) {
    EXPECT_EQ(keep(abc, scores_of({0.9, 0.8, 0.7}), 0.5, d), (Keep{0, 2})) << d;
    EXPECT_EQ(keep(abc, scores_of({0.9, 0.8, 0.7}), 0.39, d), (Keep{0})) << d;
    EXPECT_EQ(keep(abc, scores_of({0.9, 0.8, 0.7}), 0.61, d), (Keep{0, 1})) << d;  // B kept, and removes C
    EXPECT_EQ(keep(abc, scores_of({0.9, 0.8, 0.7}), 0.7, d), (Keep{0, 1, 2})) << d;
    EXPECT_EQ(keep(ad, scores_of({0.9, 0.8}), 0.5, d), (Keep{0, 1})) << d;
    EXPECT_EQ(keep(ad, scores_of({0.9, 0.8}), 0.4999, d), (Keep{0})) << d;
    // The threshold is compared as a double: float(0.5 - 1e-12) is 0.5, yet 0.5 > 0.5 - 1e-12.
    EXPECT_EQ(keep(ad, scores_of({0.9, 0.8}), 0.5 - 1e-12, d), (Keep{0})) << d;
    EXPECT_EQ(keep(ad, scores_of({0.9, 0.8}), 0.5 + 1e-12, d), (Keep{0, 1})) << d;
  }
}

TEST(NmsIndices, IsGreedyNotFastNms) {
  // Boxes 10 high at x 0..10, 3..13, 6..16: IoU(A,B) = IoU(B,C) = 70/130 = 0.54, IoU(A,C) = 40/160 = 0.25.
  // Greedy: A removes B; C survives because B is gone. (Fast NMS, one pass over the IoU matrix, would
  // drop C too.)
  for (const at::Device d : devices())
    EXPECT_EQ(keep(boxes_of({0, 0, 10, 10, 3, 0, 13, 10, 6, 0, 16, 10}), scores_of({0.9, 0.8, 0.7}), 0.5, d),
              (Keep{0, 2})) << d;
}

TEST(NmsIndices, OnlyTheBestOfAClusterSurvives) {
  // Five 10x10-ish boxes shifted by at most 0.5: every pair has IoU >= 90/110; the best is box 3.
  const at::Tensor b = boxes_of({0, 0, 10, 10, 0.5, 0, 10.5, 10, 0, 0.5, 10, 10.5, 0.2, 0.2, 10.2, 10.2, 0, 0, 10, 9.5});
  for (const at::Device d : devices()) EXPECT_EQ(keep(b, scores_of({0.5, 0.6, 0.7, 0.95, 0.4}), 0.45, d), (Keep{3})) << d;
}

TEST(NmsIndices, EqualScoresKeepIndexOrder) {
  // Disjoint boxes: output is descending score, equal scores by index.
  const at::Tensor apart = boxes_of({0, 0, 1, 1, 2, 0, 3, 1, 4, 0, 5, 1, 6, 0, 7, 1});
  // Boxes 1 and 2 identical with equal scores: the lower index wins; box 0 elsewhere.
  const at::Tensor twins = boxes_of({50, 50, 60, 60, 0, 0, 10, 10, 0, 0, 10, 10});
  for (const at::Device d : devices()) {
    EXPECT_EQ(keep(apart, scores_of({0.5, 0.9, 0.5, 0.9}), 0.5, d), (Keep{1, 3, 0, 2})) << d;
    EXPECT_EQ(keep(twins, scores_of({0.1, 0.7, 0.7}), 0.5, d), (Keep{1, 0})) << d;
  }
}

TEST(NmsIndices, ZeroAreaBoxes) {
  // Two identical points: IoU 0/0 = NaN, which is not > threshold, so both stay (torchvision does the
  // same). A point inside a box: intersection 0, IoU 0. A zero-width line on a box's edge: IoU 0.
  const at::Tensor b = boxes_of({5, 5, 5, 5, 5, 5, 5, 5, 0, 0, 10, 10, 10, 0, 10, 10});
  for (const at::Device d : devices()) {
    EXPECT_EQ(keep(b, scores_of({0.9, 0.8, 0.7, 0.6}), 0.5, d), (Keep{0, 1, 2, 3})) << d;
    EXPECT_EQ(keep(b, scores_of({0.9, 0.8, 0.7, 0.6}), 0.0, d), (Keep{0, 1, 2, 3})) << d;
  }
}

TEST(NmsIndices, EmptyAndSingle) {
  for (const at::Device d : devices()) {
    const at::Tensor none = nms_indices(at::zeros({0, 4}, at::device(d)), at::zeros({0}, at::device(d)), 0.5);
    EXPECT_EQ(none.sizes(), at::IntArrayRef({0}));
    EXPECT_EQ(none.scalar_type(), at::kLong);
    EXPECT_EQ(none.device(), d);
    EXPECT_EQ(keep(boxes_of({1, 2, 3, 4}), scores_of({0.1}), 0.5, d), (Keep{0})) << d;
  }
}

TEST(NmsIndices, HalfAndBfloat16BoxesComputeInFloat) {
  // The chain of IsGreedyNotFastNms: every coordinate is exact in 16 bits.
  const at::Tensor b = boxes_of({0, 0, 10, 10, 3, 0, 13, 10, 6, 0, 16, 10});
  const at::Tensor s = scores_of({0.9, 0.8, 0.7});
  for (const at::Device d : devices())
    for (const at::ScalarType t : {at::kHalf, at::kBFloat16, at::kDouble})
      EXPECT_EQ(keep(b.to(t), s.to(t), 0.5, d), (Keep{0, 2})) << d << " " << t;
}

TEST(NmsIndices, RejectsBadInput) {
  const at::Tensor b = boxes_of({0, 0, 1, 1, 0, 0, 1, 1});
  EXPECT_THROW(nms_indices(b.view({4, 2}), scores_of({1, 1, 1, 1}), 0.5), Error);
  EXPECT_THROW(nms_indices(b, scores_of({1, 1, 1}), 0.5), Error);
  EXPECT_THROW(nms_indices(b.to(at::kInt), scores_of({1, 1}), 0.5), Error);
  EXPECT_THROW(nms_indices(b, scores_of({1, 1}), std::nan("")), Error);
}

// ---- non_max_suppression -------------------------------------------------------------------------

// One image [1, n, 5 + nc] from rows (cx, cy, w, h, obj, cls...).
at::Tensor image_of(const std::vector<std::vector<double>>& rows) {
  std::vector<double> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return at::tensor(flat, at::kDouble).to(at::kFloat).view({1, static_cast<int64_t>(rows.size()), -1});
}

std::vector<std::vector<double>> rows_of(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU).to(at::kDouble).contiguous();
  std::vector<std::vector<double>> out(c.size(0));
  for (int64_t i = 0; i < c.size(0); ++i) out[i].assign(c[i].data_ptr<double>(), c[i].data_ptr<double>() + c.size(1));
  return out;
}

void expect_rows(const at::Tensor& got, const std::vector<std::vector<double>>& want, const std::string& where) {
  ASSERT_EQ(got.dim(), 2) << where;
  ASSERT_EQ(got.size(1), 6) << where;
  const auto rows = rows_of(got);
  ASSERT_EQ(rows.size(), want.size()) << where;
  for (size_t i = 0; i < rows.size(); ++i)
    for (int k = 0; k < 6; ++k) EXPECT_NEAR(rows[i][k], want[i][k], 1e-6) << where << " row " << i << " col " << k;
}

std::vector<at::Tensor> run(const at::Tensor& prediction, const NmsOptions& o, at::Device d) {
  std::vector<at::Tensor> out = non_max_suppression(prediction.to(d), o);
  for (const at::Tensor& t : out) {
    EXPECT_EQ(t.device(), d);
    EXPECT_EQ(t.scalar_type(), at::kFloat);
  }
  return out;
}

TEST(NonMaxSuppression, OptionsDefaultToUpstream) {
  const NmsOptions o;
  EXPECT_EQ(o.conf_thres, 0.25);
  EXPECT_EQ(o.iou_thres, 0.45);
  EXPECT_FALSE(o.multi_label);
  EXPECT_FALSE(o.agnostic);
  EXPECT_EQ(o.max_det, 300);
  EXPECT_EQ(o.max_nms, 30000);
  EXPECT_TRUE(o.classes.empty());
  EXPECT_EQ(kMaxWh, 7680.0);
}

TEST(NonMaxSuppression, ConvertsBoxesAndFiltersByConfidence) {
  // Two classes, conf_thres 0.25:
  //   r0: obj 1.0, cls (0.3, 0.1) -> conf 0.3, class 0, box 200,100 40x40 -> [180, 80, 220, 120]
  //   r1: obj 0.25 is not > 0.25: not a candidate, even though obj * cls = 0.375 (a class score above 1
  //       is no probability, but it shows that obj is filtered first, as upstream does)
  //   r2: obj 0.5, best cls 0.5 -> conf exactly 0.25, not > 0.25: dropped
  //   r3: obj 0.9, cls (0.5, 0.8) -> conf 0.72, class 1, box 50,50 20x10 -> [40, 45, 60, 55]
  const at::Tensor p = image_of({{200, 100, 40, 40, 1.0, 0.3, 0.1},
                                 {10, 10, 5, 5, 0.25, 1.5, 0.0},
                                 {300, 300, 10, 10, 0.5, 0.5, 0.3},
                                 {50, 50, 20, 10, 0.9, 0.5, 0.8}});
  for (const at::Device d : devices()) {
    const auto out = run(p, NmsOptions{}, d);
    ASSERT_EQ(out.size(), 1u);
    expect_rows(out[0], {{40, 45, 60, 55, 0.72, 1}, {180, 80, 220, 120, 0.3, 0}}, "default");
  }
}

TEST(NonMaxSuppression, Yolov7OneClassConfidenceIsObjectness) {
  // One class: obj 0.8, cls 0.5. YOLOv5 (the default): conf 0.4; YOLOv7's rule: conf 0.8. With two classes
  // the rule changes nothing: obj 0.8 x best cls 0.5 = 0.4 either way.
  const at::Tensor one = image_of({{50, 50, 10, 10, 0.8, 0.5}});
  const at::Tensor two = image_of({{50, 50, 10, 10, 0.8, 0.5, 0.25}});
  NmsOptions yolov7;
  yolov7.yolov7 = true;
  EXPECT_FALSE(NmsOptions{}.yolov7);
  for (const at::Device d : devices()) {
    expect_rows(run(one, NmsOptions{}, d)[0], {{45, 45, 55, 55, 0.4, 0}}, "one class, YOLOv5");
    expect_rows(run(one, yolov7, d)[0], {{45, 45, 55, 55, 0.8, 0}}, "one class, YOLOv7");
    expect_rows(run(two, yolov7, d)[0], {{45, 45, 55, 55, 0.4, 0}}, "two classes, YOLOv7");
  }
}

TEST(NonMaxSuppression, ClassAwareUnlessAgnostic) {
  // Box 0 (class 0, conf 0.9) and box 1 (class 1, conf 0.8, shifted 0.5 px in x) have IoU 95/105 = 0.90;
  // box 2 (class 0, conf 0.7, shifted in y) has IoU 0.90 with box 0 and is suppressed by it in both modes.
  const at::Tensor p = image_of({{50, 50, 10, 10, 0.9, 1, 0}, {50.5, 50, 10, 10, 0.8, 0, 1}, {50, 50.5, 10, 10, 0.7, 1, 0}});
  for (const at::Device d : devices()) {
    expect_rows(run(p, NmsOptions{}, d)[0], {{45, 45, 55, 55, 0.9, 0}, {45.5, 45, 55.5, 55, 0.8, 1}}, "class-aware");
    NmsOptions agnostic;
    agnostic.agnostic = true;
    expect_rows(run(p, agnostic, d)[0], {{45, 45, 55, 55, 0.9, 0}}, "agnostic");
  }
}

TEST(NonMaxSuppression, MultiLabelExpandsAndClassesFilter) {
  // One box, obj 1, class probabilities (0.9, 0.5, 0.1): multi-label gives a row for classes 0 and 1
  // (same box, different classes: both survive class-aware NMS), best-class only class 0.
  const at::Tensor p = image_of({{20, 20, 10, 10, 1.0, 0.9, 0.5, 0.1}});
  const std::vector<double> box{15, 15, 25, 25};
  auto row = [&](double conf, double cls) { return std::vector<double>{box[0], box[1], box[2], box[3], conf, cls}; };
  for (const at::Device d : devices()) {
    NmsOptions o;
    expect_rows(run(p, o, d)[0], {row(0.9, 0)}, "best class");
    o.multi_label = true;
    expect_rows(run(p, o, d)[0], {row(0.9, 0), row(0.5, 1)}, "multi-label");
    o.classes = {1, 2};
    expect_rows(run(p, o, d)[0], {row(0.5, 1)}, "multi-label, classes 1 and 2");
    o.classes = {2};
    expect_rows(run(p, o, d)[0], {}, "multi-label, class 2 only (0.1 < conf_thres)");
    o.classes = {};
    o.agnostic = true;
    expect_rows(run(p, o, d)[0], {row(0.9, 0)}, "multi-label, agnostic");
  }
}

TEST(NonMaxSuppression, MaxDetAndMaxNmsKeepTheMostConfident) {
  // Ten disjoint boxes with obj 0.30, 0.35, ..., 0.75 (class prob 1), in shuffled order.
  std::vector<std::vector<double>> rows;
  const int order[10] = {3, 7, 0, 9, 5, 1, 8, 2, 6, 4};
  for (int i : order) rows.push_back({20.0 * i + 5, 5, 10, 10, 0.30 + 0.05 * i, 1.0});
  const at::Tensor p = image_of(rows);
  auto expected = [](int n) {
    std::vector<std::vector<double>> out;
    for (int i = 9; i > 9 - n; --i) out.push_back({20.0 * i, 0, 20.0 * i + 10, 10, 0.30 + 0.05 * i, 0});
    return out;
  };
  for (const at::Device d : devices()) {
    NmsOptions o;
    expect_rows(run(p, o, d)[0], expected(10), "all");
    o.max_det = 3;
    expect_rows(run(p, o, d)[0], expected(3), "max_det 3");
    o.max_det = 300;
    o.max_nms = 4;
    expect_rows(run(p, o, d)[0], expected(4), "max_nms 4");
    o.max_det = 0;
    expect_rows(run(p, o, d)[0], {}, "max_det 0");
  }
}

TEST(NonMaxSuppression, BatchWithEmptyImages) {
  // Image 0 has one box above the threshold, image 1 none, image 2 one whose conf (0.5 * 0.4) is too low.
  at::Tensor p = at::zeros({3, 2, 6});
  p[0][1].copy_(at::tensor({10.0, 10.0, 4.0, 6.0, 0.5, 0.8}, at::kDouble));
  p[2][0].copy_(at::tensor({10.0, 10.0, 4.0, 6.0, 0.5, 0.4}, at::kDouble));
  for (const at::Device d : devices()) {
    const auto out = run(p, NmsOptions{}, d);
    ASSERT_EQ(out.size(), 3u);
    expect_rows(out[0], {{8, 7, 12, 13, 0.4, 0}}, "image 0");
    expect_rows(out[1], {}, "image 1");
    expect_rows(out[2], {}, "image 2");
  }
  EXPECT_TRUE(non_max_suppression(at::zeros({0, 5, 7})).empty());
}

TEST(NonMaxSuppression, RejectsBadInput) {
  EXPECT_THROW(non_max_suppression(at::zeros({1, 4, 5})), Error);  // no class column
  EXPECT_THROW(non_max_suppression(at::zeros({4, 7})), Error);
  EXPECT_THROW(non_max_suppression(at::zeros({1, 4, 7}, at::kInt)), Error);
  NmsOptions o;
  o.conf_thres = 1.5;
  EXPECT_THROW(non_max_suppression(at::zeros({1, 4, 7}), o), Error);
  o = NmsOptions{};
  o.iou_thres = -0.1;
  EXPECT_THROW(non_max_suppression(at::zeros({1, 4, 7}), o), Error);
  o = NmsOptions{};
  o.max_nms = 0;
  EXPECT_THROW(non_max_suppression(at::zeros({1, 4, 7}), o), Error);
}

// ---- random data: the Python reference, and CUDA == CPU -------------------------------------------

double uniform(std::mt19937& rng) { return static_cast<double>(rng() >> 8) * (1.0 / 16777216.0); }

// n boxes [n, 4] in clusters of about 8 around random centres of a 640 px image, so that many overlap;
// a few exact duplicates and zero-area boxes. Scores [n] on a 1/32 grid: many ties.
std::pair<at::Tensor, at::Tensor> random_boxes(uint32_t seed, int64_t n) {
  std::mt19937 rng(seed);
  std::vector<double> b, s;
  double cx = 0, cy = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 8 == 0) cx = uniform(rng) * 640, cy = uniform(rng) * 640;
    const double w = 4 + uniform(rng) * 80, h = 4 + uniform(rng) * 80;
    const double x = cx + (uniform(rng) - 0.5) * 20, y = cy + (uniform(rng) - 0.5) * 20;
    if (i % 97 == 5) {
      const std::vector<double> previous(b.end() - 4, b.end());
      b.insert(b.end(), previous.begin(), previous.end());  // an exact duplicate of the previous box
    } else if (i % 89 == 3) {
      b.insert(b.end(), {x, y, x, y + h});  // zero width
    } else {
      b.insert(b.end(), {x - w / 2, y - h / 2, x + w / 2, y + h / 2});
    }
    s.push_back(std::floor(uniform(rng) * 32) / 32);
  }
  return {boxes_of(b), scores_of(s)};
}

// Predictions [batch, n, 5 + nc] in pixels: clustered boxes, obj and class probabilities in [0, 1).
at::Tensor random_prediction(uint32_t seed, int64_t batch, int64_t n, int64_t nc) {
  std::mt19937 rng(seed);
  std::vector<double> v;
  double cx = 0, cy = 0;
  for (int64_t i = 0; i < batch * n; ++i) {
    if (i % 6 == 0) cx = uniform(rng) * 640, cy = uniform(rng) * 640;
    v.insert(v.end(), {cx + (uniform(rng) - 0.5) * 16, cy + (uniform(rng) - 0.5) * 16, 8 + uniform(rng) * 120,
                       8 + uniform(rng) * 120, uniform(rng)});
    for (int64_t c = 0; c < nc; ++c) v.push_back(uniform(rng));
  }
  return at::tensor(v, at::kDouble).to(at::kFloat).view({batch, n, 5 + nc});
}

json flat_json(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kDouble).contiguous();
  return json(std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel()));
}

// Independent reference: greedy NMS in numpy float32 (IoU = inter / (area_a + area_b - inter), compared
// in float64 with the threshold, as torchvision's CPU kernel), and YOLOv5 v7.0's non_max_suppression
// pipeline in torch around it, with stable sorts in place of upstream's unstable argsort.
const char* kPythonReference = R"PY(
import json
import numpy as np
import torch
d = json.load(open(DATA))

def greedy_nms(boxes, scores, thr):
    order = np.argsort(-scores, kind='stable')
    b = boxes[order]
    x1, y1, x2, y2 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    area = (x2 - x1) * (y2 - y1)
    alive = np.ones(len(b), dtype=bool)
    kept = []
    for i in range(len(b)):
        if not alive[i]:
            continue
        kept.append(int(order[i]))
        rest = np.arange(i + 1, len(b))[alive[i + 1:]]
        w = np.maximum(np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]), np.float32(0))
        h = np.maximum(np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]), np.float32(0))
        inter = w * h
        with np.errstate(invalid='ignore', divide='ignore'):
            iou = inter / (area[i] + area[rest] - inter)
        assert iou.dtype == np.float32
        alive[rest[iou.astype(np.float64) > thr]] = False
    return kept

def yolo_nms(pred, conf_thres, iou_thres, classes, agnostic, multi_label, max_det, max_nms):
    nc = pred.shape[2] - 5
    out = []
    for x in pred:
        x = x[x[:, 4] > conf_thres]
        cls = x[:, 5:] * x[:, 4:5]
        box = torch.cat((x[:, :2] - x[:, 2:4] / 2, x[:, :2] + x[:, 2:4] / 2), 1)
        if multi_label and nc > 1:
            i, j = (cls > conf_thres).nonzero().T
            rows = torch.cat((box[i], cls[i, j][:, None], j[:, None].float()), 1)
        else:
            conf, j = cls.max(1, keepdim=True)
            rows = torch.cat((box, conf, j.float()), 1)[conf[:, 0] > conf_thres]
        if classes:
            rows = rows[(rows[:, 5:6] == torch.tensor(classes, dtype=rows.dtype)).any(1)]
        rows = rows[torch.sort(rows[:, 4], descending=True, stable=True).indices[:max_nms]]
        shifted = rows[:, :4] + (0 if agnostic else rows[:, 5:6] * 7680.0)
        kept = greedy_nms(shifted.numpy(), rows[:, 4].numpy(), iou_thres)[:max_det]
        out.append(rows[kept].tolist())
    return out

result = {}
if 'boxes' in d:
    boxes = np.array(d['boxes'], dtype=np.float32).reshape(-1, 4)
    scores = np.array(d['scores'], dtype=np.float32)
    result['keep'] = [greedy_nms(boxes, scores, t) for t in d['thresholds']]
if 'prediction' in d:
    pred = torch.tensor(d['prediction'], dtype=torch.float32).reshape(d['shape'])
    result['nms'] = [yolo_nms(pred, **s) for s in d['settings']]
print('RESULT ' + json.dumps(result))
)PY";

json run_reference(const json& data) {
  test::TempDir dir;
  test::write_file(dir.file("data.json"), data.dump());
  const test::CommandResult r = test::run_python("DATA = '" + dir.file("data.json") + "'\n" + kPythonReference);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find("RESULT ");
  if (at == std::string::npos) {
    ADD_FAILURE() << r.output;
    return json::object();
  }
  return json::parse(r.output.substr(at + 7, r.output.find('\n', at) - at - 7));
}

const std::vector<double> kThresholds{0.3, 0.45, 0.5, 0.7};

TEST(NmsIndices, MatchesPythonReference) {
  const auto [boxes, scores] = random_boxes(7, 3000);
  const json expected = run_reference({{"boxes", flat_json(boxes)}, {"scores", flat_json(scores)}, {"thresholds", kThresholds}});
  ASSERT_TRUE(expected.contains("keep"));
  for (size_t t = 0; t < kThresholds.size(); ++t) {
    const Keep want = expected["keep"][t].get<Keep>();
    EXPECT_GT(want.size(), 300u);  // suppression happened, but not everywhere
    EXPECT_LT(want.size(), 2900u);
    EXPECT_EQ(keep(boxes, scores, kThresholds[t], at::kCPU), want) << "threshold " << kThresholds[t];
  }
}

// Bit-exact; reports the first differing row rather than thousands of numbers.
void expect_same_rows(const std::vector<std::vector<double>>& got, const std::vector<std::vector<double>>& want,
                      const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      ADD_FAILURE() << where << ": row " << i << " is " << json(got[i]) << ", expected " << json(want[i]);
      return;
    }
}

NmsOptions options_from(const json& s) {
  NmsOptions o;
  o.conf_thres = s["conf_thres"];
  o.iou_thres = s["iou_thres"];
  o.classes = s["classes"].get<std::vector<int>>();
  o.agnostic = s["agnostic"];
  o.multi_label = s["multi_label"];
  o.max_det = s["max_det"];
  o.max_nms = s["max_nms"];
  return o;
}

// Settings of detect.py, val.py, and variations of each option.
json random_settings() {
  auto setting = [](double conf, double iou, std::vector<int> classes, bool agnostic, bool multi, int det, int nms) {
    return json{{"conf_thres", conf}, {"iou_thres", iou}, {"classes", classes}, {"agnostic", agnostic},
                {"multi_label", multi}, {"max_det", det}, {"max_nms", nms}};
  };
  return json::array({setting(0.25, 0.45, {}, false, false, 300, 30000), setting(0.001, 0.6, {}, false, true, 300, 30000),
                      setting(0.1, 0.5, {}, true, false, 300, 30000), setting(0.05, 0.45, {1, 3}, false, true, 50, 30000),
                      setting(0.01, 0.3, {}, false, false, 1000, 400)});
}

TEST(NonMaxSuppression, MatchesPythonReference) {
  const at::Tensor p = random_prediction(11, 2, 2500, 4);
  const json settings = random_settings();
  const json expected = run_reference({{"prediction", flat_json(p)}, {"shape", p.sizes().vec()}, {"settings", settings}});
  ASSERT_TRUE(expected.contains("nms"));
  for (size_t s = 0; s < settings.size(); ++s) {
    const std::vector<at::Tensor> got = non_max_suppression(p, options_from(settings[s]));
    ASSERT_EQ(got.size(), 2u);
    for (size_t b = 0; b < 2; ++b) {
      const auto want = expected["nms"][s][b].get<std::vector<std::vector<double>>>();
      EXPECT_GT(want.size(), 10u) << settings[s];
      expect_same_rows(rows_of(got[b]), want, cat("setting ", settings[s].dump(), " image ", b));
    }
  }
}

TEST(NmsCuda, MatchesCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const at::Device gpu(at::kCUDA, 0);
  // Sizes around the 64-box mask words, and a large one.
  for (const int64_t n : {1, 63, 64, 65, 128, 129, 3000, 20000}) {
    const auto [boxes, scores] = random_boxes(static_cast<uint32_t>(n), n);
    for (const double t : kThresholds) {
      EXPECT_EQ(keep(boxes, scores, t, gpu), keep(boxes, scores, t, at::kCPU)) << n << " boxes, threshold " << t;
      EXPECT_EQ(keep(boxes.to(at::kHalf), scores.to(at::kHalf), t, gpu),
                keep(boxes.to(at::kHalf), scores.to(at::kHalf), t, at::kCPU)) << n << " half boxes, threshold " << t;
    }
  }
  const at::Tensor p = random_prediction(13, 3, 4000, 6);
  for (const json& s : random_settings()) {
    const std::vector<at::Tensor> cpu = non_max_suppression(p, options_from(s));
    const std::vector<at::Tensor> cuda = non_max_suppression(p.to(gpu), options_from(s));
    ASSERT_EQ(cuda.size(), cpu.size());
    for (size_t b = 0; b < cpu.size(); ++b) {
      EXPECT_EQ(cuda[b].device(), gpu);
      EXPECT_TRUE(at::equal(cuda[b].cpu(), cpu[b])) << s << " image " << b;
    }
  }
  // The mask of 384001 boxes would not fit the scan's shared-memory bitmap: refused, not mis-computed.
  EXPECT_THROW(nms_indices(at::zeros({384001, 4}, at::device(gpu)), at::zeros({384001}, at::device(gpu)), 0.5), Error);
}

}  // namespace
}  // namespace kestrel::eval
