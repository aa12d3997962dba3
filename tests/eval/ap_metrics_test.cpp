// YOLOv5 val.py and YOLOv7 test.py metrics: matching and AP on cases derived by hand, a cross-check of
// ap_per_class and both matching rules against independent numpy implementations run by the project's
// Python, and (with an upstream YOLOv7 checkout) the whole YOLOv7 metric against its test.py.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "kestrel/core/error.h"
#include "kestrel/eval/ap_metrics.h"
#include "kestrel/eval/nms.h"
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

TEST(ApMetrics, MatchGivesAnIouTieToTheLaterGt) {
  // Boxes 10 high: gA x 0..10, gB x 2..12; p0 x 1..11 overlaps each by 90 of a union of 110 (IoU 0.818, the
  // same float: the geometry is symmetric); p1 = gA (IoU 1 with gA, 80/120 with gB), less confident.
  // val.py's matches[matches[:, 2].argsort()[::-1]] puts the later pair of a tie first: p0 keeps gB, and
  // gA goes to p1, so both are correct up to 0.80; p1 alone above. (gA to p0 would leave p1 unmatched
  // up to 0.80.)
  const at::Tensor correct = match_predictions(boxes({1, 0, 11, 10, 0, 0, 10, 10}), classes({0, 0}),
                                               boxes({0, 0, 10, 10, 2, 0, 12, 10}), classes({0, 0}),
                                               default_iou_thresholds());
  const std::vector<bool> up_to_080 = {true, true, true, true, true, true, true, false, false, false};
  EXPECT_EQ(rows_of(correct), (std::vector<std::vector<bool>>{up_to_080, std::vector<bool>(10, true)}));
}

TEST(ApMetrics, MatchWithNothingToMatch) {
  const at::Tensor t = default_iou_thresholds();
  EXPECT_EQ(match_predictions(boxes({}), classes({}), boxes({0, 0, 1, 1}), classes({0}), t).sizes(),
            at::IntArrayRef({0, 10}));
  EXPECT_FALSE(match_predictions(boxes({0, 0, 1, 1}), classes({0}), boxes({}), classes({}), t).any().item<bool>());
  EXPECT_THROW(match_predictions(boxes({0, 0, 1, 1}), classes({0, 1}), boxes({}), classes({}), t), Error);
}

TEST(ApMetrics, Yolov7MatchClaimsOnceForAllThresholds) {
  // g0 (class 0) x 0..10, g1 (class 1) x 20..30, all boxes 10 high. Predictions in confidence order:
  //   p0 class 0, x 0..5: IoU(g0) = 50/100 = 0.5 exactly (YOLOv7's box_iou has no epsilon), not > 0.5;
  //   p1 class 0, x 0..6.2: IoU 0.62, claims g0: correct at 0.50, 0.55, 0.60;
  //   p2 class 0, x 0..9.6: IoU 0.96 with g0, already claimed: wrong at every threshold;
  //   p3 class 1, on g0: its own class's best gt is g1, IoU 0: wrong;
  //   p4 class 1, on g1: IoU 1, correct everywhere.
  const at::Tensor pred = boxes({0, 0, 5, 10, 0, 0, 6.2, 10, 0, 0, 9.6, 10, 0, 0, 10, 10, 20, 0, 30, 10});
  const at::Tensor pred_cls = classes({0, 0, 0, 1, 1});
  const at::Tensor gt = boxes({0, 0, 10, 10, 20, 0, 30, 10});
  const at::Tensor gt_cls = classes({0, 1});
  const std::vector<bool> none(10, false), all(10, true);
  const std::vector<bool> first3 = {true, true, true, false, false, false, false, false, false, false};
  EXPECT_EQ(rows_of(match_predictions_yolov7(pred, pred_cls, gt, gt_cls, default_iou_thresholds())),
            (std::vector<std::vector<bool>>{none, first3, none, none, all}));
  // val.py matches per threshold with IoU >= t, and its 1e-7 vanishes against 100 in float32: at 0.50 g0
  // goes to p0 (IoU 0.5), at 0.55 and 0.60 to p1, and from 0.65 up, where p1 is no candidate, to p2
  // (0.96 >= 0.95).
  std::vector<bool> at_050(10, false), from_055_to_060(10, false), from_065(10, true);
  at_050[0] = from_055_to_060[1] = from_055_to_060[2] = true;
  std::fill(from_065.begin(), from_065.begin() + 3, false);
  EXPECT_EQ(rows_of(match_predictions(pred, pred_cls, gt, gt_cls, default_iou_thresholds())),
            (std::vector<std::vector<bool>>{at_050, from_055_to_060, from_065, none, all}));
  EXPECT_EQ(match_predictions_yolov7(boxes({}), classes({}), gt, gt_cls, default_iou_thresholds()).sizes(),
            at::IntArrayRef({0, 10}));
  EXPECT_FALSE(match_predictions_yolov7(pred, pred_cls, boxes({}), classes({}), default_iou_thresholds()).any().item<bool>());
}

