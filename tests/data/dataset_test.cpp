// The training dataset's choices between augmentation paths: the non-mosaic path warps boxes as upstream
// (never polygons), and --image-weights' weighted draw supplies the mosaic partners and seeds each draw.
#include <gtest/gtest.h>

#include <set>

#include "data/data_test_support.h"
#include "kestrel/data/dataset.h"
#include "kestrel/data/loader.h"
#include "test_support.h"

namespace kestrel::data {
namespace {

// `n` 96 x 96 PNGs, image i a solid colour with blue 10 + 40 i (green 200, red 30: never the grey 114 of
// the padding), each labelled with one right triangle, as a polygon row or as its bounding box only.
DatasetIndex triangle_dataset(const test::TempDir& dir, int n, bool polygons) {
  DatasetIndex index;
  for (int i = 0; i < n; ++i) {
    ImageRecord r;
    r.image = dir.file("im" + std::to_string(i) + ".png");
    r.width = r.height = 96;
    test::write_png(r.image, cv::Mat(96, 96, CV_8UC3, cv::Scalar(10 + 40 * i, 200, 30)));
    LabelRow row;
    row.box = {0.f, 0.5f, 0.5f, 0.8f, 0.8f};  // the triangle (0.1, 0.1), (0.9, 0.1), (0.1, 0.9)
    if (polygons) row.polygon = {0.1f, 0.1f, 0.9f, 0.1f, 0.1f, 0.9f};
    r.rows.push_back(row);
    index.records.push_back(r);
  }
  return index;
}

DatasetOptions plain_options() {
  DatasetOptions o;
  o.img_size = 96;
  o.seed = 11;
  o.hyp.hsv_h = o.hyp.hsv_s = o.hyp.hsv_v = 0;
  return o;
}

// Upstream's non-mosaic path (--rect, or a hyp with mosaic < 1) calls random_perspective without segments:
// a polygon dataset's boxes are warped by their corners and filtered with the boxes' area threshold, so
// they equal a box-only dataset's draw for draw. Warping the polygons instead gives a rotated triangle a
// tighter box than its rotated bounding box.
TEST(Dataset, NonMosaicPathWarpsBoxesNotPolygons) {
  test::TempDir dir;
  DatasetOptions o = plain_options();
  o.hyp.mosaic = 0;
  o.hyp.degrees = 30;
  o.hyp.translate = 0.2;
  const YoloDataset with_polygons(triangle_dataset(dir, 4, true), o);
  const YoloDataset boxes_only(triangle_dataset(dir, 4, false), o);
  size_t boxes = 0;
  for (int epoch = 0; epoch < 4; ++epoch) {
    for (size_t i = 0; i < 4; ++i) {
      const Sample a = with_polygons.get(i, epoch), b = boxes_only.get(i, epoch);
      ASSERT_EQ(a.boxes.size(), b.boxes.size()) << epoch << " " << i;
      for (size_t k = 0; k < a.boxes.size(); ++k) {
        EXPECT_EQ(a.boxes[k].x1, b.boxes[k].x1) << epoch << " " << i;
        EXPECT_EQ(a.boxes[k].y1, b.boxes[k].y1) << epoch << " " << i;
        EXPECT_EQ(a.boxes[k].x2, b.boxes[k].x2) << epoch << " " << i;
        EXPECT_EQ(a.boxes[k].y2, b.boxes[k].y2) << epoch << " " << i;
      }
      boxes += a.boxes.size();
    }
  }
  EXPECT_GT(boxes, 8u);  // the triangles survive the warp: the comparison compared something
}

// The blue values of the image's coloured pixels (green 200), i.e. which dataset images it shows.
std::set<int> images_shown(const cv::Mat& bgr) {
  std::set<int> shown;
  for (int y = 0; y < bgr.rows; ++y)
    for (int x = 0; x < bgr.cols; ++x) {
      const cv::Vec3b p = bgr.at<cv::Vec3b>(y, x);
      if (p[1] == 200) shown.insert((p[0] - 10) / 40);
    }
  return shown;
}

// --image-weights: upstream draws a mosaic's other three images from the epoch's weighted draw
// (random.choices(self.indices, k=3)). With a draw of image 5 only, a mosaic of image 0 shows images 0 and 5
// and nothing else; without the draw, other images appear. No warp beyond the mosaic's integer crop, no
// colour jitter, no flips: every coloured pixel is one image's colour.
TEST(Dataset, WeightedDrawGivesTheMosaicItsPartners) {
  test::TempDir dir;
  DatasetOptions o = plain_options();
  o.hyp.translate = o.hyp.scale = 0;
  o.hyp.fliplr = 0;
  const YoloDataset ds(triangle_dataset(dir, 6, false), o);
  const std::vector<int64_t> only_five(6, 5);
  std::set<int> uniform_partners;
  for (int epoch = 0; epoch < 6; ++epoch) {
    const WeightedDraw draw{&only_five, static_cast<uint64_t>(epoch)};
    const std::set<int> shown = images_shown(ds.get(0, epoch, nullptr, std::nullopt, &draw).image);
    for (int image : shown) EXPECT_TRUE(image == 0 || image == 5) << "epoch " << epoch << " shows image " << image;
    const std::set<int> plain = images_shown(ds.get(0, epoch).image);
    uniform_partners.insert(plain.begin(), plain.end());
  }
  EXPECT_GT(uniform_partners.size(), 2u) << "without a draw the partners are any images";
}

// An image drawn twice in an epoch is augmented twice: the seed is the position in the draw, not the image.
// (A mosaic of one image can fill the canvas with its colour alone: the boxes show where the tiles went.)
TEST(Dataset, ImageDrawnTwiceIsAugmentedAfresh) {
  test::TempDir dir;
  const YoloDataset ds(triangle_dataset(dir, 4, false), plain_options());
  const std::vector<int64_t> draw_of_two(4, 2);
  const WeightedDraw first{&draw_of_two, 0}, second{&draw_of_two, 1};
  const Sample a = ds.get(2, 0, nullptr, std::nullopt, &first), b = ds.get(2, 0, nullptr, std::nullopt, &second);
  auto corners = [](const Sample& s) {
    std::vector<float> v;
    for (const auto& box : s.boxes) v.insert(v.end(), {box.x1, box.y1, box.x2, box.y2});
    return v;
  };
  EXPECT_NE(corners(a), corners(b));
  const Sample again = ds.get(2, 0, nullptr, std::nullopt, &first);
  EXPECT_EQ(cv::norm(a.image, again.image, cv::NORM_INF), 0);  // deterministic for (seed, epoch, position)
  EXPECT_EQ(corners(a), corners(again));
}

// Through the loader: weights that draw one image only give a batch of that image, each augmented afresh.
TEST(Dataset, LoaderWeightedEpochAugmentsEachDraw) {
  test::TempDir dir;
  auto ds = std::make_shared<const YoloDataset>(triangle_dataset(dir, 4, false), plain_options());
  LoaderOptions lo;
  lo.batch_size = 4;
  lo.workers = 1;
  DataLoader loader(ds, lo);
  loader.set_sample_weights({0, 0, 1, 0});
  loader.start_epoch(0);
  const auto batch = loader.next();
  ASSERT_TRUE(batch);
  for (int64_t i : loader.epoch_order()) ASSERT_EQ(i, 2);
  for (int64_t k = 1; k < batch->images.size(0); ++k)  // the targets: one image's mosaic can be one colour
    EXPECT_FALSE(batch->images[k].equal(batch->images[0]) && batch->targets[k].equal(batch->targets[0]))
        << "draw " << k << " is a copy of draw 0";
}

// YOLOv5 clips the boxes (to [0, size - 1e-3]) before its flips and mirrors the clipped boxes, so a box that
// touches the left edge ends exactly at the right edge after fliplr (v7.0 dataloaders.py: xyxy2xywhn(clip=True)
// then labels[:, 1] = 1 - labels[:, 1]); clipped after the flip it ended at 1 - 1e-3 / 96. By hand: the box
// x 0..19.2 of 96 px flips to 76.8..96: cx 0.9, w 0.2, right edge 1.
TEST(Dataset, Yolov5FlipsTheClippedBoxes) {
  test::TempDir dir;
  DatasetIndex index;
  ImageRecord r;
  r.image = dir.file("edge.png");
  r.width = r.height = 96;
  test::write_png(r.image, cv::Mat(96, 96, CV_8UC3, cv::Scalar(10, 200, 30)));
  LabelRow row;
  row.box = {0.f, 0.1f, 0.5f, 0.2f, 0.4f};  // x from 0 to 0.2
  r.rows.push_back(row);
  index.records.push_back(r);
  DatasetOptions o = plain_options();
  o.hyp.mosaic = 0;  // letterbox (none at 96 px) and a warp that moves nothing
  o.hyp.translate = o.hyp.scale = 0;
  o.hyp.fliplr = 1;
  auto ds = std::make_shared<const YoloDataset>(index, o);
  LoaderOptions lo;
  lo.batch_size = 1;
  lo.workers = 0;
  DataLoader loader(ds, lo);
  loader.start_epoch(0);
  const auto batch = loader.next();
  ASSERT_TRUE(batch);
  ASSERT_EQ(batch->boxes, 1);
  const at::Tensor t = batch->targets[0][0];  // class, cx, cy, w, h
  EXPECT_NEAR(t[1].item<double>(), 0.9, 1e-6);
  EXPECT_NEAR(t[3].item<double>(), 0.2, 1e-6);
  EXPECT_NEAR(t[1].item<double>() + t[3].item<double>() / 2, 1.0, 1e-6) << "the flipped box ends at the right edge";
}

}  // namespace
}  // namespace kestrel::data
