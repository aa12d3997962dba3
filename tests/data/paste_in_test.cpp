// YOLOv7's paste-in: cut-outs, the free-box rule, the scaled paste and the dataset's use of it. Expected
// values are worked out by hand from the rules in src/kestrel/data/paste_in.h, or are invariants over
// random draws.
#include "kestrel/data/paste_in.h"

#include <gtest/gtest.h>

#include <opencv2/imgproc.hpp>

#include "data/data_test_support.h"
#include "kestrel/core/error.h"
#include "kestrel/data/augment.h"
#include "kestrel/data/dataset.h"
#include "kestrel/data/mosaic.h"
#include "test_support.h"

namespace kestrel::data {
namespace {

const cv::Scalar kGrey = cv::Scalar::all(114);
const cv::Vec3b kColour(10, 200, 30);

Sample grey(int w, int h) { return Sample{cv::Mat(h, w, CV_8UC3, kGrey), {}, {}}; }

Polygon square(float x1, float y1, float x2, float y2) { return {{x1, y1}, {x2, y1}, {x2, y2}, {x1, y2}}; }

// A w x h object of one colour whose mask covers it all, outlined by its own rectangle.
PasteObject solid_object(int w, int h, float cls = 3, cv::Vec3b colour = kColour) {
  return PasteObject{cls, cv::Mat(h, w, CV_8UC3, cv::Scalar(colour)), cv::Mat(h, w, CV_8U, cv::Scalar(255)),
                     square(0, 0, float(w), float(h))};
}

// Pixels that differ from the reference image (any channel), as a 0/255 mask.
cv::Mat changed(const cv::Mat& before, const cv::Mat& after) {
  cv::Mat diff;
  cv::absdiff(before, after, diff);
  cv::Mat channels[3];
  cv::split(diff, channels);
  return (channels[0] > 0) | (channels[1] > 0) | (channels[2] > 0);
}

cv::Rect changed_rect(const cv::Mat& before, const cv::Mat& after) {
  std::vector<cv::Point> points;
  cv::findNonZero(changed(before, after), points);
  return points.empty() ? cv::Rect() : cv::boundingRect(points);
}

void expect_box(const Box& b, float cls, double x1, double y1, double x2, double y2) {
  EXPECT_EQ(b.cls, cls);
  EXPECT_FLOAT_EQ(b.x1, float(x1));
  EXPECT_FLOAT_EQ(b.y1, float(y1));
  EXPECT_FLOAT_EQ(b.x2, float(x2));
  EXPECT_FLOAT_EQ(b.y2, float(y2));
}

bool same(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::countNonZero(changed(a, b)) == 0;
}

// ---- one paste ----------------------------------------------------------------------------------------

TEST(PasteIn, SolidObjectFillsTheScaledBoxAndAddsItsLabel) {
  // A 20 x 10 object into a 50 x 50 box at (30, 40): scale min(50/10, 50/20) = 2.5, so 50 x 25,
  // top-left aligned: pixels [30, 80) x [40, 65), box (30, 40, 80, 65).
  Sample s = grey(128, 128);
  const cv::Mat before = s.image.clone();
  ASSERT_TRUE(paste_object(s, solid_object(20, 10), cv::Rect(30, 40, 50, 50)));
  ASSERT_EQ(s.boxes.size(), 1u);
  expect_box(s.boxes[0], 3, 30, 40, 80, 65);
  EXPECT_EQ(changed_rect(before, s.image), cv::Rect(30, 40, 50, 25));  // the label's box is where pixels changed
  EXPECT_EQ(cv::countNonZero(changed(before, s.image)), 50 * 25);
  EXPECT_EQ(s.image.at<cv::Vec3b>(40, 30), kColour);
  EXPECT_EQ(s.image.at<cv::Vec3b>(64, 79), kColour);
  // The outline scales with it: (0, 0)-(20, 10) becomes (30, 40)-(80, 65).
  ASSERT_EQ(s.segments.size(), 1u);
  ASSERT_EQ(s.segments[0].size(), 4u);
  EXPECT_FLOAT_EQ(s.segments[0][0].x, 30);
  EXPECT_FLOAT_EQ(s.segments[0][0].y, 40);
  EXPECT_FLOAT_EQ(s.segments[0][2].x, 80);
  EXPECT_FLOAT_EQ(s.segments[0][2].y, 65);
}

TEST(PasteIn, OnlyMaskedPixelsArePastedButTheLabelIsTheWholeCrop) {
  // A 40 x 40 object whose mask is its left half, into a 40 x 40 box at (10, 10): no scaling.
  PasteObject object = solid_object(40, 40);
  object.mask.colRange(20, 40).setTo(0);
  object.image.colRange(20, 40).setTo(cv::Scalar::all(0));
  Sample s = grey(96, 64);
  const cv::Mat before = s.image.clone();
  ASSERT_TRUE(paste_object(s, object, cv::Rect(10, 10, 40, 40)));
  EXPECT_EQ(changed_rect(before, s.image), cv::Rect(10, 10, 20, 40));
  EXPECT_EQ(cv::countNonZero(changed(before, s.image)), 20 * 40);
  EXPECT_EQ(s.image.at<cv::Vec3b>(30, 35), cv::Vec3b(114, 114, 114));  // inside the box, outside the mask
  ASSERT_EQ(s.boxes.size(), 1u);
  expect_box(s.boxes[0], 3, 10, 10, 50, 50);  // upstream labels the scaled crop, not the mask's extent
}

TEST(PasteIn, ExistingBoxesWithoutPolygonsGetNoneForThePastedOne) {
  Sample s = grey(64, 64);
  s.boxes.push_back(Box{1, 0, 0, 5, 5});
  ASSERT_TRUE(paste_object(s, solid_object(22, 22), cv::Rect(30, 30, 22, 22)));
  EXPECT_EQ(s.boxes.size(), 2u);
  EXPECT_TRUE(s.segments.empty());  // none or one per box
}

TEST(PasteIn, TooSmallScaledObjectsOrMasksAreRefused) {
  Sample s = grey(64, 64);
  const cv::Mat before = s.image.clone();
  // 20 x 20 into 10 x 10: scale 0.5 gives 10 px, not more than 10.
  EXPECT_FALSE(paste_object(s, solid_object(20, 20), cv::Rect(5, 5, 30, 10)));
  // 22 x 22 into 11 x 11 (scale 0.5): 11 px, pasted.
  Sample t = grey(64, 64);
  EXPECT_TRUE(paste_object(t, solid_object(22, 22), cv::Rect(5, 5, 11, 11)));
  expect_box(t.boxes.at(0), 3, 5, 5, 16, 16);
  // A mask of 4 x 4 = 16 px (at scale 1) is 20 px or less: refused; 5 x 5 = 25 px: pasted.
  PasteObject small_mask = solid_object(30, 30);
  small_mask.mask.setTo(0);
  small_mask.mask(cv::Rect(0, 0, 4, 4)).setTo(255);
  EXPECT_FALSE(paste_object(s, small_mask, cv::Rect(0, 0, 30, 30)));
  EXPECT_TRUE(s.boxes.empty());
  EXPECT_TRUE(same(before, s.image));
  small_mask.mask(cv::Rect(0, 0, 5, 5)).setTo(255);
  EXPECT_TRUE(paste_object(s, small_mask, cv::Rect(0, 0, 30, 30)));
  EXPECT_EQ(cv::countNonZero(changed(before, s.image)), 25);
}

TEST(PasteIn, BadObjectsAndBoxesOutsideTheImageFail) {
  Sample s = grey(64, 64);
  EXPECT_THROW(paste_object(s, solid_object(20, 20), cv::Rect(50, 50, 20, 20)), Error);
  PasteObject no_mask = solid_object(20, 20);
  no_mask.mask = cv::Mat();
  EXPECT_THROW(paste_object(s, no_mask, cv::Rect(0, 0, 30, 30)), Error);
}

// ---- the free-box rule ---------------------------------------------------------------------------------

TEST(PasteIn, BoxesCoveringThirtyPercentOfALabelOrTwentyPixelsWideAreRefused) {
  Sample s = grey(128, 128);
  EXPECT_FALSE(paste_box_free(s, cv::Rect(0, 0, 20, 64)));  // not more than 20 px wide
  EXPECT_FALSE(paste_box_free(s, cv::Rect(0, 0, 64, 20)));
  EXPECT_TRUE(paste_box_free(s, cv::Rect(0, 0, 21, 21)));
  s.boxes.push_back(Box{0, 40, 40, 60, 60});  // 20 x 20 = 400 px
  EXPECT_FALSE(paste_box_free(s, cv::Rect(30, 30, 40, 40)));  // covers it all
  EXPECT_FALSE(paste_box_free(s, cv::Rect(45, 50, 30, 30)));  // 15 x 10 = 150 px: 0.375
  EXPECT_TRUE(paste_box_free(s, cv::Rect(50, 50, 30, 30)));   // 10 x 10 = 100 px: 0.25
  // Over the existing label's area: a large label under a small box is not obscured.
  Sample big = grey(128, 128);
  big.boxes.push_back(Box{0, 0, 0, 128, 128});
  EXPECT_TRUE(paste_box_free(big, cv::Rect(10, 10, 64, 64)));  // 4096 / 16384 = 0.25
  EXPECT_FALSE(paste_box_free(big, cv::Rect(10, 10, 72, 72)));  // 5184 / 16384 = 0.32
}

TEST(PasteIn, ACrowdedImageTakesNothing) {
  // 10 x 10 labels tiling the image: every box over 20 px on each side holds one of them whole
  // (intersection over its area 1), so every paste is refused.
  Sample s = grey(128, 128);
  for (int y = 0; y < 128; y += 10)
    for (int x = 0; x < 128; x += 10) s.boxes.push_back(Box{0, float(x), float(y), float(x + 10), float(y + 10)});
  const Sample before{s.image.clone(), s.boxes, {}};
  const std::vector<PasteObject> objects = {solid_object(30, 20), solid_object(12, 40)};
  for (uint32_t seed = 0; seed < 50; ++seed) {
    std::mt19937 rng(seed);
    paste_in(s, objects, rng);
    ASSERT_EQ(s.boxes.size(), before.boxes.size()) << seed;
    ASSERT_TRUE(same(before.image, s.image)) << seed;
  }
}

// ---- the random pastes ---------------------------------------------------------------------------------

TEST(PasteIn, RandomPastesStayInsideTheImageAndOffEachOther) {
  const std::vector<PasteObject> objects = {solid_object(30, 20, 1), solid_object(12, 40, 2), solid_object(25, 25, 4)};
  size_t pasted = 0;
  for (uint32_t seed = 0; seed < 40; ++seed) {
    Sample s = grey(160, 128);
    const cv::Mat before = s.image.clone();
    std::mt19937 rng(seed);
    paste_in(s, objects, rng);
    pasted += s.boxes.size();
    ASSERT_EQ(s.segments.size(), s.boxes.size());
    cv::Mat covered = cv::Mat::zeros(s.image.size(), CV_8U);
    for (size_t j = 0; j < s.boxes.size(); ++j) {
      const Box& b = s.boxes[j];
      EXPECT_TRUE(b.cls == 1 || b.cls == 2 || b.cls == 4);
      EXPECT_GE(b.x1, 0);
      EXPECT_GE(b.y1, 0);
      EXPECT_LE(b.x2, 160);
      EXPECT_LE(b.y2, 128);
      EXPECT_GT(b.x2 - b.x1, 10);
      EXPECT_GT(b.y2 - b.y1, 10);
      // Each paste's box lies inside a box that covered under 30% of every earlier one.
      for (size_t i = 0; i < j; ++i) EXPECT_LT(box_ioa(b, s.boxes[i]), 0.30) << seed << ": " << i << " " << j;
      covered(cv::Rect(cv::Point(int(b.x1), int(b.y1)), cv::Point(int(b.x2), int(b.y2)))).setTo(255);
    }
    // Solid objects with full masks: the changed pixels are exactly the union of the pasted boxes.
    EXPECT_EQ(cv::countNonZero(changed(before, s.image) != covered), 0) << seed;
  }
  EXPECT_GT(pasted, 40u);  // about 16 boxes tried per image, the first ones nearly always free
}

TEST(PasteIn, SameSeedSamePastesOtherSeedOthers) {
  const std::vector<PasteObject> objects = {solid_object(30, 20, 1), solid_object(12, 40, 2)};
  auto run = [&](uint32_t seed) {
    Sample s = grey(128, 128);
    s.boxes.push_back(Box{0, 10, 10, 40, 40});
    s.segments.push_back(square(10, 10, 40, 40));
    std::mt19937 rng(seed);
    paste_in(s, objects, rng);
    return s;
  };
  const Sample a = run(5), b = run(5), c = run(6);
  EXPECT_TRUE(same(a.image, b.image));
  ASSERT_EQ(a.boxes.size(), b.boxes.size());
  for (size_t i = 0; i < a.boxes.size(); ++i) {
    EXPECT_EQ(a.boxes[i].x1, b.boxes[i].x1);
    EXPECT_EQ(a.boxes[i].y2, b.boxes[i].y2);
    EXPECT_EQ(a.boxes[i].cls, b.boxes[i].cls);
  }
  EXPECT_FALSE(same(a.image, c.image));
}

TEST(PasteIn, NoObjectsChangesNothingAndDrawsNothing) {
  Sample s = grey(64, 64);
  s.boxes.push_back(Box{0, 1, 1, 9, 9});
  const cv::Mat before = s.image.clone();
  std::mt19937 rng(3), untouched(3);
  paste_in(s, {}, rng);
  EXPECT_TRUE(same(before, s.image));
  EXPECT_EQ(s.boxes.size(), 1u);
  EXPECT_EQ(rng(), untouched());
}

// ---- cut-outs ------------------------------------------------------------------------------------------

TEST(PasteIn, CutObjectsCropTheBoxAndMaskTheOutline) {
  Sample canvas = grey(64, 64);
  canvas.image(cv::Rect(10, 10, 20, 10)).setTo(cv::Scalar(kColour));
  canvas.boxes.push_back(Box{7, 10, 10, 30, 20});
  canvas.segments.push_back(square(10, 10, 30, 20));
  // A right triangle (40, 30), (60, 30), (40, 50) on a red patch: its box is the 20 x 20 crop at (40, 30).
  canvas.image(cv::Rect(40, 30, 20, 20)).setTo(cv::Scalar(0, 0, 255));
  canvas.boxes.push_back(Box{8, 40, 30, 60, 50});
  canvas.segments.push_back({{40, 30}, {60, 30}, {40, 50}});
  std::mt19937 rng(1);
  std::vector<PasteObject> objects = cut_objects(canvas, 1.0, rng);
  ASSERT_EQ(objects.size(), 2u);
  if (objects[0].cls != 7) std::swap(objects[0], objects[1]);
  const PasteObject& rect = objects[0];
  ASSERT_EQ(rect.image.size(), cv::Size(20, 10));
  EXPECT_EQ(cv::countNonZero(rect.mask), 200);  // the filled outline covers the whole crop
  cv::Mat expected(10, 20, CV_8UC3, cv::Scalar(kColour));
  EXPECT_TRUE(same(rect.image, expected));
  EXPECT_FLOAT_EQ(rect.polygon[2].x, 20);  // in the crop's frame
  EXPECT_FLOAT_EQ(rect.polygon[2].y, 10);
  const PasteObject& tri = objects[1];
  EXPECT_EQ(tri.cls, 8);
  ASSERT_EQ(tri.image.size(), cv::Size(20, 20));
  EXPECT_EQ(tri.mask.at<uchar>(0, 0), 255);    // the right-angle corner
  EXPECT_EQ(tri.mask.at<uchar>(19, 19), 0);    // beyond the hypotenuse
  EXPECT_EQ(tri.image.at<cv::Vec3b>(19, 19), cv::Vec3b(0, 0, 0));  // black outside the outline
  EXPECT_EQ(tri.image.at<cv::Vec3b>(2, 2), cv::Vec3b(0, 0, 255));
  const int inside = cv::countNonZero(tri.mask);
  EXPECT_GT(inside, 200);  // about half of the 400 px (plus the edge pixels)
  EXPECT_LT(inside, 260);
}

// Upstream's mask: the polygon (points truncated) filled on the whole canvas, then cropped to the truncated,
// clipped box. Filling in the crop's own frame gave other pixels along the edges into the right-most and
// bottom vertices (which lie one pixel outside the crop); on random polygons, the masks must equal that
// whole-canvas fill, points on the canvas border included.
TEST(PasteIn, CutObjectMasksEqualAWholeCanvasFill) {
  std::mt19937 draw(5);
  std::uniform_real_distribution<float> coordinate(0.f, 128.f);
  for (int trial = 0; trial < 200; ++trial) {
    Sample canvas = grey(128, 128);
    Polygon polygon;
    const int corners = 3 + trial % 6;
    for (int k = 0; k < corners; ++k) polygon.emplace_back(coordinate(draw), coordinate(draw));
    if (trial % 4 == 0) polygon[0].x = 128.f;  // on the right border (mosaics clip points to [0, 2s])
    float x1 = 1e9f, y1 = 1e9f, x2 = -1.f, y2 = -1.f;
    for (const cv::Point2f& p : polygon)
      x1 = std::min(x1, p.x), y1 = std::min(y1, p.y), x2 = std::max(x2, p.x), y2 = std::max(y2, p.y);
    canvas.boxes.push_back(Box{0, x1, y1, x2, y2});
    canvas.segments.push_back(polygon);
    std::mt19937 rng(1);
    const std::vector<PasteObject> objects = cut_objects(canvas, 1.0, rng);
    const int bx1 = std::clamp(static_cast<int>(x1), 0, 127), by1 = std::clamp(static_cast<int>(y1), 0, 127);
    const int bx2 = std::clamp(static_cast<int>(x2), 0, 127), by2 = std::clamp(static_cast<int>(y2), 0, 127);
    if (bx2 <= bx1 || by2 <= by1) {
      EXPECT_TRUE(objects.empty());
      continue;
    }
    ASSERT_EQ(objects.size(), 1u) << trial;
    std::vector<std::vector<cv::Point>> contour(1);
    for (const cv::Point2f& p : polygon) contour[0].emplace_back(static_cast<int>(p.x), static_cast<int>(p.y));
    cv::Mat whole = cv::Mat::zeros(128, 128, CV_8U);
    cv::drawContours(whole, contour, -1, cv::Scalar(255), cv::FILLED);
    const cv::Mat expected = whole(cv::Rect(bx1, by1, bx2 - bx1, by2 - by1));
    ASSERT_EQ(objects[0].mask.size(), expected.size()) << trial;
    EXPECT_EQ(cv::countNonZero(objects[0].mask != expected), 0) << "trial " << trial;
  }
}

TEST(PasteIn, CutObjectsTakeHalfRoundedToEvenAndSkipEmptyCrops) {
  Sample canvas = grey(64, 64);
  auto add = [&](float x1, float y1, float x2, float y2) {
    canvas.boxes.push_back(Box{0, x1, y1, x2, y2});
    canvas.segments.push_back(square(x1, y1, x2, y2));
  };
  add(0, 0, 10, 10);
  std::mt19937 rng(0);
  EXPECT_TRUE(cut_objects(canvas, 0.5, rng).empty());  // round(0.5) = 0
  add(20, 20, 30, 30);
  add(40, 40, 50, 50);
  EXPECT_EQ(cut_objects(canvas, 0.5, rng).size(), 2u);  // round(1.5) = 2
  // A box that truncates to zero width: skipped.
  Sample thin = grey(64, 64);
  thin.boxes.push_back(Box{0, 10.2f, 5, 10.9f, 20});
  thin.segments.push_back(square(10.2f, 5, 10.9f, 20));
  EXPECT_TRUE(cut_objects(thin, 1.0, rng).empty());
  // No polygons: nothing to cut.
  Sample boxes_only = grey(64, 64);
  boxes_only.boxes.push_back(Box{0, 0, 0, 30, 30});
  EXPECT_TRUE(cut_objects(boxes_only, 1.0, rng).empty());
}

// ---- collecting objects from side mosaics ----------------------------------------------------------------

Sample polygon_tile(int index) {  // 64 x 64 with four 16 x 16 squares of class `index % 5`
  Sample t = grey(64, 64);
  for (int k = 0; k < 4; ++k) {
    const float x = float(4 + (k % 2) * 32), y = float(4 + (k / 2) * 32);
    t.image(cv::Rect(int(x), int(y), 16, 16)).setTo(cv::Scalar(kColour));
    t.boxes.push_back(Box{float(index % 5), x, y, x + 16, y + 16});
    t.segments.push_back(square(x, y, x + 16, y + 16));
  }
  return t;
}

TEST(PasteIn, CollectStopsAtTheWantedCountFromPolygonImagesOnly) {
  int loads = 0, box_only_loads = 0;
  auto load = [&](size_t i) {
    ++loads;
    box_only_loads += i == 5;
    if (i != 5) return polygon_tile(int(i));
    Sample boxes_only = grey(64, 64);  // image 5: a box without a polygon, class 9 only here: never cut out
    boxes_only.boxes.push_back(Box{9, 0, 0, 40, 40});
    return boxes_only;
  };
  std::mt19937 rng(11);
  // (A first canvas of image 5 only would give nothing and stop: 1 in 6^4.)
  const std::vector<PasteObject> objects = collect_paste_objects(load, 6, 64, rng, nullptr, 30, 32);
  EXPECT_GE(objects.size(), 30u) << "loads " << loads;
  EXPECT_EQ(loads % 4, 0);
  EXPECT_GT(box_only_loads, 0);  // the box-only image took part
  for (const PasteObject& o : objects) {
    EXPECT_NE(o.cls, 9);
    EXPECT_GT(cv::countNonZero(o.mask), 0);
    EXPECT_LE(o.image.cols, 16);
    EXPECT_LE(o.image.rows, 16);
  }
  // Stops after a canvas once the count is reached: the last canvas gave at most 8 of 4 x 4 objects.
  EXPECT_LT(objects.size(), 30u + 9u);
}

TEST(PasteIn, CuttingFromCanvasPartsEqualsCuttingFromTheWholeCanvas) {
  // Noise tiles with polygons; the same objects (and draws) whether the side canvas is painted whole
  // or only where the objects are cut.
  std::array<Sample, 4> tiles;
  cv::RNG noise(3);
  for (int i = 0; i < 4; ++i) {
    tiles[size_t(i)] = polygon_tile(i);
    noise.fill(tiles[size_t(i)].image, cv::RNG::UNIFORM, 0, 256);
  }
  for (const cv::Point centre : {cv::Point(64, 64), cv::Point(40, 90), cv::Point(100, 33)}) {
    std::mt19937 rng_whole(5), rng_parts(5);
    const std::vector<PasteObject> whole = cut_objects(mosaic4_canvas(tiles, 64, centre), 0.5, rng_whole);
    const CanvasParts parts = mosaic4_canvas_parts(tiles, 64, centre);
    int64_t painted = 0;
    const std::vector<PasteObject> cut = cut_objects(
        parts.labels, parts.size,
        [&](cv::Rect rect, cv::Mat& pixels) {
          painted += rect.area();
          parts.paint(rect, pixels);
        },
        0.5, rng_parts);
    ASSERT_EQ(cut.size(), whole.size());
    ASSERT_FALSE(cut.empty());
    for (size_t i = 0; i < cut.size(); ++i) {
      EXPECT_EQ(cut[i].cls, whole[i].cls);
      EXPECT_EQ(cut[i].polygon, whole[i].polygon);
      EXPECT_TRUE(same(cut[i].image, whole[i].image)) << "object " << i;
      ASSERT_EQ(cut[i].mask.size(), whole[i].mask.size());
      EXPECT_EQ(cv::norm(cut[i].mask, whole[i].mask, cv::NORM_INF), 0) << "object " << i;
    }
    EXPECT_LE(painted, int64_t(cut.size()) * 16 * 16);  // the crops only, not the 128 x 128 canvas
    EXPECT_EQ(rng_parts(), rng_whole());
  }
  Sample unpaired;
  unpaired.boxes.push_back(Box{0, 0, 0, 4, 4});
  unpaired.segments = {square(0, 0, 4, 4), square(0, 0, 4, 4)};
  std::mt19937 rng(0);
  const auto nothing = [](cv::Rect, cv::Mat&) {};
  EXPECT_THROW(cut_objects(unpaired, {64, 64}, nothing, 1.0, rng), Error);
  EXPECT_THROW(cut_objects(Sample{}, {0, 64}, nothing, 1.0, rng), Error);
}

TEST(PasteIn, CollectGivesUpWhenTheFirstCanvasHasNothing) {
  int loads = 0;
  auto load = [&](size_t) {
    ++loads;
    Sample s = grey(64, 64);
    s.boxes.push_back(Box{0, 0, 0, 40, 40});
    return s;
  };
  std::mt19937 rng(2);
  EXPECT_TRUE(collect_paste_objects(load, 5, 64, rng).empty());
  EXPECT_EQ(loads, 4);  // one canvas, as upstream's loop breaks
}

// ---- in the training dataset -----------------------------------------------------------------------------

// Four 96 x 96 images with three coloured squares each, labelled with polygons (or boxes only).
DatasetIndex square_dataset(const test::TempDir& dir, bool polygons) {
  DatasetIndex index;
  for (int i = 0; i < 4; ++i) {
    cv::Mat img(96, 96, CV_8UC3, cv::Scalar(60, 60, 60));
    ImageRecord r;
    r.image = dir.file("im" + std::to_string(i) + ".png");
    r.width = r.height = 96;
    for (int k = 0; k < 3; ++k) {
      const int x = 8 + 28 * k, y = 10 + 20 * ((i + k) % 3), side = 24;
      img(cv::Rect(x, y, side, side)).setTo(cv::Scalar(40 * k, 255 - 50 * i, 90));
      LabelRow row;
      row.box = {float(k), (x + side / 2.0f) / 96, (y + side / 2.0f) / 96, side / 96.0f, side / 96.0f};
      if (polygons) {
        const float x1 = x / 96.0f, y1 = y / 96.0f, x2 = (x + side) / 96.0f, y2 = (y + side) / 96.0f;
        row.polygon = {x1, y1, x2, y1, x2, y2, x1, y2};
      }
      r.rows.push_back(row);
    }
    test::write_png(r.image, img);
    index.records.push_back(r);
  }
  return index;
}

DatasetOptions paste_options(double paste_in) {
  DatasetOptions o;
  o.img_size = 128;
  o.seed = 3;
  o.hyp.paste_in = paste_in;
  o.hyp.hsv_h = o.hyp.hsv_s = o.hyp.hsv_v = 0;
  return o;
}

TEST(PasteIn, DatasetPastesOnlyWithPolygonsAndKeepsLabelsInside) {
  test::TempDir dir;
  const YoloDataset with(square_dataset(dir, true), paste_options(1.0));
  const YoloDataset without(square_dataset(dir, true), paste_options(0.0));
  size_t boxes_with = 0, boxes_without = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (size_t i = 0; i < with.size(); ++i) {
      const Sample a = with.get(i, epoch), b = without.get(i, epoch);
      // Paste-in only adds: the mosaic and perspective before it drew the same numbers.
      EXPECT_GE(a.boxes.size(), b.boxes.size());
      boxes_with += a.boxes.size(), boxes_without += b.boxes.size();
      for (const Box& box : a.boxes) {
        EXPECT_GE(box.x1, 0);
        EXPECT_GE(box.y1, 0);
        EXPECT_LE(box.x2, 128);
        EXPECT_LE(box.y2, 128);
        EXPECT_LT(box.cls, 3);
      }
      const Sample again = with.get(i, epoch);  // deterministic for (seed, epoch, index)
      EXPECT_TRUE(same(a.image, again.image));
      EXPECT_EQ(a.boxes.size(), again.boxes.size());
    }
  }
  EXPECT_GT(boxes_with, boxes_without);

  // Box-only labels: paste_in changes nothing at all (not even the random stream).
  const YoloDataset boxes_on(square_dataset(dir, false), paste_options(1.0));
  const YoloDataset boxes_off(square_dataset(dir, false), paste_options(0.0));
  for (size_t i = 0; i < boxes_on.size(); ++i) {
    const Sample a = boxes_on.get(i, 1), b = boxes_off.get(i, 1);
    EXPECT_TRUE(same(a.image, b.image)) << i;
    ASSERT_EQ(a.boxes.size(), b.boxes.size()) << i;
    for (size_t k = 0; k < a.boxes.size(); ++k) EXPECT_EQ(a.boxes[k].x1, b.boxes[k].x1);
  }
}

}  // namespace
}  // namespace kestrel::data
