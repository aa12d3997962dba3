// Validation charts: confusion-matrix counting on cases worked out by hand, the curves ap_per_class now
// returns, and that every chart is a decodable PNG of upstream's size with clear errors for bad paths.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include <ATen/ATen.h>

#include "kestrel/core/error.h"
#include "kestrel/data/image_io.h"
#include "kestrel/eval/ap_metrics.h"
#include "kestrel/eval/plots.h"
#include "test_support.h"

namespace kestrel::eval {
namespace {

at::Tensor rows(std::vector<double> values, int64_t width) { return at::tensor(values, at::kDouble).view({-1, width}); }


// nc = 2. Ground truth: A (class 0) [0,0,10,10], B (class 1) [20,0,30,10], C (class 1) [50,50,60,60].
//   d0 class 0 conf 0.9 on A (IoU 1)          -> A matched by class 0: [0][0]
//   d1 class 0 conf 0.8 on B (IoU 1)          -> B matched, wrong class:  [0][1]
//   d2 class 1 conf 0.7 on nothing            -> predicted background:   [1][2]
//   d3 class 1 conf 0.2 on A                  -> under conf 0.25, ignored
//   d4 class 0 conf 0.6 on A (IoU 0.9), loses A to d0 -> predicted background: [0][2]
//   C unmatched                               -> true background:        [2][1]
TEST(ConfusionMatrix, CountsAHandMadeImage) {
  ConfusionMatrix cm(2);
  const at::Tensor detections = rows({0, 0, 10, 10, 0.9, 0,  20, 0, 30, 10, 0.8, 0,  100, 100, 110, 110, 0.7, 1,
                                      0, 0, 10, 10, 0.2, 1,  1, 0, 10, 10, 0.6, 0}, 6);
  const at::Tensor labels = rows({0, 0, 0, 10, 10,  1, 20, 0, 30, 10,  1, 50, 50, 60, 60}, 5);
  cm.process_batch(detections, labels);
  const std::vector<std::vector<int64_t>> expected = {{1, 1, 1}, {0, 0, 1}, {0, 1, 0}};
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(cm.count(r, c), expected[r][c]) << "predicted " << r << " true " << c;
  EXPECT_EQ(cm.matrix().sizes(), (at::IntArrayRef{3, 3}));
  EXPECT_EQ(cm.matrix().sum().item<int64_t>(), 5);
}

TEST(ConfusionMatrix, UpstreamEdgeCases) {
  ConfusionMatrix cm(2);
  // No detections (val.py's detections=None): every label is a missed one.
  cm.process_batch(at::Tensor(), rows({0, 0, 0, 10, 10, 1, 0, 0, 5, 5}, 5));
  EXPECT_EQ(cm.count(2, 0), 1);
  EXPECT_EQ(cm.count(2, 1), 1);
  // Detections that match nothing: the label is missed, and (v7.0's `if n:`) the detection is not counted.
  cm.process_batch(rows({50, 50, 60, 60, 0.9, 1}, 6), rows({1, 0, 0, 10, 10}, 5));
  EXPECT_EQ(cm.count(2, 1), 2);
  EXPECT_EQ(cm.count(1, 2), 0);
  // IoU at the threshold does not match: [0,0,10,10] vs [0,0,4.5,10] is 0.45 (a hair under with the 1e-7).
  ConfusionMatrix strict(1, 0.25, 0.45);
  strict.process_batch(rows({0, 0, 4.5, 10, 0.9, 0}, 6), rows({0, 0, 0, 10, 10}, 5));
  EXPECT_EQ(strict.count(1, 0), 1);
  EXPECT_EQ(strict.count(0, 0), 0);
  // One detection overlapping two labels goes to the higher IoU; the other label is missed.
  ConfusionMatrix two(1);
  two.process_batch(rows({0, 0, 10, 10, 0.9, 0}, 6), rows({0, 0, 0, 10, 9, 0, 0, 0, 10, 10}, 5));
  EXPECT_EQ(two.count(0, 0), 1);
  EXPECT_EQ(two.count(1, 0), 1);
  EXPECT_NE(test::error_message([&] { two.process_batch(at::Tensor(), rows({3, 0, 0, 1, 1}, 5)); }).find("class 3"), std::string::npos);
}

// Equal IoUs (val's multi-label NMS gives one box per class above the threshold): upstream's
// argsort()[::-1] puts the later candidate first. Label class 0; d0 class 0 conf 0.6 and d1 class 2 conf 0.4
// on the same box: candidates (gt 0, d0), (gt 0, d1) -> reversed: d1 first -> per detection: d0, d1 ->
// reversed again: d1 first -> the label goes to d1 (class 2), d0 is a background false positive.
// (Upstream v7.0's ConfusionMatrix gives the same: M[2, 0] = 1, M[0, 3] = 1.)
TEST(ConfusionMatrix, EqualIousGoToTheLaterCandidateAsUpstream) {
  ConfusionMatrix cm(3);
  cm.process_batch(rows({12, 12, 108, 112, 0.6, 0, 12, 12, 108, 112, 0.4, 2}, 6), rows({0, 10, 10, 110, 110}, 5));
  EXPECT_EQ(cm.count(2, 0), 1);
  EXPECT_EQ(cm.count(0, 3), 1);
  EXPECT_EQ(cm.count(0, 0), 0);
  EXPECT_EQ(cm.matrix().sum().item<int64_t>(), 2);
}

// One class, one target, one correct prediction at confidence 0.9: P = 1 everywhere (left of the first
// prediction upstream's interp gives 1), R = 1 up to 0.9 and 0 above, the PR envelope 1 up to recall 1.
TEST(ApMetrics, CurvesForASingleCorrectPrediction) {
  const ApPerClass m = ap_per_class(at::ones({1, 10}, at::kBool), at::tensor({0.9}), at::tensor({0.0}), at::tensor({0.0}));
  ASSERT_TRUE(m.px.defined());
  EXPECT_EQ(m.px.size(0), 1000);
  EXPECT_EQ(m.precision_curve.sizes(), (at::IntArrayRef{1, 1000}));
  EXPECT_EQ(m.pr_curve.sizes(), (at::IntArrayRef{1, 1000}));
  const auto p = m.precision_curve[0], r = m.recall_curve[0], f1 = m.f1_curve[0], pr = m.pr_curve[0];
  EXPECT_DOUBLE_EQ(p[0].item<double>(), 1.0);
  EXPECT_DOUBLE_EQ(p[999].item<double>(), 1.0);
  EXPECT_DOUBLE_EQ(r[899].item<double>(), 1.0);  // px[899] = 0.8999 <= 0.9
  EXPECT_DOUBLE_EQ(r[900].item<double>(), 0.0);  // px[900] = 0.9009 > 0.9
  EXPECT_NEAR(f1[0].item<double>(), 1.0, 1e-12);
  EXPECT_NEAR(f1[999].item<double>(), 0.0, 1e-12);
  EXPECT_DOUBLE_EQ(pr[500].item<double>(), 1.0);
  EXPECT_DOUBLE_EQ(pr[999].item<double>(), 0.0);  // the recall-1 sentinel with precision 0
  // Nothing correct: curves are still there, all zero.
  const ApPerClass none = ap_per_class(at::zeros({1, 10}, at::kBool), at::tensor({0.9}), at::tensor({0.0}), at::tensor({0.0, 1.0}));
  EXPECT_EQ(none.f1_curve.sizes(), (at::IntArrayRef{2, 1000}));
  EXPECT_EQ(none.pr_curve.abs().sum().item<double>(), 0.0);
}

void expect_png(const std::string& path, int width, int height) {
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const auto bytes = data::read_file_bytes(path);
  ASSERT_GT(bytes.size(), 8u);
  EXPECT_EQ(std::string(bytes.begin() + 1, bytes.begin() + 4), "PNG") << path;
  const cv::Mat img = data::decode_image_file(path).image;
  EXPECT_EQ(img.cols, width) << path;
  EXPECT_EQ(img.rows, height) << path;
  // not a blank canvas
  cv::Scalar mean = cv::mean(img);
  EXPECT_LT(mean[0] + mean[1] + mean[2], 3 * 255.0) << path;
  // KESTREL_KEEP_PLOTS=folder keeps a copy to look at (the temporary folder goes with the test).
  if (const char* keep = std::getenv("KESTREL_KEEP_PLOTS"))
    std::filesystem::copy_file(path, std::filesystem::path(keep) / std::filesystem::path(path).filename(),
                               std::filesystem::copy_options::overwrite_existing);
}

ApPerClass three_class_metrics() {
  // 3 classes, 6 predictions, a mix of hits and misses at several confidences.
  at::Tensor correct = at::zeros({6, 10}, at::kBool);
  correct.index_put_({0}, true);
  correct.index_put_({2}, true);
  correct.index_put_({3}, true);
  return ap_per_class(correct, at::tensor({0.95, 0.8, 0.7, 0.6, 0.4, 0.3}), at::tensor({0.0, 0.0, 1.0, 2.0, 2.0, 1.0}),
                      at::tensor({0.0, 0.0, 1.0, 2.0, 2.0}));
}

TEST(Plots, EveryChartIsAPngOfUpstreamSize) {
  test::TempDir dir;
  const std::vector<std::string> names = {"person", "bicycle", "car"};
  ConfusionMatrix cm(3);
  cm.process_batch(rows({0, 0, 10, 10, 0.9, 0, 20, 0, 30, 10, 0.8, 2}, 6), rows({0, 0, 0, 10, 10, 1, 20, 0, 30, 10}, 5));
  plot_confusion_matrix(cm, names, dir.file("confusion_matrix.png"));
  expect_png(dir.file("confusion_matrix.png"), kConfusionWidth, kConfusionHeight);
  ConfusionMatrix many(80);  // unnamed, no annotations
  many.process_batch(rows({0, 0, 10, 10, 0.9, 7}, 6), rows({7, 0, 0, 10, 10}, 5));
  plot_confusion_matrix(many, {}, dir.file("cm80.png"));
  expect_png(dir.file("cm80.png"), kConfusionWidth, kConfusionHeight);

  const ApPerClass m = three_class_metrics();
  plot_pr_curve(m, names, dir.file("PR_curve.png"));
  expect_png(dir.file("PR_curve.png"), kCurveWidth, kCurveHeight);
  for (auto [kind, file] : {std::pair{CurveKind::f1, "F1_curve.png"}, {CurveKind::precision, "P_curve.png"},
                            {CurveKind::recall, "R_curve.png"}}) {
    plot_confidence_curve(m, kind, names, dir.file(file));
    expect_png(dir.file(file), kCurveWidth, kCurveHeight);
  }

  std::string csv =
      "               epoch,      train/box_loss,      train/obj_loss,      train/cls_loss,   metrics/precision,"
      "      metrics/recall,     metrics/mAP_0.5,metrics/mAP_0.5:0.95,        val/box_loss,        val/obj_loss,"
      "        val/cls_loss,               x/lr0,               x/lr1,               x/lr2\n";
  for (int e = 0; e < 12; ++e) {
    const double f = 1.0 / (1 + e);
    csv += std::to_string(e) + "," + std::to_string(0.1 * f) + "," + std::to_string(0.05 * f) + "," + std::to_string(0.03 * f) +
           "," + std::to_string(1 - f) + "," + std::to_string(0.9 - 0.5 * f) + "," + std::to_string(0.6 - 0.5 * f) + "," +
           std::to_string(0.4 - 0.3 * f) + "," + std::to_string(0.09 * f) + "," + std::to_string(0.04 * f) + "," +
           std::to_string(0.02 * f) + ",0.01,0.01,0.01\n";
  }
  test::write_file(dir.file("results.csv"), csv);
  plot_results(dir.file("results.csv"), dir.file("results.png"));
  expect_png(dir.file("results.png"), kResultsWidth, kResultsHeight);
}

TEST(Plots, BadPathsAreErrorsNamingThem) {
  test::TempDir dir;
  const std::string missing = dir.file("no/such/folder/confusion_matrix.png");
  EXPECT_NE(test::error_message([&] { plot_confusion_matrix(ConfusionMatrix(2), {"a", "b"}, missing); }).find(missing), std::string::npos);
  const ApPerClass m = three_class_metrics();
  const std::string pr = dir.file("no/PR_curve.png");
  EXPECT_NE(test::error_message([&] { plot_pr_curve(m, {}, pr); }).find(pr), std::string::npos);
  const std::string f1 = dir.file("no/F1_curve.png");
  EXPECT_NE(test::error_message([&] { plot_confidence_curve(m, CurveKind::f1, {}, f1); }).find(f1), std::string::npos);
  const std::string csv = dir.file("missing.csv");
  EXPECT_NE(test::error_message([&] { plot_results(csv, dir.file("results.png")); }).find(csv), std::string::npos);
  test::write_file(dir.file("short.csv"), "epoch,a,b\n0,1,2\n");
  EXPECT_NE(test::error_message([&] { plot_results(dir.file("short.csv"), dir.file("r.png")); }).find("short.csv"), std::string::npos);
  // A folder where the file should be: write_png's own error, naming it.
  std::filesystem::create_directories(dir.file("taken.png"));
  EXPECT_NE(test::error_message([&] { data::write_png(dir.file("taken.png"), cv::Mat(4, 4, CV_8UC3, cv::Scalar(1, 2, 3))); })
                .find(dir.file("taken.png")), std::string::npos);
}

// numpy, by hand with upstream's hist2d (utils/plots.py) at n = 20 (2026-12-02):
//   x [0, 0, 1, 2, 2, 2], y [0.1, 0.1, 0.5, 0.9, 0.9, 0.2] -> log [2, 2, 1, 2, 2, 1];
//   x [0, 0, 0], y [0.1, 0.3, 0.2] -> [0, 0, 0].
TEST(Plots, LogCellDensityAsUpstreamsHist2d) {
  const std::vector<double> d = log_cell_density({0, 0, 1, 2, 2, 2}, {0.1, 0.1, 0.5, 0.9, 0.9, 0.2}, 20);
  const std::vector<double> expected = {std::log(2), std::log(2), 0, std::log(2), std::log(2), 0};
  ASSERT_EQ(d.size(), expected.size());
  for (size_t i = 0; i < d.size(); ++i) EXPECT_NEAR(d[i], expected[i], 1e-12) << i;
  EXPECT_EQ(log_cell_density({0, 0, 0}, {0.1, 0.3, 0.2}, 20), (std::vector<double>{0, 0, 0}));
  EXPECT_TRUE(log_cell_density({}, {}, 20).empty());
}

// evolve.png: 5 panels a row, the fittest generation's '+' in black where its value and fitness are.
TEST(Plots, EvolvePanelsAndTheFittestMarked) {
  test::TempDir dir;
  const std::vector<std::string> keys = {"lr0", "lrf", "momentum", "weight_decay", "warmup_epochs", "box", "cls"};
  const std::vector<std::vector<double>> values = {{0.01, 0.01, 0.937, 5e-4, 3, 0.05, 0.5},
                                                   {0.012, 0.02, 0.9, 4e-4, 2.5, 0.06, 0.4},
                                                   {0.008, 0.015, 0.95, 6e-4, 3.5, 0.04, 0.6}};
  plot_evolve(keys, values, {0.2, 0.35, 0.1}, dir.file("evolve.png"));
  expect_png(dir.file("evolve.png"), kEvolveWidth, 2 * kEvolveRowHeight);
  const cv::Mat img = data::decode_image_file(dir.file("evolve.png")).image;
  // Generation 1 (fitness 0.35) is the fittest. The lr0 panel's axes are the pixels x 90..380, y 60..330
  // (plot_evolve's layout: panel width 400 less margins, row height 400 less margins) over lr0 0.0078..0.0122
  // and fitness 0.0875..0.3625 (5 % margins); its point (0.012, 0.35) maps to x 90 + round(0.9545 x 290) =
  // 367, y 330 - round(0.9545 x 270) = 72. The '+' arms reach 21 px each way; 30 px right is the white margin.
  const auto dark = [&](int x, int y) {
    const cv::Vec3b c = img.at<cv::Vec3b>(y, x);
    return c[0] < 60 && c[1] < 60 && c[2] < 60;
  };
  for (const cv::Point arm : {cv::Point(367 - 15, 72), cv::Point(367 + 15, 72), cv::Point(367, 72 - 15), cv::Point(367, 72 + 15)})
    EXPECT_TRUE(dark(arm.x, arm.y)) << arm;
  EXPECT_EQ(img.at<cv::Vec3b>(72, 367 + 30), cv::Vec3b(255, 255, 255));
  // Bad input names the file.
  EXPECT_NE(test::error_message([&] { plot_evolve(keys, values, {0.2}, dir.file("x.png")); }).find("x.png"), std::string::npos);
  EXPECT_NE(test::error_message([&] { plot_evolve({"a"}, values, {0.2, 0.35, 0.1}, dir.file("y.png")); }).find("y.png"),
            std::string::npos);
}

TEST(Plots, WritePngRoundTrips) {
  test::TempDir dir;
  cv::Mat img(7, 5, CV_8UC3);
  for (int y = 0; y < img.rows; ++y)
    for (int x = 0; x < img.cols; ++x) img.at<cv::Vec3b>(y, x) = cv::Vec3b(x * 40, y * 30, 200);
  data::write_png(dir.file("a.png"), img(cv::Rect(1, 1, 4, 5)));  // a non-continuous view
  const cv::Mat back = data::decode_image_file(dir.file("a.png")).image;
  ASSERT_EQ(back.size(), cv::Size(4, 5));
  EXPECT_EQ(cv::norm(back, img(cv::Rect(1, 1, 4, 5)), cv::NORM_INF), 0.0);
}

}  // namespace
}  // namespace kestrel::eval