TEST(ApMetrics, Yolov3MatchesOnceAtTheFirstThreshold) {
  // The case above under ultralytics/yolov3 v9.6.0's rule: at 0.5 (IoU >= 0.5, no epsilon) each of p0..p2
  // keeps g0, which goes to p0, the first; p0 is then correct where its IoU 0.5 reaches the threshold (0.50
  // only), and p1 (0.62) and p2 (0.96) stay wrong everywhere. p4 on g1 is correct everywhere.
  const at::Tensor pred = boxes({0, 0, 5, 10, 0, 0, 6.2, 10, 0, 0, 9.6, 10, 0, 0, 10, 10, 20, 0, 30, 10});
  const at::Tensor pred_cls = classes({0, 0, 0, 1, 1});
  const at::Tensor gt = boxes({0, 0, 10, 10, 20, 0, 30, 10});
  const at::Tensor gt_cls = classes({0, 1});
  const std::vector<bool> none(10, false), all(10, true);
  std::vector<bool> at_050(10, false);
  at_050[0] = true;
  EXPECT_EQ(rows_of(match_predictions_yolov3(pred, pred_cls, gt, gt_cls, default_iou_thresholds())),
            (std::vector<std::vector<bool>>{at_050, none, none, none, all}));
  // Without p0, g0 goes to p1 and its IoU 0.62 counts at 0.50, 0.55 and 0.60; p2 (0.96) still loses it.
  const std::vector<bool> first3 = {true, true, true, false, false, false, false, false, false, false};
  EXPECT_EQ(rows_of(match_predictions_yolov3(pred.slice(0, 1), pred_cls.slice(0, 1), gt, gt_cls, default_iou_thresholds())),
            (std::vector<std::vector<bool>>{first3, none, none, all}));
  EXPECT_EQ(match_predictions_yolov3(boxes({}), classes({}), gt, gt_cls, default_iou_thresholds()).sizes(),
            at::IntArrayRef({0, 10}));
  EXPECT_FALSE(match_predictions_yolov3(pred, pred_cls, boxes({}), classes({}), default_iou_thresholds()).any().item<bool>());
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

// YOLOv7's recall sentinel. 2 targets; predictions at conf 0.9 (TP) and 0.8 (FP): recall 1/2, 1/2,
// precision 1, 1/2; envelope 1 below recall 1/2 and 1/2 at it.
//   YOLOv7 (sentinel 1/2 + 0.01 with precision 0): 49 * 0.01 * 1 + 0.01 * (1 + 1/2) / 2 + 0.01 * (1/2) / 2 = 0.5.
//   YOLOv5 (sentinel 1): the same up to 1/2, then a straight line from 1/2 down to 0 at recall 1,
//   0.49 + 0.0075 + 0.5 * 0.5 / 2 = 0.6225. --v5-metric's YOLOv7 AP is YOLOv5's.
// A perfect detector scores 1.0 with YOLOv7's sentinel (recall 1 + 0.01) and 0.995 with YOLOv5's.
TEST(ApMetrics, Yolov7RecallSentinelByHand) {
  const auto ap50 = [](MetricStyle style, std::vector<bool> hits, std::vector<double> conf, int targets) {
    const ApPerClass r = ap_per_class(all_thresholds(hits), at::tensor(conf), at::zeros({static_cast<int64_t>(conf.size())}),
                                      at::zeros({targets}), style);
    return r.map50;
  };
  EXPECT_NEAR(ap50(MetricStyle::yolov7, {true, false}, {0.9, 0.8}, 2), 0.5, 1e-12);
  EXPECT_NEAR(ap50(MetricStyle::yolov5, {true, false}, {0.9, 0.8}, 2), 0.6225, 1e-12);
  EXPECT_NEAR(ap50(MetricStyle::yolov7_v5_metric, {true, false}, {0.9, 0.8}, 2), 0.6225, 1e-12);
  EXPECT_NEAR(ap50(MetricStyle::yolov7, {true, true}, {0.9, 0.8}, 2), 1.0, 1e-12);
  EXPECT_NEAR(ap50(MetricStyle::yolov5, {true, true}, {0.9, 0.8}, 2), 0.995, 1e-12);
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

// An independent numpy reading of YOLOv5's ap_per_class semantics, and of YOLOv7's with V7_SENTINEL
// (recall sentinel = last recall + 0.01) and SMOOTH False (P, R at the raw mean F1's first maximum).
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
        r = np.concatenate([[0.0], rec[:, j], [rec[-1, j] + 0.01 if V7_SENTINEL else 1.0]])
        p = np.concatenate([[1.0], prec[:, j], [0.0]])
        p = np.maximum.accumulate(p[::-1])[::-1]
        xs = np.linspace(0, 1, 101)
        AP[k, j] = integrate(np.interp(xs, r, p), xs)
F = 2 * P * R / (P + R + 1e-16)
mean_f = F.mean(axis=0)
padded = np.concatenate([np.full(50, mean_f[0]), mean_f, np.full(50, mean_f[-1])])
smoothed = np.array([padded[i:i + 101].mean() for i in range(1000)])
best = int(np.argmax(smoothed if SMOOTH else mean_f))
print('RESULT ' + json.dumps({'ap': AP.tolist(), 'map50': float(AP[:, 0].mean()), 'map': float(AP.mean(1).mean()),
                              'p': P[:, best].tolist(), 'r': R[:, best].tolist(),
                              'f1': F[:, best].tolist(), 'conf': float(grid[best]), 'classes': labels.tolist()}))
)PY";

json run_numpy(const char* script, const json& data, const std::string& settings = "") {
  test::TempDir dir;
  test::write_file(dir.file("data.json"), data.dump());
  const test::CommandResult r = test::run_python("DATA = '" + dir.file("data.json") + "'\n" + settings + script);
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

struct StyleSettings {
  MetricStyle style;
  const char* python;
};
const StyleSettings kStyles[] = {{MetricStyle::yolov5, "V7_SENTINEL = False\nSMOOTH = True\n"},
                                 {MetricStyle::yolov7, "V7_SENTINEL = True\nSMOOTH = False\n"},
                                 {MetricStyle::yolov7_v5_metric, "V7_SENTINEL = False\nSMOOTH = False\n"},
                                 {MetricStyle::yolov3, "V7_SENTINEL = False\nSMOOTH = False\n"}};

TEST(ApMetrics, ApPerClassMatchesNumpy) {
  for (const StyleSettings& setting : kStyles) {
    for (bool quantise : {false, true}) {
      SCOPED_TRACE(setting.python);
      const json data = random_set(quantise ? 11 : 5, quantise);
      const json expected = run_numpy(kNumpyApPerClass, data, setting.python);
      ASSERT_TRUE(expected.is_object());
      const ApPerClass r = ap_per_class(tensor_of(data["correct"], at::kBool), tensor_of(data["conf"], at::kDouble),
                                        tensor_of(data["pred_cls"], at::kLong), tensor_of(data["target_cls"], at::kLong),
                                        setting.style);
      ASSERT_EQ(r.classes.numel(), static_cast<int64_t>(expected["classes"].size()));
      EXPECT_NEAR(r.best_confidence, expected["conf"].get<double>(), 1e-12);
      for (int64_t k = 0; k < r.classes.numel(); ++k) {
        // AP to the last bit: numpy's interp and trapz, summation order included
        for (int t = 0; t < 10; ++t) EXPECT_EQ(r.ap[k][t].item<double>(), expected["ap"][k][t].get<double>()) << k << " " << t;
        EXPECT_NEAR(r.precision[k].item<double>(), expected["p"][k].get<double>(), 1e-9);
        EXPECT_NEAR(r.recall[k].item<double>(), expected["r"][k].get<double>(), 1e-9);
        EXPECT_NEAR(r.f1[k].item<double>(), expected["f1"][k].get<double>(), 1e-9);
      }
      EXPECT_EQ(r.map50, expected["map50"].get<double>());  // val.py's means, numpy's order
      EXPECT_EQ(r.map, expected["map"].get<double>());
      EXPECT_GT(r.map50, 0.1);  // a meaningful, not degenerate, case
      EXPECT_LT(r.map50, 0.9);
    }
  }
}

// The matching readings' inputs (DATA: a random_match_case) and their box IoU, with EPS in the union.
const char* kNumpyMatchInputs = R"PY(
import json
import numpy as np
d = json.load(open(DATA))
pb, pc = np.array(d['pred_boxes']).reshape(-1, 4), np.array(d['pred_cls'])
gb, gc = np.array(d['gt_boxes']).reshape(-1, 4), np.array(d['gt_cls'])
ths = np.array(d['thresholds'])
def iou(g, p):
    w = max(0.0, min(g[2], p[2]) - max(g[0], p[0])); h = max(0.0, min(g[3], p[3]) - max(g[1], p[1]))
    inter = w * h
    return inter / ((g[2] - g[0]) * (g[3] - g[1]) + (p[2] - p[0]) * (p[3] - p[1]) - inter + EPS)
out = np.zeros((len(pb), len(ths)), dtype=bool)
)PY";

// An independent loop-by-loop reading of val.py v7.0's process_batch rule (EPS 1e-7).
const char* kNumpyMatch = R"PY(
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

// 30 gts in 3 classes and 120 predictions, jittered copies of them (some with another class), as the
// numpy readings' input and as tensors (double).
struct MatchCase {
  json data;
  at::Tensor pred_boxes, pred_cls, gt_boxes, gt_cls, thresholds;
};

MatchCase random_match_case(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<double> gt_boxes, pred_boxes;
  std::vector<int64_t> gt_cls, pred_cls;
  for (int j = 0; j < 30; ++j) {
    const double x = uniform(rng) * 200, y = uniform(rng) * 200, w = 5 + uniform(rng) * 40, h = 5 + uniform(rng) * 40;
    gt_boxes.insert(gt_boxes.end(), {x, y, x + w, y + h});
    gt_cls.push_back(static_cast<int64_t>(uniform(rng) * 3));
  }
  for (int i = 0; i < 120; ++i) {
    const int j = static_cast<int>(uniform(rng) * 30);
    for (int k = 0; k < 4; ++k) pred_boxes.push_back(gt_boxes[4 * j + k] + (uniform(rng) - 0.5) * 12);
    pred_cls.push_back(uniform(rng) < 0.85 ? gt_cls[j] : static_cast<int64_t>(uniform(rng) * 3));
  }
  MatchCase c;
  c.thresholds = at::linspace(0.5, 0.95, 10, at::kDouble);
  c.data = {{"pred_boxes", pred_boxes}, {"pred_cls", pred_cls}, {"gt_boxes", gt_boxes}, {"gt_cls", gt_cls},
            {"thresholds", std::vector<double>(c.thresholds.data_ptr<double>(), c.thresholds.data_ptr<double>() + 10)}};
  c.pred_boxes = at::tensor(pred_boxes, at::kDouble).view({-1, 4});
  c.pred_cls = at::tensor(pred_cls, at::kLong);
  c.gt_boxes = at::tensor(gt_boxes, at::kDouble).view({-1, 4});
  c.gt_cls = at::tensor(gt_cls, at::kLong);
  return c;
}

TEST(ApMetrics, MatchPredictionsMatchesNumpy) {
  const MatchCase c = random_match_case(3);
  const json expected = run_numpy(kNumpyMatch, c.data, std::string("EPS = 1e-7\n") + kNumpyMatchInputs);
  const at::Tensor correct = match_predictions(c.pred_boxes, c.pred_cls, c.gt_boxes, c.gt_cls, c.thresholds);
  int64_t matched = 0;
  for (int64_t i = 0; i < correct.size(0); ++i)
    for (int t = 0; t < 10; ++t) {
      EXPECT_EQ(correct[i][t].item<bool>(), expected[i][t].get<bool>()) << i << "," << t;
      matched += correct[i][t].item<bool>();
    }
  EXPECT_GT(matched, 100);  // the case exercises matching at most thresholds
}


// The operating point of YOLOv7's metric is the raw mean F1's first maximum (YOLOv5's: the smoothed one's),
// an invariant of the returned curves; and on this set the two differ, so the case tells them apart.
TEST(ApMetrics, Yolov7TakesTheRawF1Peak) {
  const json data = random_set(5, false);
  const auto run = [&](MetricStyle style) {
    return ap_per_class(tensor_of(data["correct"], at::kBool), tensor_of(data["conf"], at::kDouble),
                        tensor_of(data["pred_cls"], at::kLong), tensor_of(data["target_cls"], at::kLong), style);
  };
  const ApPerClass v7 = run(MetricStyle::yolov7), v5 = run(MetricStyle::yolov5);
  const at::Tensor mean_f1 = v7.f1_curve.mean(0);
  const int64_t peak = mean_f1.argmax().item<int64_t>();
  EXPECT_EQ(v7.best_confidence, v7.px[peak].item<double>());
  EXPECT_NEAR(v7.f1.mean().item<double>(), mean_f1.max().item<double>(), 1e-12);
  EXPECT_NE(v5.best_confidence, v7.best_confidence);
  EXPECT_LT(v5.f1.mean().item<double>(), v7.f1.mean().item<double>());
}

// An independent loop-by-loop reading of YOLOv7 test.py's rule: per prediction in order, its best gt of its
// class (lowest index among equal IoUs, no epsilon: EPS 0), claimed if IoU > the first threshold and still free.
const char* kNumpyMatchYolov7 = R"PY(
claimed = set()
for i in range(len(pb)):
    scores = [(iou(gb[j], pb[i]), -j) for j in range(len(gb)) if gc[j] == pc[i]]
    if not scores:
        continue
    best, j = max(scores)
    if best > ths[0] and -j not in claimed:
        claimed.add(-j)
        out[i] = best > ths
print('RESULT ' + json.dumps(out.tolist()))
)PY";

