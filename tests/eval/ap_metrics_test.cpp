// YOLOv5 val.py metrics: matching and AP on cases derived by hand, and a cross-check of ap_per_class
// and match_predictions against independent numpy implementations run by the project's Python.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "kestrel/core/error.h"
#include "kestrel/eval/ap_metrics.h"
#include "test_support.h"

namespace kestrel::eval {
namespace {

using nlohmann::json;

at::Tensor boxes(std::vector<double> values) {
  return at::tensor(values, at::kFloat).view({-1, 4});
}
at::Tensor classes(std::vector<int64_t> values) { return at::tensor(values, at::kLong); }

std::vector<std::vector<bool>> rows_of(const at::Tensor& correct) {
  std::vector<std::vector<bool>> out(correct.size(0), std::vector<bool>(correct.size(1)));
  for (int64_t i = 0; i < correct.size(0); ++i)
    for (int64_t t = 0; t < correct.size(1); ++t) out[i][t] = correct[i][t].item<bool>();
  return out;
}

TEST(ApMetrics, MatchKeepsEachGtOnceAndChecksClass) {
  // g0 and p0 coincide (IoU 1); p1 = g0 cut to 9/10 (IoU 0.9) also wants g0 but p0 comes first;
  // p2 coincides with g1 but has the wrong class.
  const at::Tensor correct = match_predictions(boxes({0, 0, 10, 10, 0, 0, 10, 9, 20, 0, 30, 10}), classes({0, 0, 1}),
                                               boxes({0, 0, 10, 10, 20, 0, 30, 10}), classes({0, 0}),
                                               default_iou_thresholds());
  ASSERT_EQ(correct.sizes(), at::IntArrayRef({3, 10}));
  EXPECT_EQ(correct.scalar_type(), at::kBool);
  EXPECT_EQ(rows_of(correct), (std::vector<std::vector<bool>>{std::vector<bool>(10, true),
                                                              std::vector<bool>(10, false),
                                                              std::vector<bool>(10, false)}));
}

TEST(ApMetrics, MatchFollowsYolov5v7Order) {
  // Boxes 10 high: g0 x 0..10, g1 x 2..12; p0 x 0..7.7, p1 x 0..9.7 (p0 first, i.e. more confident).
  // IoU(p0,g0) = 77/100 = 0.77, IoU(p0,g1) = 57/120 = 0.475, IoU(p1,g0) = 0.97, IoU(p1,g1) = 77/120 = 0.64.
  // t <= 0.75: both predictions' best gt is g0, which goes to p0 (first); p1 does not fall back to g1.
  // t >= 0.80: only p1 still has a candidate, g0.
  // (A greedy one-to-one match by IoU would give g0 to p1 at every threshold and leave p0 unmatched.)
  const at::Tensor correct = match_predictions(boxes({0, 0, 7.7, 10, 0, 0, 9.7, 10}), classes({3, 3}),
                                               boxes({0, 0, 10, 10, 2, 0, 12, 10}), classes({3, 3}),
                                               default_iou_thresholds());
  const std::vector<bool> low = {true, true, true, true, true, true, false, false, false, false};
  std::vector<bool> high(10);
  for (int t = 0; t < 10; ++t) high[t] = !low[t];
  EXPECT_EQ(rows_of(correct), (std::vector<std::vector<bool>>{low, high}));
}

TEST(ApMetrics, MatchWithNothingToMatch) {
  const at::Tensor t = default_iou_thresholds();
  EXPECT_EQ(match_predictions(boxes({}), classes({}), boxes({0, 0, 1, 1}), classes({0}), t).sizes(),
            at::IntArrayRef({0, 10}));
  EXPECT_FALSE(match_predictions(boxes({0, 0, 1, 1}), classes({0}), boxes({}), classes({}), t).any().item<bool>());
  EXPECT_THROW(match_predictions(boxes({0, 0, 1, 1}), classes({0, 1}), boxes({}), classes({}), t), Error);
}

at::Tensor all_thresholds(std::vector<bool> per_prediction) {
  at::Tensor out = at::zeros({static_cast<int64_t>(per_prediction.size()), 10}, at::kBool);
  for (size_t i = 0; i < per_prediction.size(); ++i) out[i].fill_(static_cast<bool>(per_prediction[i]));
  return out;
}

// 2 targets; predictions at conf 0.9 (TP), 0.8 (FP), 0.7 (TP): recall 1/2, 1/2, 1 and precision 1, 1/2,
// 2/3. Envelope with the sentinels: 1 for recall < 1/2, 2/3 from 1/2 up to (not at) 1, 0 at recall 1.
// Trapezoids on the 101-point grid: 49 * 0.01 * 1 + 0.01 * (1 + 2/3) / 2 + 49 * 0.01 * 2/3 + 0.01 * (2/3) / 2
//   = 0.49 + 1/120 + 0.98/3 + 1/300 = 0.8283333...
const double kHandAp = 0.49 + 1.0 / 120 + 0.98 / 3 + 1.0 / 300;

TEST(ApMetrics, ApByHand) {
  const ApPerClass r = ap_per_class(all_thresholds({true, false, true}), at::tensor({0.9, 0.8, 0.7}),
                                    at::tensor({0.0, 0.0, 0.0}), at::tensor({0.0, 0.0}));
  ASSERT_EQ(r.ap.sizes(), at::IntArrayRef({1, 10}));
  for (int t = 0; t < 10; ++t) EXPECT_NEAR(r.ap[0][t].item<double>(), kHandAp, 1e-12);
  EXPECT_NEAR(r.map50, kHandAp, 1e-12);
  EXPECT_NEAR(r.map, kHandAp, 1e-12);
  // F1 is 0.8 (P 2/3, R 1) for every confidence <= 0.7 and lower above, so the smoothed curve peaks
  // first at confidence 0.
  EXPECT_EQ(r.best_confidence, 0.0);
  EXPECT_NEAR(r.precision[0].item<double>(), 2.0 / 3, 1e-12);
  EXPECT_NEAR(r.recall[0].item<double>(), 1.0, 1e-12);
  EXPECT_NEAR(r.f1[0].item<double>(), 0.8, 1e-12);
  EXPECT_EQ(r.true_positives[0].item<double>(), 2.0);
  EXPECT_EQ(r.false_positives[0].item<double>(), 1.0);
}

TEST(ApMetrics, ClassesWithoutPredictionsCountAsZero) {
  // Class 0 as in ApByHand; class 1 has a target and no prediction; class 2 has a prediction and no target.
  const ApPerClass r = ap_per_class(all_thresholds({true, false, true, true}), at::tensor({0.9, 0.8, 0.7, 0.95}),
                                    at::tensor({0, 0, 0, 2}), at::tensor({0, 1, 0}));
  EXPECT_TRUE(r.classes.equal(at::tensor({0, 1}, at::kLong)));
  EXPECT_NEAR(r.map50, kHandAp / 2, 1e-12);
  EXPECT_EQ(r.ap[1].sum().item<double>(), 0.0);
  EXPECT_NEAR(r.mp, (2.0 / 3) / 2, 1e-12);
  EXPECT_NEAR(r.mr, 0.5, 1e-12);
}

TEST(ApMetrics, PerfectAndThresholdDependentAp) {
  // Every prediction correct: the envelope is 1 up to recall 1 where the sentinel precision 0 sits, so
  // the last trapezoid is half: 0.99 + 0.005 = 0.995 (YOLOv5's ceiling).
  at::Tensor correct = all_thresholds({true, true, true});
  correct.slice(1, 6).fill_(false);  // ...but only at IoU thresholds below 0.80: AP 0 above
  const ApPerClass r = ap_per_class(correct, at::tensor({0.5, 0.6, 0.7}), at::tensor({4, 4, 4}),
                                    at::tensor({4, 4, 4}));
  for (int t = 0; t < 10; ++t) EXPECT_NEAR(r.ap[0][t].item<double>(), t < 6 ? 0.995 : 0.0, 1e-12) << t;
  EXPECT_NEAR(r.map50, 0.995, 1e-12);
  EXPECT_NEAR(r.map, 0.995 * 6 / 10, 1e-12);
}

TEST(ApMetrics, NothingCorrectIsAllZero) {
  const ApPerClass none = ap_per_class(all_thresholds({false, false}), at::tensor({0.9, 0.8}), at::tensor({0, 0}),
                                       at::tensor({0, 1}));
  EXPECT_EQ(none.classes.numel(), 2);
  EXPECT_EQ(none.map, 0.0);
  EXPECT_EQ(none.mp, 0.0);
  const ApPerClass empty = ap_per_class(at::zeros({0, 10}, at::kBool), at::zeros({0}), at::zeros({0}), at::zeros({0}));
  EXPECT_EQ(empty.classes.numel(), 0);
  EXPECT_EQ(empty.map50, 0.0);
}

double uniform(std::mt19937& rng) { return static_cast<double>(rng() >> 8) * (1.0 / 16777216.0); }

// Random predictions over 6 classes (class 5 never a target, class 4 never predicted), each with a
// match quality so that correctness falls as the IoU threshold rises; ties in conf when `quantise`.
json random_set(uint32_t seed, bool quantise) {
  std::mt19937 rng(seed);
  std::vector<int64_t> targets;
  for (int c = 0; c < 5; ++c)
    for (int n = 1 + static_cast<int>(uniform(rng) * 40); n > 0; --n) targets.push_back(c);
  std::vector<int64_t> hits_left(6, 0);
  for (int64_t c : targets) ++hits_left[c];
  json correct = json::array(), conf = json::array(), cls = json::array();
  for (int i = 0; i < 400; ++i) {
    const int64_t c = static_cast<int64_t>(uniform(rng) * 6) == 4 ? 5 : static_cast<int64_t>(uniform(rng) * 4);
    const bool hit = uniform(rng) < 0.6 && hits_left[c] > 0;
    hits_left[c] -= hit;
    const double quality = 0.45 + uniform(rng) * 0.55;
    json row = json::array();
    for (int t = 0; t < 10; ++t) row.push_back(hit && quality >= 0.5 + 0.05 * t);
    correct.push_back(row);
    const double score = 0.01 + uniform(rng) * 0.98 + (hit ? 0.2 : 0.0);
    conf.push_back(quantise ? std::round(score * 20) / 20 : score);
    cls.push_back(c);
  }
  return {{"correct", correct}, {"conf", conf}, {"pred_cls", cls}, {"target_cls", targets}};
}

// An independent numpy reading of YOLOv5's ap_per_class semantics.
const char* kNumpyApPerClass = R"PY(
import json
import numpy as np
d = json.load(open(DATA))
hit = np.array(d['correct'], dtype=bool); conf = np.array(d['conf'], dtype=float)
pcls = np.array(d['pred_cls']); tcls = np.array(d['target_cls'])
rank = np.argsort(-conf, kind='stable')
hit, conf, pcls = hit[rank], conf[rank], pcls[rank]
labels, counts = np.unique(tcls, return_counts=True)
grid = np.linspace(0, 1, 1000)
integrate = getattr(np, 'trapezoid', None) or np.trapz
AP = np.zeros((len(labels), hit.shape[1])); P = np.zeros((len(labels), 1000)); R = np.zeros_like(P)
for k, (c, n) in enumerate(zip(labels, counts)):
    mine = pcls == c
    if not mine.any():
        continue
    h = hit[mine].astype(float)
    tps, fps = np.cumsum(h, axis=0), np.cumsum(1.0 - h, axis=0)
    rec, prec = tps / n, tps / (tps + fps)
    R[k] = np.interp(-grid, -conf[mine], rec[:, 0], left=0.0)
    P[k] = np.interp(-grid, -conf[mine], prec[:, 0], left=1.0)
    for j in range(h.shape[1]):
        r = np.concatenate([[0.0], rec[:, j], [1.0]])
        p = np.concatenate([[1.0], prec[:, j], [0.0]])
        p = np.maximum.accumulate(p[::-1])[::-1]
        xs = np.linspace(0, 1, 101)
        AP[k, j] = integrate(np.interp(xs, r, p), xs)
F = 2 * P * R / (P + R + 1e-16)
mean_f = F.mean(axis=0)
padded = np.concatenate([np.full(50, mean_f[0]), mean_f, np.full(50, mean_f[-1])])
smoothed = np.array([padded[i:i + 101].mean() for i in range(1000)])
best = int(np.argmax(smoothed))
print('RESULT ' + json.dumps({'ap': AP.tolist(), 'p': P[:, best].tolist(), 'r': R[:, best].tolist(),
                              'f1': F[:, best].tolist(), 'conf': float(grid[best]), 'classes': labels.tolist()}))
)PY";

json run_numpy(const char* script, const json& data) {
  test::TempDir dir;
  test::write_file(dir.file("data.json"), data.dump());
  const test::CommandResult r = test::run_python("DATA = '" + dir.file("data.json") + "'\n" + script);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find("RESULT ");
  if (at == std::string::npos) {
    ADD_FAILURE() << r.output;
    return json();
  }
  return json::parse(r.output.substr(at + 7, r.output.find('\n', at) - at - 7));
}

at::Tensor tensor_of(const json& values, at::ScalarType type) {
  std::vector<double> flat;
  auto number = [](const json& x) { return x.is_boolean() ? static_cast<double>(x.get<bool>()) : x.get<double>(); };
  for (const auto& v : values) {
    if (v.is_array())
      for (const auto& x : v) flat.push_back(number(x));
    else
      flat.push_back(number(v));
  }
  at::Tensor t = at::tensor(flat, at::kDouble).to(type);
  return values.size() && values[0].is_array() ? t.view({static_cast<int64_t>(values.size()), -1}) : t;
}

TEST(ApMetrics, ApPerClassMatchesNumpy) {
  for (bool quantise : {false, true}) {
    const json data = random_set(quantise ? 11 : 5, quantise);
    const json expected = run_numpy(kNumpyApPerClass, data);
    ASSERT_TRUE(expected.is_object());
    const ApPerClass r = ap_per_class(tensor_of(data["correct"], at::kBool), tensor_of(data["conf"], at::kDouble),
                                      tensor_of(data["pred_cls"], at::kLong), tensor_of(data["target_cls"], at::kLong));
    ASSERT_EQ(r.classes.numel(), static_cast<int64_t>(expected["classes"].size()));
    EXPECT_NEAR(r.best_confidence, expected["conf"].get<double>(), 1e-12);
    for (int64_t k = 0; k < r.classes.numel(); ++k) {
      for (int t = 0; t < 10; ++t) EXPECT_NEAR(r.ap[k][t].item<double>(), expected["ap"][k][t].get<double>(), 1e-9);
      EXPECT_NEAR(r.precision[k].item<double>(), expected["p"][k].get<double>(), 1e-9);
      EXPECT_NEAR(r.recall[k].item<double>(), expected["r"][k].get<double>(), 1e-9);
      EXPECT_NEAR(r.f1[k].item<double>(), expected["f1"][k].get<double>(), 1e-9);
    }
    EXPECT_GT(r.map50, 0.1);  // a meaningful, not degenerate, case
    EXPECT_LT(r.map50, 0.9);
  }
}

// An independent loop-by-loop reading of val.py v7.0's process_batch rule.
const char* kNumpyMatch = R"PY(
import json
import numpy as np
d = json.load(open(DATA))
pb, pc = np.array(d['pred_boxes']).reshape(-1, 4), np.array(d['pred_cls'])
gb, gc = np.array(d['gt_boxes']).reshape(-1, 4), np.array(d['gt_cls'])
ths = np.array(d['thresholds'])
def iou(g, p):
    w = max(0.0, min(g[2], p[2]) - max(g[0], p[0])); h = max(0.0, min(g[3], p[3]) - max(g[1], p[1]))
    inter = w * h
    return inter / ((g[2] - g[0]) * (g[3] - g[1]) + (p[2] - p[0]) * (p[3] - p[1]) - inter + 1e-7)
out = np.zeros((len(pb), len(ths)), dtype=bool)
for t, th in enumerate(ths):
    best_gt = {}
    for i in range(len(pb)):
        scores = [(iou(gb[j], pb[i]), -j) for j in range(len(gb)) if gc[j] == pc[i] and iou(gb[j], pb[i]) >= th]
        if scores:
            best_gt[i] = -max(scores)[1]
    owner = {}
    for i in sorted(best_gt):
        owner.setdefault(best_gt[i], i)
    for j, i in owner.items():
        out[i, t] = True
print('RESULT ' + json.dumps(out.tolist()))
)PY";

