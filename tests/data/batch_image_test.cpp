// Batch mosaics (train_batch0.jpg, val_batch<i>_labels/pred.jpg): upstream's grid geometry (column by
// column, tiles shrunk to fit 1920), boxes where the targets / predictions say in the class colour,
// predictions under conf 0.25 left out, file names on the tiles.
#include <gtest/gtest.h>

#include <cstdlib>

#include <ATen/ATen.h>

#include "kestrel/core/error.h"
#include "kestrel/data/annotate.h"
#include "kestrel/data/batch_image.h"

namespace kestrel::data {
namespace {

// A black batch of n images h x w with room for 4 targets each, none set.
Batch black_batch(int64_t n, int64_t h, int64_t w) {
  Batch b;
  b.images = at::zeros({n, 3, h, w}, at::kByte);
  b.targets = at::zeros({n, 4, 5}, at::kFloat);
  b.target_mask = at::zeros({n, 4}, at::kBool);
  return b;
}

void set_target(Batch& b, int64_t image, int64_t slot, std::vector<float> row) {
  b.targets[image][slot] = at::tensor(row, at::kFloat);
  b.target_mask[image][slot] = true;
}

// Within 40 per channel: the edges are antialiased lines.
bool near_colour(const cv::Mat& img, int y, int x, const cv::Scalar& c) {
  const cv::Vec3b p = img.at<cv::Vec3b>(y, x);
  for (int k = 0; k < 3; ++k)
    if (std::abs(p[k] - static_cast<int>(c[k])) > 40) return false;
  return true;
}

int bright_pixels(const cv::Mat& img, const cv::Rect& area) {
  int n = 0;
  for (int y = area.y; y < area.y + area.height; ++y)
    for (int x = area.x; x < area.x + area.width; ++x) {
      const cv::Vec3b p = img.at<cv::Vec3b>(y, x);
      n += p[0] > 150 && p[1] > 150 && p[2] > 150;
    }
  return n;
}

TEST(BatchImage, LabelsLandWhereTheTargetsSay) {
  // 3 images 480 x 640: a 2 x 2 grid at full size (1920 / 2 / 640 >= 1), filled column by column:
  // image 1 under image 0, image 2 to the right of image 0, the fourth cell white.
  Batch b = black_batch(3, 480, 640);
  set_target(b, 2, 0, {5, 0.5f, 0.5f, 0.25f, 0.5f});  // x 240..400, y 120..360 of its tile
  const cv::Mat img = render_batch(b, {"a", "b", "c", "d", "e", "elephant"});
  ASSERT_EQ(img.size(), cv::Size(1280, 960));
  EXPECT_EQ(batch_tile(b, 1), cv::Rect(0, 480, 640, 480));
  EXPECT_EQ(batch_tile(b, 2), cv::Rect(640, 0, 640, 480));
  const cv::Scalar colour = palette_colour(5);
  EXPECT_TRUE(near_colour(img, 240, 640 + 240, colour)) << "left edge";
  EXPECT_TRUE(near_colour(img, 240, 640 + 400, colour)) << "right edge";
  EXPECT_TRUE(near_colour(img, 360, 640 + 320, colour)) << "bottom edge";
  EXPECT_EQ(img.at<cv::Vec3b>(240, 640 + 320), cv::Vec3b(0, 0, 0)) << "inside the box: the image";
  EXPECT_EQ(img.at<cv::Vec3b>(240, 640 + 230), cv::Vec3b(0, 0, 0)) << "left of the box";
  EXPECT_EQ(img.at<cv::Vec3b>(240, 240), cv::Vec3b(0, 0, 0)) << "image 0 has no target";
  EXPECT_EQ(img.at<cv::Vec3b>(700, 900), cv::Vec3b(255, 255, 255)) << "the empty fourth cell";
  // The class name sits on a filled label box above the top edge.
  int filled = 0;
  for (int y = 100; y < 118; ++y)
    for (int x = 641 + 240; x < 640 + 270; ++x) filled += near_colour(img, y, x, colour);
  EXPECT_GT(filled, 100);
}

TEST(BatchImage, PredictionsAboveTheThresholdWithTheirScale) {
  // 16 images 640 x 640: 4 x 4 tiles shrunk to 480 (1920 / 4 / 640 = 0.75); boxes in batch pixels scale too.
  Batch b = black_batch(16, 640, 640);
  std::vector<at::Tensor> predictions(16, at::zeros({0, 6}));
  predictions[5] = at::tensor(std::vector<float>{100, 100, 300, 300, 0.9f, 0, 400, 100, 600, 300, 0.2f, 3}).view({2, 6});
  const cv::Mat img = render_batch(b, predictions, {});
  ASSERT_EQ(img.size(), cv::Size(1920, 1920));
  EXPECT_EQ(batch_tile(b, 5), cv::Rect(480, 480, 480, 480));  // column 5 / 4 = 1, row 5 % 4 = 1
  EXPECT_TRUE(near_colour(img, 480 + 150, 480 + 75, palette_colour(0))) << "x1 100 x 0.75";
  EXPECT_TRUE(near_colour(img, 480 + 150, 480 + 225, palette_colour(0))) << "x2 300 x 0.75";
  EXPECT_EQ(img.at<cv::Vec3b>(480 + 150, 480 + 300), cv::Vec3b(0, 0, 0)) << "conf 0.2 is not drawn";
  // The label "0 0.9" (no names): white text on the class colour (FF3838: not bright) above the box.
  EXPECT_GT(bright_pixels(img, cv::Rect(480 + 76, 480 + 40, 100, 33)), 30);
  EXPECT_THROW(render_batch(b, {at::zeros({1, 5})}, {}), Error);
}

TEST(BatchImage, FileNamesOnTheTiles) {
  Batch b = black_batch(2, 480, 640);
  BatchImageOptions o;
  const cv::Mat plain = render_batch(b, {}, o);
  o.paths = {"/data/images/000000000139.jpg", "/data/images/b.jpg"};
  const cv::Mat named = render_batch(b, {}, o);
  const cv::Rect corner(5, 5, 300, 30);  // upstream writes the name at (x + 5, y + 5)
  EXPECT_EQ(bright_pixels(plain, corner + cv::Point(4, 4)), 0);
  EXPECT_GT(bright_pixels(named, corner), 50);
  EXPECT_GT(bright_pixels(named, corner + cv::Point(0, 480)), 10) << "the second tile's name";
}

}  // namespace
}  // namespace kestrel::data