TEST(ApMetrics, MatchPredictionsYolov7MatchesNumpy) {
  const MatchCase c = random_match_case(4);
  const json expected = run_numpy(kNumpyMatchYolov7, c.data, std::string("EPS = 0.0\n") + kNumpyMatchInputs);
  const at::Tensor correct = match_predictions_yolov7(c.pred_boxes, c.pred_cls, c.gt_boxes, c.gt_cls, c.thresholds);
  const at::Tensor per_threshold = match_predictions(c.pred_boxes, c.pred_cls, c.gt_boxes, c.gt_cls, c.thresholds);
  int64_t matched = 0;
  for (int64_t i = 0; i < correct.size(0); ++i)
    for (int t = 0; t < 10; ++t) {
      EXPECT_EQ(correct[i][t].item<bool>(), expected[i][t].get<bool>()) << i << "," << t;
      matched += correct[i][t].item<bool>();
    }
  EXPECT_GT(matched, 50);  // of at most 30 gts x 10 thresholds: the case exercises matching at most thresholds
  EXPECT_FALSE(correct.equal(per_threshold)) << "the case should tell YOLOv7's rule from val.py's";
}

// An independent loop-by-loop reading of ultralytics/yolov3 v9.6.0 val.py's process_batch: val.py v7.0's
// two steps at the first threshold only (IoU without epsilon: EPS 0), and each matched prediction correct
// wherever its IoU reaches the threshold.
const char* kNumpyMatchYolov3 = R"PY(
best_gt = {}
for i in range(len(pb)):
    scores = [(iou(gb[j], pb[i]), -j) for j in range(len(gb)) if gc[j] == pc[i] and iou(gb[j], pb[i]) >= ths[0]]
    if scores:
        best_gt[i] = -max(scores)[1]