TEST(ApMetrics, MatchPredictionsMatchesNumpy) {
  std::mt19937 rng(3);
  std::vector<double> gt_boxes, pred_boxes;
  std::vector<int64_t> gt_cls, pred_cls;
  for (int j = 0; j < 30; ++j) {
    const double x = uniform(rng) * 200, y = uniform(rng) * 200, w = 5 + uniform(rng) * 40, h = 5 + uniform(rng) * 40;
    gt_boxes.insert(gt_boxes.end(), {x, y, x + w, y + h});
    gt_cls.push_back(static_cast<int64_t>(uniform(rng) * 3));
  }
  for (int i = 0; i < 120; ++i) {  // jittered copies of gts, some with another class
    const int j = static_cast<int>(uniform(rng) * 30);
    for (int k = 0; k < 4; ++k) pred_boxes.push_back(gt_boxes[4 * j + k] + (uniform(rng) - 0.5) * 12);
    pred_cls.push_back(uniform(rng) < 0.85 ? gt_cls[j] : static_cast<int64_t>(uniform(rng) * 3));
  }
  const at::Tensor thresholds = at::linspace(0.5, 0.95, 10, at::kDouble);
  const json data = {{"pred_boxes", pred_boxes}, {"pred_cls", pred_cls}, {"gt_boxes", gt_boxes},
                     {"gt_cls", gt_cls}, {"thresholds", std::vector<double>(thresholds.data_ptr<double>(),
                                                                             thresholds.data_ptr<double>() + 10)}};
  const json expected = run_numpy(kNumpyMatch, data);
  const at::Tensor correct =
      match_predictions(at::tensor(pred_boxes, at::kDouble).view({-1, 4}), at::tensor(pred_cls, at::kLong),
                        at::tensor(gt_boxes, at::kDouble).view({-1, 4}), at::tensor(gt_cls, at::kLong), thresholds);
  int64_t matched = 0;
  for (int64_t i = 0; i < correct.size(0); ++i)
    for (int t = 0; t < 10; ++t) {
      EXPECT_EQ(correct[i][t].item<bool>(), expected[i][t].get<bool>()) << i << "," << t;
      matched += correct[i][t].item<bool>();
    }
  EXPECT_GT(matched, 100);  // the case exercises matching at most thresholds
}

}  // namespace
}  // namespace kestrel::eval
