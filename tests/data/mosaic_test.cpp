// Mosaics: tile placement, label offsets and the final crop worked out by hand from upstream's
// load_mosaic / load_mosaic9 rules; invariants and determinism over random draws.
#include "kestrel/data/mosaic.h"

#include <gtest/gtest.h>

#include "kestrel/core/error.h"

namespace kestrel::data {
namespace {

const cv::Vec3b kGrey(114, 114, 114);

cv::Vec3b colour_of(size_t i) { return cv::Vec3b(uchar(10 + 20 * i), uchar(200 - 15 * i), uchar(5 * i)); }

Sample tile(size_t i, int w, int h, std::vector<Box> boxes = {}) {
  return Sample{cv::Mat(h, w, CV_8UC3, cv::Scalar(colour_of(i))), std::move(boxes), {}};
}

void expect_box(const Box& b, float cls, double x1, double y1, double x2, double y2) {
  EXPECT_EQ(b.cls, cls);
  EXPECT_NEAR(b.x1, x1, 1e-4);
  EXPECT_NEAR(b.y1, y1, 1e-4);
  EXPECT_NEAR(b.x2, x2, 1e-4);
  EXPECT_NEAR(b.y2, y2, 1e-4);
}

AugmentOptions identity_options() {
  AugmentOptions o;
  o.degrees = o.translate = o.scale = o.shear = o.perspective = 0;
  o.copy_paste = 0;
  return o;
}

// s = 64, centre (70, 50). Tile corners meeting at the centre:
//   0 (64x48) top-left at (6, 2); 1 (40x64) at (70, -14), its top 14 rows cut; 2 (64x64) at (6, 50);
//   3 (32x16) at (70, 50).
std::array<Sample, 4> four_tiles() {
  return {tile(0, 64, 48, {{0, 30, 30, 60, 44}}), tile(1, 40, 64, {{1, 0, 40, 20, 60}}),
          tile(2, 64, 64, {{2, 60, 60, 64, 64}}), tile(3, 32, 16, {{3, 20, 4, 32, 16}})};
}

TEST(Mosaic4, CanvasPlacesTilesAroundTheCentre) {
  const Sample c = mosaic4_canvas(four_tiles(), 64, {70, 50});
  ASSERT_EQ(c.image.size(), cv::Size(128, 128));
  auto at = [&](int row, int col) { return c.image.at<cv::Vec3b>(row, col); };
  EXPECT_EQ(at(0, 0), kGrey);
  EXPECT_EQ(at(2, 6), colour_of(0));
  EXPECT_EQ(at(1, 6), kGrey);
  EXPECT_EQ(at(49, 69), colour_of(0));
  EXPECT_EQ(at(0, 70), colour_of(1));
  EXPECT_EQ(at(49, 109), colour_of(1));
  EXPECT_EQ(at(49, 110), kGrey);
  EXPECT_EQ(at(113, 6), colour_of(2));
  EXPECT_EQ(at(114, 6), kGrey);
  EXPECT_EQ(at(65, 101), colour_of(3));
  EXPECT_EQ(at(66, 101), kGrey);
  EXPECT_EQ(at(60, 110), kGrey);
  ASSERT_EQ(c.boxes.size(), 4u);
  expect_box(c.boxes[0], 0, 36, 32, 66, 46);
  expect_box(c.boxes[1], 1, 70, 26, 90, 46);
  expect_box(c.boxes[2], 2, 66, 110, 70, 114);
  expect_box(c.boxes[3], 3, 90, 54, 102, 66);
}

TEST(Mosaic4, CanvasClipsBoxesAndPolygonsToIt) {
  std::array<Sample, 4> tiles = four_tiles();
  tiles[1].boxes = {{1, 0, 0, 20, 30}};  // at (70, -14): y -14..16 -> 0..16
  for (Sample& t : tiles)
    for (const Box& b : t.boxes) t.segments.push_back({{b.x1, b.y1}, {b.x2, b.y1}, {b.x2, b.y2}, {b.x1, b.y2}});
  const Sample c = mosaic4_canvas(tiles, 64, {70, 50});
  expect_box(c.boxes[1], 1, 70, 0, 90, 16);
  ASSERT_EQ(c.segments.size(), 4u);
  EXPECT_EQ(c.segments[1][0], cv::Point2f(70, 0));
  EXPECT_EQ(c.segments[1][2], cv::Point2f(90, 16));
  tiles[2].segments.clear();  // one tile without polygons: none are kept
  EXPECT_TRUE(mosaic4_canvas(tiles, 64, {70, 50}).segments.empty());
  EXPECT_THROW(mosaic4_canvas(tiles, 64, {129, 50}), Error);
}

TEST(Mosaic4, IdentityPerspectiveCropsTheCanvasCentre) {
  // Border -32: output = canvas[32:96, 32:96], labels - 32, clipped to 64 and filtered.
  std::mt19937 rng(0);
  const Sample m = mosaic4(four_tiles(), 64, identity_options(), rng, cv::Point(70, 50));
  ASSERT_EQ(m.image.size(), cv::Size(64, 64));
  EXPECT_EQ(m.image.at<cv::Vec3b>(0, 0), colour_of(0));   // canvas (32, 32)
  EXPECT_EQ(m.image.at<cv::Vec3b>(10, 40), colour_of(1));  // canvas (42, 72)
  EXPECT_EQ(m.image.at<cv::Vec3b>(40, 10), colour_of(2));  // canvas (72, 42)
  EXPECT_EQ(m.image.at<cv::Vec3b>(20, 40), colour_of(3));  // canvas (52, 72)
  EXPECT_EQ(m.image.at<cv::Vec3b>(63, 63), kGrey);         // canvas (95, 95)
  ASSERT_EQ(m.boxes.size(), 3u);  // tile 2's box lands on the bottom edge: height 0
  expect_box(m.boxes[0], 0, 4, 0, 34, 14);
  expect_box(m.boxes[1], 1, 38, 0, 58, 14);
  expect_box(m.boxes[2], 3, 58, 22, 64, 34);
}

TEST(Mosaic4, CopyPasteMirrorsAcrossTheCanvas) {
  // Only tile 3 has an instance, canvas (90, 54, 102, 66); its mirror (26, 54, 38, 66) lands on
  // tile 2 and after the crop at (0, 22, 6, 34).
  std::array<Sample, 4> tiles = {tile(0, 64, 48), tile(1, 40, 64), tile(2, 64, 64), tile(3, 32, 16)};
  tiles[3].boxes = {{3, 20, 4, 32, 16}};
  tiles[3].segments = {{{20, 4}, {32, 4}, {32, 16}, {20, 16}}};
  AugmentOptions o = identity_options();
  o.copy_paste = 1.0;
  std::mt19937 rng(0);
  const Sample m = mosaic4(tiles, 64, o, rng, cv::Point(70, 50));
  ASSERT_EQ(m.boxes.size(), 2u);
  // Polygon bounds: the resampled points (about 0.05 apart here) that fall inside the output.
  EXPECT_NEAR(m.boxes[0].x2, 64, 0.1);
  expect_box(m.boxes[0], 3, 58, 22, m.boxes[0].x2, 34);
  EXPECT_NEAR(m.boxes[1].x1, 0, 0.1);
  expect_box(m.boxes[1], 3, m.boxes[1].x1, 22, 6, 34);
  EXPECT_EQ(m.segments.size(), 2u);
  EXPECT_EQ(m.image.at<cv::Vec3b>(28, 3), colour_of(3));  // canvas (60, 35) = mirror of (60, 92)
}

TEST(Mosaic4, RandomMosaicsAreImageSizedWithBoxesInside) {
  AugmentOptions o;  // YOLOv5 defaults: translate 0.1, scale 0.5
  o.degrees = 10, o.shear = 2;
  for (unsigned seed = 0; seed < 20; ++seed) {
    std::mt19937 rng(seed);
    const Sample m = mosaic4(four_tiles(), 64, o, rng, seed % 2 ? Dialect::yolov7 : Dialect::yolov5);
    ASSERT_EQ(m.image.size(), cv::Size(64, 64));
    for (const Box& b : m.boxes) {
      EXPECT_TRUE(b.x1 >= 0 && b.y1 >= 0 && b.x2 <= 64 && b.y2 <= 64) << seed;
      EXPECT_TRUE(b.x2 - b.x1 > 2 && b.y2 - b.y1 > 2) << seed;
    }
  }
}

TEST(Mosaic4, SameSeedSameMosaicOtherSeedOther) {
  auto make = [](unsigned seed) {
    std::mt19937 rng(seed);
    return mosaic4(four_tiles(), 64, AugmentOptions{}, rng);
  };
  const Sample a = make(42), b = make(42), c = make(43);
  EXPECT_EQ(cv::norm(a.image, b.image, cv::NORM_INF), 0);
  ASSERT_EQ(a.boxes.size(), b.boxes.size());
  for (size_t i = 0; i < a.boxes.size(); ++i) {
    EXPECT_EQ(a.boxes[i].x1, b.boxes[i].x1);
    EXPECT_EQ(a.boxes[i].y2, b.boxes[i].y2);
  }
  EXPECT_GT(cv::norm(a.image, c.image, cv::NORM_INF), 0);
}

TEST(Mosaic4, CentreDrawsStayInTheMiddleHalf) {
  std::mt19937 rng(1);
  for (int i = 0; i < 500; ++i) {
    const cv::Point c = draw_mosaic4_centre(64, rng);  // int(uniform(32, 96))
    EXPECT_TRUE(c.x >= 32 && c.x < 96 && c.y >= 32 && c.y < 96);
  }
  EXPECT_EQ(mosaic_border(640), -320);
  EXPECT_EQ(mosaic_border(65), -33);  // Python's -65 // 2
}

// s = 32, tiles (w x h): 0 32x24, 1 16x32, 2 32x8, 3 24x32, 4 8x8, 5 16x16, 6 32x32, 7 8x16, 8 16x8.
// Top-left corners on the 96x96 canvas: 0 (32,32), 1 (32,0), 2 (48,24), 3 (64,32), 4 (64,64),
// 5 (48,56), 6 (16,56), 7 (24,40), 8 (16,32); minus the offset (10, 20) in the 64x64 crop.
std::array<Sample, 9> nine_tiles() {
  return {tile(0, 32, 24, {{0, 0, 0, 32, 24}}), tile(1, 16, 32, {{1, 0, 0, 16, 32}}), tile(2, 32, 8),
          tile(3, 24, 32), tile(4, 8, 8), tile(5, 16, 16), tile(6, 32, 32, {{6, 0, 0, 32, 32}}),
          tile(7, 8, 16), tile(8, 16, 8)};
}

TEST(Mosaic9, CanvasFollowsUpstreamLayoutAndOffset) {
  const Sample c = mosaic9_canvas(nine_tiles(), 32, {10, 20});
  ASSERT_EQ(c.image.size(), cv::Size(64, 64));
  auto at = [&](int row, int col) { return c.image.at<cv::Vec3b>(row, col); };
  EXPECT_EQ(at(30, 30), colour_of(0));
  EXPECT_EQ(at(5, 30), colour_of(1));
  EXPECT_EQ(at(8, 60), colour_of(2));
  EXPECT_EQ(at(40, 60), colour_of(3));
  EXPECT_EQ(at(48, 58), colour_of(4));
  EXPECT_EQ(at(40, 45), colour_of(5));
  EXPECT_EQ(at(60, 10), colour_of(6));
  EXPECT_EQ(at(30, 16), colour_of(7));
  EXPECT_EQ(at(15, 10), colour_of(8));
  EXPECT_EQ(at(2, 2), kGrey);
  EXPECT_EQ(at(50, 63), kGrey);
  ASSERT_EQ(c.boxes.size(), 3u);
  expect_box(c.boxes[0], 0, 22, 12, 54, 36);
  expect_box(c.boxes[1], 1, 22, 0, 38, 12);   // from y -20
  expect_box(c.boxes[2], 6, 6, 36, 38, 64);   // to y 68
}

TEST(Mosaic9, IdentityPerspectiveCropsToImageSize) {
  std::mt19937 rng(0);
  const Sample m = mosaic9(nine_tiles(), 32, identity_options(), rng, cv::Point(10, 20));
  ASSERT_EQ(m.image.size(), cv::Size(32, 32));  // crop [16, 48): labels - 16
  EXPECT_EQ(m.image.at<cv::Vec3b>(14, 14), colour_of(0));  // (30, 30) above
  ASSERT_EQ(m.boxes.size(), 2u);  // tile 1's box is cut to 0 height
  expect_box(m.boxes[0], 0, 6, 0, 32, 20);
  expect_box(m.boxes[1], 6, 0, 20, 22, 32);
}

TEST(Mosaic9, RandomMosaicsAreDeterministicAndImageSized) {
  auto make = [](unsigned seed) {
    std::mt19937 rng(seed);
    return mosaic9(nine_tiles(), 32, AugmentOptions{}, rng, Dialect::yolov7);
  };
  const Sample a = make(5), b = make(5), c = make(6);
  ASSERT_EQ(a.image.size(), cv::Size(32, 32));
  EXPECT_EQ(cv::norm(a.image, b.image, cv::NORM_INF), 0);
  EXPECT_EQ(a.boxes.size(), b.boxes.size());
  EXPECT_GT(cv::norm(a.image, c.image, cv::NORM_INF), 0);
  for (const Box& box : a.boxes) EXPECT_TRUE(box.x1 >= 0 && box.y1 >= 0 && box.x2 <= 32 && box.y2 <= 32);
}

// Without copy-paste (or without polygons, where it does nothing) the mosaics never build their canvas
// whole: the warp paints it a band at a time. The result must be upstream's order on the whole canvas:
// canvas, copy_paste, then random_perspective with the next draws.
template <size_t N>
void expect_same_as_whole_canvas(const std::array<Sample, N>& tiles, int s, cv::Point where,
                                 const AugmentOptions& o, unsigned seed, Dialect dialect) {
  std::mt19937 rng(seed), rng_whole(seed);
  Sample fast, whole;
  if constexpr (N == 4) {
    fast = mosaic4(tiles, s, o, rng, where, dialect);
    whole = mosaic4_canvas(tiles, s, where);
  } else {
    fast = mosaic9(tiles, s, o, rng, where, dialect);
    whole = mosaic9_canvas(tiles, s, where);
  }
  copy_paste(whole, o.copy_paste, rng_whole);
  random_perspective(whole, o, {mosaic_border(s), mosaic_border(s)}, rng_whole, dialect);
  EXPECT_EQ(fast.image.size(), whole.image.size());
  EXPECT_EQ(cv::norm(fast.image, whole.image, cv::NORM_INF), 0) << "seed " << seed;
  EXPECT_EQ(fast.boxes.size(), whole.boxes.size()) << "seed " << seed;
  EXPECT_EQ(fast.segments.size(), whole.segments.size()) << "seed " << seed;
  for (size_t i = 0; i < std::min(fast.boxes.size(), whole.boxes.size()); ++i)
    expect_box(fast.boxes[i], whole.boxes[i].cls, whole.boxes[i].x1, whole.boxes[i].y1, whole.boxes[i].x2,
               whole.boxes[i].y2);
  EXPECT_EQ(rng(), rng_whole());  // the same number of draws
}

// Each box gets its rectangle as a polygon.
template <size_t N>
std::array<Sample, N> with_polygons(std::array<Sample, N> tiles) {
  for (Sample& t : tiles) {
    t.segments.clear();
    for (const Box& b : t.boxes) t.segments.push_back({{b.x1, b.y1}, {b.x2, b.y1}, {b.x2, b.y2}, {b.x1, b.y2}});
  }
  return tiles;
}

TEST(Mosaic, BandedCanvasGivesTheWholeCanvasResult) {
  std::array<Sample, 4> four = four_tiles();
  std::array<Sample, 9> nine = nine_tiles();
  cv::RNG noise(7);
  for (Sample& t : four) noise.fill(t.image, cv::RNG::UNIFORM, 0, 256);
  for (Sample& t : nine) noise.fill(t.image, cv::RNG::UNIFORM, 0, 256);
  AugmentOptions scratch;  // hyp.scratch-low: scale 0.5, translate 0.1
  AugmentOptions turned = scratch;
  turned.degrees = 20, turned.shear = 4;
  AugmentOptions pasting = scratch;  // copy-paste without polygons does nothing: still the banded path
  pasting.copy_paste = 0.5;
  AugmentOptions pasting_projective = pasting;  // with polygons: the whole canvas, projective warp
  pasting_projective.perspective = 1e-4;
  for (unsigned seed = 0; seed < 12; ++seed) {
    expect_same_as_whole_canvas(four, 64, {70, 50}, scratch, seed, Dialect::yolov5);
    expect_same_as_whole_canvas(four, 64, {40, 90}, turned, seed, Dialect::yolov5);
    expect_same_as_whole_canvas(four, 64, {66, 61}, pasting, seed, Dialect::yolov5);
    expect_same_as_whole_canvas(with_polygons(four), 64, {66, 61}, pasting_projective, seed, Dialect::yolov5);
    expect_same_as_whole_canvas(nine, 32, {10, 20}, scratch, seed, Dialect::yolov7);
    expect_same_as_whole_canvas(nine, 32, {3, 29}, turned, seed, Dialect::yolov7);
    expect_same_as_whole_canvas(with_polygons(nine), 32, {12, 5}, pasting, seed, Dialect::yolov7);
  }
}

TEST(Mosaic, CopyPasteOutsideZeroToOneIsAnErrorWithOrWithoutPolygons) {
  AugmentOptions o;
  o.copy_paste = 1.5;
  std::mt19937 rng(0);
  EXPECT_THROW(mosaic4(four_tiles(), 64, o, rng), Error);
  EXPECT_THROW(mosaic4(with_polygons(four_tiles()), 64, o, rng), Error);
  o.copy_paste = NAN;
  EXPECT_THROW(mosaic4(four_tiles(), 64, o, rng), Error);
}

TEST(Mosaic9, TilesLargerThanImageSizeAreRejected) {
  std::array<Sample, 9> tiles = nine_tiles();
  tiles[4] = tile(4, 40, 8);
  EXPECT_THROW(mosaic9_canvas(tiles, 32, {0, 0}), Error);
}

}  // namespace
}  // namespace kestrel::data