owner = {}
for i in sorted(best_gt):
    owner.setdefault(best_gt[i], i)
for j, i in owner.items():
    out[i] = iou(gb[j], pb[i]) >= ths
print('RESULT ' + json.dumps(out.tolist()))
)PY";

TEST(ApMetrics, MatchPredictionsYolov3MatchesNumpy) {
  const MatchCase c = random_match_case(5);
  const json expected = run_numpy(kNumpyMatchYolov3, c.data, std::string("EPS = 0.0\n") + kNumpyMatchInputs);
  const at::Tensor correct = match_predictions_yolov3(c.pred_boxes, c.pred_cls, c.gt_boxes, c.gt_cls, c.thresholds);
  int64_t matched = 0;
  for (int64_t i = 0; i < correct.size(0); ++i)
    for (int t = 0; t < 10; ++t) {
      EXPECT_EQ(correct[i][t].item<bool>(), expected[i][t].get<bool>()) << i << "," << t;
      matched += correct[i][t].item<bool>();
    }
  EXPECT_GT(matched, 50);
  EXPECT_FALSE(correct.equal(match_predictions(c.pred_boxes, c.pred_cls, c.gt_boxes, c.gt_cls, c.thresholds)))
      << "the case should tell v9.6.0's rule from v7.0's";
  // (YOLOv7's rule gives the same here: the two differ only where an IoU equals a threshold, > against >=,
  // as in Yolov3MatchesOnceAtTheFirstThreshold.)
}

