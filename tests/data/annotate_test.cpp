// The one box drawing (upstream's Annotator): palette, box edges where the coordinates say, the label
// box above the corner or inside when there is no room, and detect's reversed drawing order.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "kestrel/core/error.h"
#include "kestrel/data/annotate.h"

namespace kestrel::data {
namespace {

at::Tensor rows(std::vector<float> values) {
  const int64_t n = static_cast<int64_t>(values.size()) / 6;
  return at::tensor(values, at::kFloat).view({n, 6});
}

TEST(Annotate, PaletteIsUpstreamsColours) {
  EXPECT_EQ(palette_colour(0), cv::Scalar(0x38, 0x38, 0xFF));   // FF3838 as BGR
  EXPECT_EQ(palette_colour(14), cv::Scalar(0xEC, 0x18, 0x00));  // 0018EC
  EXPECT_EQ(palette_colour(20), palette_colour(0));
  EXPECT_EQ(palette_colour(-1), palette_colour(19));
  EXPECT_EQ(class_label({"person", "car"}, 1), "car");
  EXPECT_EQ(class_label({"person"}, 7), "7");
}

TEST(Annotate, DrawsBoxesInThePaletteColour) {
  cv::Mat image(100, 200, CV_8UC3, cv::Scalar::all(0));
  draw_detections(image, rows({20, 40, 120, 90, 0.5f, 0}), {"person"}, {3, false, false});
  EXPECT_EQ(image.at<cv::Vec3b>(65, 20), cv::Vec3b(0x38, 0x38, 0xFF)) << "middle of the box's left side";
  EXPECT_EQ(image.at<cv::Vec3b>(65, 120), cv::Vec3b(0x38, 0x38, 0xFF)) << "middle of the right side";
  EXPECT_EQ(image.at<cv::Vec3b>(65, 70), cv::Vec3b(0, 0, 0)) << "the inside stays untouched";
  // The label box sits above the top-left corner (y 40 leaves room for a text height + 3).
  int label_pixels = 0;
  for (int y = 5; y < 38; ++y)
    for (int x = 21; x < 60; ++x) label_pixels += image.at<cv::Vec3b>(y, x) != cv::Vec3b(0, 0, 0);
  EXPECT_GT(label_pixels, 200);
  EXPECT_EQ(image.at<cv::Vec3b>(96, 70), cv::Vec3b(0, 0, 0)) << "nothing under the box";
}

TEST(Annotate, LabelGoesInsideAtTheTopAndMostConfidentIsOnTop) {
  cv::Mat image(100, 200, CV_8UC3, cv::Scalar::all(0));
  // Two boxes on the same edge x = 50: class 1 (conf 0.9) must be drawn last, so its colour wins.
  draw_detections(image, rows({50, 2, 150, 90, 0.9f, 1, 50, 20, 150, 70, 0.3f, 2}), {"a", "b", "c"}, {2, true, false});
  EXPECT_EQ(image.at<cv::Vec3b>(45, 50), cv::Vec3b(0x97, 0x9D, 0xFF)) << "FF9D97, class 1, on top";
  // hide_labels: no filled label box, the area under the top edge stays black.
  EXPECT_EQ(image.at<cv::Vec3b>(12, 60), cv::Vec3b(0, 0, 0));
  cv::Mat labelled(100, 200, CV_8UC3, cv::Scalar::all(0));
  const float box[4] = {50, 2, 150, 90};
  box_label(labelled, box, "x", palette_colour(3), 2);  // no room above y 2: the label box goes inside
  EXPECT_NE(labelled.at<cv::Vec3b>(6, 52), cv::Vec3b(0, 0, 0));
  EXPECT_THROW(draw_detections(image, at::zeros({2, 5}), {}), Error);
}

}  // namespace
}  // namespace kestrel::data
