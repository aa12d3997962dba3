// labels.jpg: bar heights proportional to the class counts, boxes drawn centred at their size, the 2D
// histograms' cells where the labels are (darker for more boxes), the file written as a 1600 x 1600 JPEG.
#include <gtest/gtest.h>

#include <filesystem>

#include <ATen/ATen.h>

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

}  // namespace
}  // namespace kestrel::eval