// --v3-metric against ultralytics/yolov3 v9.6.0's own functions: val.py's process_batch (taken out of val.py,
// whose imports download a font) and utils/metrics.py's ap_per_class, on six random images in float32.
// Needs KESTREL_UPSTREAM_PYTHON (numpy, torch, matplotlib) and KESTREL_YOLOV3_DIR (a v9.6.0 checkout).
TEST(ApMetrics, Yolov3StyleMatchesUpstreamValPy) {
  const char* python = std::getenv("KESTREL_UPSTREAM_PYTHON");
  const char* checkout = std::getenv("KESTREL_YOLOV3_DIR");
  if (!python || !checkout) GTEST_SKIP() << "set KESTREL_UPSTREAM_PYTHON and KESTREL_YOLOV3_DIR to compare with upstream";
  std::mt19937 rng(33);
  json images = json::array();
  std::vector<at::Tensor> correct, conf, pred_cls, target_cls;
  for (uint32_t seed = 40; seed < 46; ++seed) {
    MatchCase c = random_match_case(seed);
    std::vector<double> confidence(static_cast<size_t>(c.pred_cls.size(0)));
    for (double& v : confidence) v = uniform(rng);
    c.data["conf"] = confidence;
    images.push_back(c.data);
    const at::Tensor pred_boxes = c.pred_boxes.to(at::kFloat), gt_boxes = c.gt_boxes.to(at::kFloat);
    correct.push_back(match_predictions_yolov3(pred_boxes, c.pred_cls, gt_boxes, c.gt_cls, default_iou_thresholds()));
    conf.push_back(at::tensor(confidence, at::kDouble).to(at::kFloat));
    pred_cls.push_back(c.pred_cls);
    target_cls.push_back(c.gt_cls);
  }
  test::TempDir dir;
  test::write_file(dir.file("images.json"), images.dump());
  test::write_file(dir.file("run.py"), "import ast, sys, json, numpy as np, torch\nsys.path.insert(0, '" + std::string(checkout) + "')\n" +
      "if not hasattr(np, 'trapz'): np.trapz = np.trapezoid  # numpy 2 removed the name v9.6.0 uses\n"
      "from utils.metrics import ap_per_class, box_iou\n"
      "tree = ast.parse(open('" + std::string(checkout) + "/val.py').read())\n"
      "fn = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == 'process_batch']\n"
      "ns = {'torch': torch, 'np': np, 'box_iou': box_iou}\n"
      "exec(compile(ast.Module(fn, []), 'val.py', 'exec'), ns)\n"
      "iouv = torch.linspace(0.5, 0.95, 10)\n"
      "stats, out = [], []\n"
      "for d in json.load(open('" + dir.file("images.json") + "')):\n"
      "    pb = torch.tensor(d['pred_boxes'], dtype=torch.float32).view(-1, 4); gb = torch.tensor(d['gt_boxes'], dtype=torch.float32).view(-1, 4)\n"
      "    pc = torch.tensor(d['pred_cls'], dtype=torch.float32); gc = torch.tensor(d['gt_cls'], dtype=torch.float32)\n"
      "    conf = torch.tensor(d['conf'], dtype=torch.float32)\n"
      "    c = ns['process_batch'](torch.cat([pb, conf[:, None], pc[:, None]], 1), torch.cat([gc[:, None], gb], 1), iouv)\n"
      "    out.append(c.tolist()); stats.append((c, conf, pc, gc.tolist()))\n"
      "stats = [np.concatenate(x, 0) for x in zip(*stats)]\n"
      "p, r, ap, f1, ap_class = ap_per_class(*stats, names={0: 'a', 1: 'b', 2: 'c'})\n"
      "print('RESULT', json.dumps([out, p.mean(), r.mean(), ap[:, 0].mean(), ap.mean(1).mean()]))\n");
  const auto run = test::run_command(std::string(python) + " " + dir.file("run.py") + " 2>&1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const size_t at = run.output.find("RESULT ");
  ASSERT_NE(at, std::string::npos) << run.output;
  const json u = json::parse(run.output.substr(at + 7, run.output.find('\n', at) - at - 7));
  for (size_t image = 0; image < correct.size(); ++image)
    EXPECT_EQ(rows_of(correct[image]), u[0][image].get<std::vector<std::vector<bool>>>()) << "image " << image;
  const ApPerClass r = ap_per_class(at::cat(correct), at::cat(conf), at::cat(pred_cls), at::cat(target_cls), MetricStyle::yolov3);
  EXPECT_NEAR(r.mp, u[1].get<double>(), 1e-9);
  EXPECT_NEAR(r.mr, u[2].get<double>(), 1e-9);
  EXPECT_NEAR(r.map50, u[3].get<double>(), 1e-12);
  EXPECT_NEAR(r.map, u[4].get<double>(), 1e-12);
  EXPECT_GT(r.map50, 0.1);  // not a degenerate case
}

// The whole YOLOv7 metric (NMS at test.py's conf 0.001 / IoU 0.65, matching, AP, P and R) against YOLOv7's
// own test.test(), fed the same raw predictions through a stand-in model and a list of batches (test.py's
// "called from train.py" path), with and without --v5-metric. Needs KESTREL_UPSTREAM_PYTHON (numpy, torch,
// torchvision, opencv, yaml, tqdm, matplotlib, seaborn, pandas, scipy) and KESTREL_YOLOV7_DIR.
TEST(ApMetrics, Yolov7StyleMatchesUpstreamTestPy) {
  const char* python = std::getenv("KESTREL_UPSTREAM_PYTHON");
  const char* checkout = std::getenv("KESTREL_YOLOV7_DIR");
  if (!python || !checkout) GTEST_SKIP() << "set KESTREL_UPSTREAM_PYTHON and KESTREL_YOLOV7_DIR to compare with upstream";
  constexpr int64_t kBatches = 3, kBatch = 4, kCandidates = 300, kClasses = 3, kSize = 320;
  std::mt19937 rng(21);
  // Per image: 0-7 labels; candidates are jittered labels (some with another class's score highest) and
  // noise, with objectness and class scores that make the ranking imperfect.
  at::Tensor raw = at::zeros({kBatches * kBatch, kCandidates, 5 + kClasses});  // cx, cy, w, h (pixels), obj, cls
  std::vector<std::vector<std::vector<double>>> labels(kBatches * kBatch);    // cls, cx, cy, w, h (normalised)
  for (int64_t image = 0; image < kBatches * kBatch; ++image) {
    const int n = static_cast<int>(uniform(rng) * 8);
    for (int k = 0; k < n; ++k) {
      const double w = 0.05 + uniform(rng) * 0.4, h = 0.05 + uniform(rng) * 0.4;
      const double cx = w / 2 + uniform(rng) * (1 - w), cy = h / 2 + uniform(rng) * (1 - h);
      labels[image].push_back({static_cast<double>(static_cast<int>(uniform(rng) * kClasses)), cx, cy, w, h});
    }
    for (int64_t c = 0; c < kCandidates; ++c) {
      const bool near = !labels[image].empty() && uniform(rng) < 0.7;
      std::vector<double> box(4);
      int cls = static_cast<int>(uniform(rng) * kClasses);
      if (near) {
        const auto& l = labels[image][static_cast<size_t>(uniform(rng) * labels[image].size())];
        for (int k = 0; k < 4; ++k) box[k] = l[1 + k] * kSize * (1 + (uniform(rng) - 0.5) * (k < 2 ? 0.2 : 0.5));
        if (uniform(rng) < 0.8) cls = static_cast<int>(l[0]);
      } else {
        box = {uniform(rng) * kSize, uniform(rng) * kSize, 10 + uniform(rng) * 100, 10 + uniform(rng) * 100};
      }
      for (int k = 0; k < 4; ++k) raw[image][c][k] = box[k];
      raw[image][c][4] = uniform(rng) * (near ? 1.0 : 0.5);
      for (int k = 0; k < kClasses; ++k) raw[image][c][5 + k] = uniform(rng) * (k == cls ? 1.0 : 0.3);
    }
  }
  test::TempDir dir;
  json targets = json::array();
  for (int64_t b = 0; b < kBatches; ++b) {
    json rows = json::array();
    for (int64_t i = 0; i < kBatch; ++i)
      for (const auto& l : labels[b * kBatch + i]) rows.push_back({i, l[0], l[1], l[2], l[3], l[4]});
    targets.push_back(rows);
  }
  test::write_file(dir.file("targets.json"), targets.dump());
  {
    const at::Tensor c = raw.contiguous();
    test::write_file(dir.file("raw.bin"), std::string(static_cast<const char*>(c.data_ptr()), c.nbytes()));
  }
  test::write_file(dir.file("run.py"), "import sys, json, numpy as np, torch\nsys.path.insert(0, '" + std::string(checkout) + "')\n" +
      "if not hasattr(np, 'trapz'): np.trapz = np.trapezoid  # numpy 2 removed the name YOLOv7 uses\n"
      "import test as yolov7_test\n"
      "raw = torch.from_numpy(np.fromfile('" + dir.file("raw.bin") + "', np.float32).reshape(" +
      std::to_string(kBatches) + ", " + std::to_string(kBatch) + ", " + std::to_string(kCandidates) + ", " +
      std::to_string(5 + kClasses) + "))\n"
      "targets = json.load(open('" + dir.file("targets.json") + "'))\n"
      "class Stand(torch.nn.Module):\n"
      "    def __init__(self):\n"
      "        super().__init__(); self.p = torch.nn.Parameter(torch.zeros(1)); self.names = ['a', 'b', 'c']; self.k = 0\n"
      "    def forward(self, img, augment=False):\n"
      "        self.k += 1\n"
      "        return raw[self.k - 1].clone(), None\n"
      "S = " + std::to_string(kSize) + "\n"
      "make_batches = lambda: [(torch.zeros(" + std::to_string(kBatch) + ", 3, S, S, dtype=torch.uint8), torch.tensor(t, dtype=torch.float32).view(-1, 6),\n"
      "                         ['%d.jpg' % i for i in range(" + std::to_string(kBatch) + ")], [((S, S), ((1.0, 1.0), (0.0, 0.0)))] * " +
      std::to_string(kBatch) + ") for t in targets]\n"
      "for v5 in (False, True):  # fresh batches each time: test.py scales the targets in place\n"
      "    m = Stand()\n"
      "    (mp, mr, map50, map_, *_), maps, _ = yolov7_test.test({'nc': 3, 'val': '" + dir.path() + "'}, batch_size=" +
      std::to_string(kBatch) + ", imgsz=S, conf_thres=0.001, iou_thres=0.65, model=m, dataloader=make_batches(), plots=False, v5_metric=v5)\n"
      "    print('RESULT', json.dumps([mp, mr, map50, map_, maps.tolist()]))\n");
  const auto run = test::run_command(std::string(python) + " " + dir.file("run.py") + " 2>&1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::vector<json> upstream;
  for (size_t at = run.output.find("RESULT "); at != std::string::npos; at = run.output.find("RESULT ", at + 1))
    upstream.push_back(json::parse(run.output.substr(at + 7, run.output.find('\n', at) - at - 7)));
  ASSERT_EQ(upstream.size(), 2u) << run.output;

  NmsOptions nms;
  nms.conf_thres = 0.001;
  nms.iou_thres = 0.65;
  nms.multi_label = true;
  nms.yolov7 = true;  // YOLOv7's NMS
  const std::vector<at::Tensor> kept = non_max_suppression(raw, nms);
  for (int v5 = 0; v5 < 2; ++v5) {
    std::vector<at::Tensor> correct, conf, pred_cls, target_cls;
    for (size_t image = 0; image < kept.size(); ++image) {
      at::Tensor gt = at::zeros({static_cast<int64_t>(labels[image].size()), 4});
      at::Tensor gt_cls = at::zeros({gt.size(0)});
      for (int64_t k = 0; k < gt.size(0); ++k) {
        const auto& l = labels[image][static_cast<size_t>(k)];
        gt_cls[k] = l[0];
        for (int e = 0; e < 4; ++e) gt[k][e] = (l[1 + e % 2] + (e < 2 ? -0.5 : 0.5) * l[3 + e % 2]) * kSize;
      }
      const at::Tensor pred = kept[image];
      if (pred.size(0) == 0 && gt.size(0) == 0) continue;  // test.py: nothing to count
      const at::Tensor pred_boxes = pred.slice(1, 0, 4).clamp(0, kSize);  // scale_coords clips to the image
      correct.push_back(match_predictions_yolov7(pred_boxes, pred.select(1, 5), gt.clamp(0, kSize), gt_cls,
                                                 default_iou_thresholds()));
      conf.push_back(pred.select(1, 4));
      pred_cls.push_back(pred.select(1, 5));
      target_cls.push_back(gt_cls);
    }
    const ApPerClass r = ap_per_class(at::cat(correct), at::cat(conf), at::cat(pred_cls), at::cat(target_cls),
                                      v5 ? MetricStyle::yolov7_v5_metric : MetricStyle::yolov7);
    const json& u = upstream[static_cast<size_t>(v5)];
    SCOPED_TRACE(v5 ? "--v5-metric" : "default");
    EXPECT_NEAR(r.mp, u[0].get<double>(), 1e-6);
    EXPECT_NEAR(r.mr, u[1].get<double>(), 1e-6);
    EXPECT_NEAR(r.map50, u[2].get<double>(), 1e-6);
    EXPECT_NEAR(r.map, u[3].get<double>(), 1e-6);
    for (int64_t c = 0; c < kClasses; ++c) EXPECT_NEAR(r.ap[c].mean().item<double>(), u[4][c].get<double>(), 1e-6) << c;
    EXPECT_GT(r.map50, 0.05);  // not a degenerate case
  }
}

}  // namespace
}  // namespace kestrel::eval
