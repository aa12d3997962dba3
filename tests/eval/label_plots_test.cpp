// labels.jpg: bar heights proportional to the class counts, boxes drawn centred at their size, the 2D
// histograms' cells where the labels are (darker for more boxes), the file written as a 1600 x 1600 JPEG.
// labels_correlogram.jpg: numpy's bin rules (by hand, and against numpy itself), the panels' counts for
// hand-placed labels, the drawn lower triangle, the file written beside labels.jpg as a 2000 x 2000 JPEG.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "kestrel/core/error.h"
#include "kestrel/data/annotate.h"
#include "kestrel/data/image_io.h"
#include "kestrel/eval/label_plots.h"
#include "test_support.h"

namespace kestrel::eval {
namespace {

at::Tensor labels_of(std::vector<float> values) { return at::tensor(values, at::kFloat).view({-1, 5}); }

cv::Vec3b bgr(const cv::Scalar& s) {
  return {static_cast<uint8_t>(s[0]), static_cast<uint8_t>(s[1]), static_cast<uint8_t>(s[2])};
}

// The tallest run of pixels of exactly `colour` in one column of `area`, and that column.
std::pair<int, int> tallest_column(const cv::Mat& img, const cv::Rect& area, const cv::Vec3b& colour) {
  int best = 0, where = -1;
  for (int x = area.x; x < area.x + area.width; ++x) {
    int count = 0;
    for (int y = area.y; y < area.y + area.height; ++y) count += img.at<cv::Vec3b>(y, x) == colour;
    if (count > best) best = count, where = x;
  }
  return {best, where};
}

int channel_sum(const cv::Vec3b& p) { return p[0] + p[1] + p[2]; }

TEST(PlotLabels, BarHeightsFollowTheClassCounts) {
  // 4 boxes of class 0, 2 of class 1, 1 of class 2; the y axis ends at 1.05 x 4.
  const at::Tensor labels = labels_of({0, 0.5f, 0.5f, 0.1f, 0.1f, 0, 0.2f, 0.2f, 0.1f, 0.1f, 0, 0.3f, 0.3f, 0.1f, 0.1f,
                                       0, 0.4f, 0.4f, 0.1f, 0.1f, 1, 0.5f, 0.5f, 0.2f, 0.2f, 1, 0.6f, 0.6f, 0.2f, 0.2f,
                                       2, 0.7f, 0.7f, 0.3f, 0.3f});
  const cv::Mat img = render_labels(labels, {"a", "b", "c"});
  ASSERT_EQ(img.size(), cv::Size(kLabelsSize, kLabelsSize));
  const cv::Rect panel = labels_panel(0);
  const cv::Rect inside(panel.x + 3, panel.y, panel.width - 6, panel.height);
  int heights[3], columns[3];
  for (int c = 0; c < 3; ++c) std::tie(heights[c], columns[c]) = tallest_column(img, inside, bgr(data::palette_colour(c)));
  const double full = panel.height / (4 * 1.05);  // pixels per box
  EXPECT_NEAR(heights[0], 4 * full, 3);
  EXPECT_NEAR(heights[1], 2 * full, 3);
  EXPECT_NEAR(heights[2], 1 * full, 3);
  // Bars centred on their class, 0.8 of a class wide: three classes over the panel's width.
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(columns[c], panel.x + (c + 0.5) * panel.width / 3.0, 0.4 * panel.width / 3.0 + 1) << c;
  EXPECT_LT(columns[0], columns[1]);
  EXPECT_LT(columns[1], columns[2]);
  // A fourth palette colour (class 3) has no bar.
  EXPECT_EQ(tallest_column(img, inside, bgr(data::palette_colour(3))).first, 0);
}

TEST(PlotLabels, BoxesAreDrawnCentredAtTheirSize) {
  // One box of class 1, half the width and a quarter of the height: its edges at 0.25 / 0.75 of the
  // panel's width and 0.375 / 0.625 of its height, wherever its centre was.
  const cv::Mat img = render_labels(labels_of({1, 0.1f, 0.9f, 0.5f, 0.25f}), {"a", "b"});
  const cv::Rect p = labels_panel(1);
  const cv::Vec3b colour = bgr(data::palette_colour(1));
  const int left = p.x + p.width / 4, right = p.x + p.width * 3 / 4;
  const int top = p.y + p.height * 3 / 8, bottom = p.y + p.height * 5 / 8, mid_y = p.y + p.height / 2;
  EXPECT_EQ(img.at<cv::Vec3b>(mid_y, left), colour);
  EXPECT_EQ(img.at<cv::Vec3b>(mid_y, right), colour);
  EXPECT_EQ(img.at<cv::Vec3b>(top, p.x + p.width / 2), colour);
  EXPECT_EQ(img.at<cv::Vec3b>(bottom, p.x + p.width / 2), colour);
  EXPECT_EQ(img.at<cv::Vec3b>(mid_y, p.x + p.width / 2), cv::Vec3b(255, 255, 255)) << "an outline";
  EXPECT_EQ(img.at<cv::Vec3b>(mid_y, left - 5), cv::Vec3b(255, 255, 255));
}

TEST(PlotLabels, HistogramCellsSitWhereTheBoxesAre) {
  // Centres: three at (0.1, 0.2), one at (0.9, 0.8); sizes: three 0.2 x 0.1, one 0.6 x 0.5. Each 2D
  // histogram spans min..max of its data, so the busy cell is the bottom-left one, the single box the
  // top-right one; the busy cell is at the colour's saturated end, the single one at its light end.
  const at::Tensor labels = labels_of({0, 0.1f, 0.2f, 0.2f, 0.1f, 0, 0.1f, 0.2f, 0.2f, 0.1f, 0, 0.1f, 0.2f, 0.2f, 0.1f,
                                       0, 0.9f, 0.8f, 0.6f, 0.5f});
  const cv::Mat img = render_labels(labels, {"a"});
  for (int panel : {2, 3}) {
    const cv::Rect p = labels_panel(panel);
    const cv::Vec3b busy = img.at<cv::Vec3b>(p.y + p.height - 4, p.x + 4);
    const cv::Vec3b single = img.at<cv::Vec3b>(p.y + 4, p.x + p.width - 4);
    const cv::Vec3b empty = img.at<cv::Vec3b>(p.y + p.height / 2, p.x + p.width / 2);
    EXPECT_EQ(empty, cv::Vec3b(255, 255, 255)) << "panel " << panel;
    EXPECT_NE(single, cv::Vec3b(255, 255, 255)) << "panel " << panel;
    EXPECT_LT(channel_sum(busy), channel_sum(single) - 200) << "panel " << panel;
    EXPECT_GT(busy[0], busy[2]) << "blue, panel " << panel;
    // The cells are 1/50 of the axes: a pixel two cells in from the corner is blank.
    EXPECT_EQ(img.at<cv::Vec3b>(p.y + p.height - 4, p.x + 4 + 2 * p.width / 50), cv::Vec3b(255, 255, 255)) << panel;
  }
}

TEST(PlotLabels, WritesAJpegAndChecksShapes) {
  test::TempDir dir;
  const std::string path = dir.file("labels.jpg");
  plot_labels(labels_of({0, 0.5f, 0.5f, 0.2f, 0.2f}), {"a"}, path);
  const cv::Mat img = data::decode_image_file(path).image;
  EXPECT_EQ(img.size(), cv::Size(kLabelsSize, kLabelsSize));
  EXPECT_THROW(render_labels(at::zeros({3, 4}), {}), Error);
  EXPECT_THROW(plot_labels(labels_of({0, 0.5f, 0.5f, 0.2f, 0.2f}), {"a"}, dir.file("no/such/labels.jpg")), Error);
  // No labels at all (a split of background images): empty panels, not a crash.
  EXPECT_EQ(render_labels(at::zeros({0, 5}), {"a", "b"}).size(), cv::Size(kLabelsSize, kLabelsSize));
  // label_rows gathers every record's rows in order.
  std::vector<data::ImageRecord> records(2);
  records[0].rows.push_back({{1, 0.5f, 0.5f, 0.1f, 0.2f}, {}});
  records[1].rows.push_back({{0, 0.25f, 0.75f, 0.3f, 0.4f}, {}});
  const at::Tensor rows = label_rows(records);
  ASSERT_EQ(rows.sizes(), (at::IntArrayRef{2, 5}));
  EXPECT_EQ(rows[1][0].item<float>(), 0);
  EXPECT_FLOAT_EQ(rows[1][2].item<float>(), 0.75f);
}

// ---- labels_correlogram.jpg

at::Tensor doubles(std::vector<double> values) { return at::tensor(values, at::kDouble); }

TEST(PlotLabels, HistogramBinsFollowNumpysRules) {
  // A fixed count spans min..max; no values: 0..1; all values equal: widened by 0.5 a side (one bin for 'auto').
  HistogramBins b = histogram_bins(doubles({0.9, 0.1, 0.5}), 50);
  EXPECT_EQ(b.lo, 0.1);
  EXPECT_EQ(b.hi, 0.9);
  EXPECT_EQ(b.n, 50);
  b = histogram_bins(at::zeros({0}), 0);
  EXPECT_EQ(b.lo, 0);
  EXPECT_EQ(b.hi, 1);
  EXPECT_EQ(b.n, 1);
  b = histogram_bins(doubles({0.25, 0.25}), 0);
  EXPECT_EQ(b.lo, -0.25);
  EXPECT_EQ(b.hi, 0.75);
  EXPECT_EQ(b.n, 1);
  // 'auto', by hand. {0, 0.31, 0.31, 1}: quartiles 0.2325 and 0.4825 (linear), IQR 0.25, Freedman-Diaconis
  // 0.5 / cbrt(4) = 0.315 < Sturges 1 / 3: ceil(1 / 0.315) = 4 bins.
  EXPECT_EQ(histogram_bins(doubles({0, 0.31, 0.31, 1}), 0).n, 4);
  // {0, 0.5 x 4, 1}: IQR 0, so Sturges: ceil(log2 6 + 1) = ceil(3.58) = 4.
  EXPECT_EQ(histogram_bins(doubles({0, 0.5, 0.5, 0.5, 0.5, 1}), 0).n, 4);
  // 1000 evenly spaced over 0..1: IQR 0.5, Freedman-Diaconis 1 / 10 = 0.1 > Sturges 1 / (log2 1000 + 1) =
  // 0.0912: ceil(10.97) = 11 bins. 100000 of them: Freedman-Diaconis 1 / 46.4 < Sturges 1 / 17.6: 47 bins.
  EXPECT_EQ(histogram_bins(at::linspace(0, 1, 1000, at::kDouble), 0).n, 11);
  EXPECT_EQ(histogram_bins(at::linspace(0, 1, 100000, at::kDouble), 0).n, 47);
  // A tight cluster and one far outlier would ask for millions of bins: capped.
  const at::Tensor clustered = at::cat({at::linspace(0, 0.001, 100000, at::kDouble), doubles({1000})});
  EXPECT_EQ(histogram_bins(clustered, 0).n, kMaxAutoBins);
  EXPECT_THROW(histogram_bins(doubles({1}), -1), Error);
}

// x {0, 0.31, 0.31, 1}, y {0, 0.62, 0.62, 1}, width {0.1, 0.23, 0.23, 0.5}, height {0.05, 0.05, 0.05, 0.45}:
// 'auto' gives 4 bins for each (IQR 0.25, 0.25, 0.1, 0.1 over ranges 1, 1, 0.4, 0.4; see above).
at::Tensor four_labels() {
  return labels_of({0, 0, 0, 0.1f, 0.05f, 1, 0.31f, 0.62f, 0.23f, 0.05f, 2, 0.31f, 0.62f, 0.23f, 0.05f, 0, 1, 1, 0.5f, 0.45f});
}

TEST(PlotLabels, CorrelogramCountsLandInTheirBins) {
  const at::Tensor labels = four_labels();
  // Diagonal, x: 50 bins of 0.02 over 0..1: 0 -> 0, 0.31 -> 15, 1 -> the last.
  PanelHistogram h = correlogram_histogram(labels, 0, 0);
  ASSERT_EQ(h.counts.sizes(), (at::IntArrayRef{50}));
  EXPECT_EQ(h.counts[0].item<int64_t>(), 1);
  EXPECT_EQ(h.counts[15].item<int64_t>(), 2);
  EXPECT_EQ(h.counts[49].item<int64_t>(), 1);
  EXPECT_EQ(h.counts.sum().item<int64_t>(), 4);
  // Diagonal, width: 50 bins of 0.008 over 0.1..0.5: 0.23 -> 0.13 / 0.008 = 16.25 -> 16.
  h = correlogram_histogram(labels, 2, 2);
  EXPECT_NEAR(h.x.lo, 0.1, 1e-7);
  EXPECT_NEAR(h.x.hi, 0.5, 1e-7);
  EXPECT_EQ(h.counts[0].item<int64_t>(), 1);
  EXPECT_EQ(h.counts[16].item<int64_t>(), 2);
  EXPECT_EQ(h.counts[49].item<int64_t>(), 1);
  EXPECT_EQ(h.counts.sum().item<int64_t>(), 4);
  // Row 1, column 0: x across (4 bins of 0.25), y up (4 bins of 0.25): (0.31, 0.62) -> cell (1, 2).
  h = correlogram_histogram(labels, 1, 0);
  ASSERT_EQ(h.counts.sizes(), (at::IntArrayRef{4, 4}));
  EXPECT_EQ(h.counts[0][0].item<int64_t>(), 1);
  EXPECT_EQ(h.counts[1][2].item<int64_t>(), 2);
  EXPECT_EQ(h.counts[3][3].item<int64_t>(), 1);
  EXPECT_EQ(h.counts.sum().item<int64_t>(), 4);  // so every other cell is empty
  // Row 3, column 2: width across (4 bins of 0.1 from 0.1), height up (4 bins of 0.1 from 0.05).
  h = correlogram_histogram(labels, 3, 2);
  ASSERT_EQ(h.counts.sizes(), (at::IntArrayRef{4, 4}));
  EXPECT_EQ(h.counts[0][0].item<int64_t>(), 1);
  EXPECT_EQ(h.counts[1][0].item<int64_t>(), 2);
  EXPECT_EQ(h.counts[3][3].item<int64_t>(), 1);
  EXPECT_EQ(h.counts.sum().item<int64_t>(), 4);
  // Every panel counts every label once; the upper triangle is not drawn.
  for (int row = 0; row < 4; ++row)
    for (int col = 0; col <= row; ++col) EXPECT_EQ(correlogram_histogram(labels, row, col).counts.sum().item<int64_t>(), 4);
  EXPECT_THROW(correlogram_histogram(labels, 0, 1), Error);
  EXPECT_THROW(correlogram_histogram(labels, 4, 0), Error);
  // No labels: one empty bin a side off the diagonal, 50 empty ones on it.
  EXPECT_EQ(correlogram_histogram(at::zeros({0, 5}), 1, 0).counts.sizes(), (at::IntArrayRef{1, 1}));
  EXPECT_EQ(correlogram_histogram(at::zeros({0, 5}), 1, 1).counts.sum().item<int64_t>(), 0);
}

TEST(PlotLabels, CorrelogramCountsAtMostAMillionLabels) {
  // A million labels at x = 0.25, then one at x = 0.9 that is past the limit: not counted, so x spans
  // 0.25 +- 0.5.
  at::Tensor labels = at::full({kCorrelogramMaxLabels + 1, 5}, 0.25f);
  labels[kCorrelogramMaxLabels][1] = 0.9f;
  const PanelHistogram h = correlogram_histogram(labels, 0, 0);
  EXPECT_EQ(h.counts.sum().item<int64_t>(), kCorrelogramMaxLabels);
  EXPECT_EQ(h.x.hi, 0.75);
}

TEST(PlotLabels, CorrelogramCountsMatchNumpy) {
  // 500 labels, x and y uniform, widths and heights skewed towards small boxes: numpy's 'auto' bin count
  // and histogram2d over those bins, and the 50-bin histogram, agree with the panels' counts.
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> values;
  for (int i = 0; i < 500; ++i) {
    const float w = u(gen) * u(gen), h = w * (0.5f + u(gen));
    values.insert(values.end(), {0, u(gen), u(gen), w, std::min(h, 1.0f)});
  }
  const at::Tensor labels = labels_of(values);
  test::TempDir dir;
  {
    std::ofstream out(dir.file("labels.txt"));
    out.precision(9);
    for (size_t i = 0; i < values.size(); ++i) out << values[i] << (i % 5 == 4 ? '\n' : ' ');
  }
  const test::CommandResult r = test::run_python(
      "import json, numpy as np\n"
      "l = np.loadtxt('" + dir.file("labels.txt") + "', dtype=np.float32).astype(np.float64)\n"
      "x, y, w, h = l[:, 1], l[:, 2], l[:, 3], l[:, 4]\n"
      "out = {}\n"
      "for name, a, b in (('xy', x, y), ('wh', w, h), ('xh', x, h)):\n"
      "    ea, eb = np.histogram_bin_edges(a, 'auto'), np.histogram_bin_edges(b, 'auto')\n"
      "    out[name] = np.histogram2d(a, b, bins=[ea, eb])[0].astype(int).tolist()\n"
      "out['w50'] = np.histogram(w, bins=50)[0].tolist()\n"
      "print('RESULT ' + json.dumps(out))\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find("RESULT ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const nlohmann::json expected = nlohmann::json::parse(r.output.substr(at + 7, r.output.find('\n', at) - at - 7));
  auto as_json = [](const at::Tensor& counts) {
    const at::Tensor c = counts.contiguous();
    if (c.dim() == 1) return nlohmann::json(std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()));
    nlohmann::json rows = nlohmann::json::array();
    for (int64_t i = 0; i < c.size(0); ++i)
      rows.push_back(std::vector<int64_t>(c[i].data_ptr<int64_t>(), c[i].data_ptr<int64_t>() + c.size(1)));
    return rows;
  };
  EXPECT_EQ(as_json(correlogram_histogram(labels, 1, 0).counts), expected["xy"]);
  EXPECT_EQ(as_json(correlogram_histogram(labels, 3, 2).counts), expected["wh"]);
  EXPECT_EQ(as_json(correlogram_histogram(labels, 3, 0).counts), expected["xh"]);
  EXPECT_EQ(as_json(correlogram_histogram(labels, 2, 2).counts), expected["w50"]);
  EXPECT_GT(correlogram_histogram(labels, 3, 2).x.n, 4) << "a real 'auto' count, not a degenerate one";
}

TEST(PlotLabels, CorrelogramDrawsTheDiagonalAndTheLowerTriangle) {
  const cv::Mat img = render_correlogram(four_labels());
  ASSERT_EQ(img.size(), cv::Size(kCorrelogramSize, kCorrelogramSize));
  const cv::Vec3b white(255, 255, 255);
  // corner=True: nothing in the upper triangle.
  for (int row = 0; row < 4; ++row)
    for (int col = row + 1; col < 4; ++col) {
      cv::Mat differs;
      cv::inRange(img(correlogram_panel(row, col)), cv::Scalar(255, 255, 255), cv::Scalar(255, 255, 255), differs);
      EXPECT_EQ(cv::countNonZero(differs), correlogram_panel(row, col).area()) << row << ", " << col;
    }
  // Row 1, column 0 (x across, y up, 4 x 4 cells): the cell of two labels (1, 2) dark, the single label's
  // (0, 0) light, an empty one (2, 0) blank.
  const cv::Rect p = correlogram_panel(1, 0);
  auto cell = [&](int i, int j) {
    return img.at<cv::Vec3b>(p.y + p.height - (2 * j + 1) * p.height / 8, p.x + (2 * i + 1) * p.width / 8);
  };
  EXPECT_NE(cell(1, 2), white);
  EXPECT_NE(cell(0, 0), white);
  EXPECT_EQ(cell(2, 0), white);
  EXPECT_LT(channel_sum(cell(1, 2)), channel_sum(cell(0, 0)) - 200);
  EXPECT_GT(cell(1, 2)[0], cell(1, 2)[2]) << "blue";
  // The diagonal's x histogram: the bar of bin 15 (2 labels) twice as tall as bin 0's (1 label), none at bin 30.
  const cv::Rect d = correlogram_panel(0, 0);
  auto column = [&](int bin, double height) {  // the pixel at `height` (0..1 of the panel) over the bin's centre
    return img.at<cv::Vec3b>(d.y + d.height - static_cast<int>(height * d.height), d.x + (2 * bin + 1) * d.width / 100);
  };
  EXPECT_NE(column(15, 0.9), white);  // 2 / 2.1 of the height
  EXPECT_GT(column(15, 0.9)[0], column(15, 0.9)[2]) << "blue";
  EXPECT_NE(column(0, 0.4), white);  // 1 / 2.1
  EXPECT_EQ(column(0, 0.6), white);
  EXPECT_EQ(column(30, 0.05), white);
}

TEST(PlotLabels, WritesTheCorrelogramBesideLabelsJpg) {
  EXPECT_EQ(correlogram_path("runs/train/exp/labels.jpg"), "runs/train/exp/labels_correlogram.jpg");
  EXPECT_EQ(correlogram_path("labels.jpg"), "labels_correlogram.jpg");
  test::TempDir dir;
  plot_labels(four_labels(), {"a", "b", "c"}, dir.file("labels.jpg"));
  EXPECT_EQ(data::decode_image_file(dir.file("labels_correlogram.jpg")).image.size(),
            cv::Size(kCorrelogramSize, kCorrelogramSize));
  // No labels: both plots still written (empty panels), no crash.
  test::TempDir empty;
  plot_labels(at::zeros({0, 5}), {"a"}, empty.file("labels.jpg"));
  EXPECT_EQ(data::decode_image_file(empty.file("labels.jpg")).image.size(), cv::Size(kLabelsSize, kLabelsSize));
  EXPECT_EQ(data::decode_image_file(empty.file("labels_correlogram.jpg")).image.size(),
            cv::Size(kCorrelogramSize, kCorrelogramSize));
}

}  // namespace
}  // namespace kestrel::eval
