// Augmentations of one sample: expected values are worked out by hand from upstream's formulas
// (YOLOv5 v7.0 utils/augmentations.py), or come from Python's own random module.
#include "kestrel/data/augment.h"

#include <gtest/gtest.h>

#include <sstream>

#include <opencv2/imgproc.hpp>

#include "kestrel/core/error.h"
#include "test_support.h"

namespace kestrel::data {
namespace {

const cv::Vec3b kGrey(114, 114, 114);

Sample solid(int w, int h, cv::Vec3b colour) { return Sample{cv::Mat(h, w, CV_8UC3, cv::Scalar(colour)), {}, {}}; }

void expect_box(const Box& b, double x1, double y1, double x2, double y2, double tol = 1e-4) {
  EXPECT_NEAR(b.x1, x1, tol);
  EXPECT_NEAR(b.y1, y1, tol);
  EXPECT_NEAR(b.x2, x2, tol);
  EXPECT_NEAR(b.y2, y2, tol);
}

Polygon square(float x1, float y1, float x2, float y2) { return {{x1, y1}, {x2, y1}, {x2, y2}, {x1, y2}}; }

// ---- random numbers ---------------------------------------------------------------------------------

TEST(AugmentRandom, DrawsEqualPythonRandomForTheSameGeneratorState) {
  std::mt19937 rng(2024);
  std::ostringstream state, ours;
  state << rng;  // the 624 state words and the position: CPython's getstate() layout
  ours.precision(17);
  for (int i = 0; i < 3; ++i) ours << uniform(rng, -3, 7) << "\n";
  for (int i = 0; i < 3; ++i) ours << random_below(rng, 37) << "\n";
  for (int v : sample_indices(rng, 10, 4)) ours << v << "\n";   // pool branch
  for (int v : sample_indices(rng, 90, 20)) ours << v << "\n";  // set branch (n > 21 + 4^3)
  // load_mosaic's partners and its shuffle: random.choices(indices, k=3), then random.shuffle
  std::vector<size_t> picks{7};
  for (int i = 0; i < 3; ++i) picks.push_back(draw_partner(rng, 128, nullptr));
  python_shuffle(picks, rng);
  const std::vector<int64_t> weighted = {5, 5, 9, 2, 11};  // --image-weights' draw: choices from its entries
  for (int i = 0; i < 3; ++i) picks.push_back(draw_partner(rng, 12, &weighted));
  for (size_t v : picks) ours << v << "\n";
  const auto py = test::run_python("import random\nw = [int(x) for x in '" + state.str() + "'.split()]\n" + R"(
random.setstate((3, tuple(w), None))
for _ in range(3): print('%.17g' % random.uniform(-3, 7))
for _ in range(3): print(random.randrange(37))
for v in random.sample(range(10), 4): print(v)
for v in random.sample(range(90), 20): print(v)
picks = [7] + random.choices(range(128), k=3)
random.shuffle(picks)
picks += random.choices([5, 5, 9, 2, 11], k=3)
for v in picks: print(v)
)");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  EXPECT_EQ(ours.str(), py.output);
}

TEST(AugmentRandom, BetaHasTheMeanAndVarianceOfItsParameters) {
  std::mt19937 rng(7);
  for (auto [a, b] : {std::pair{32.0, 32.0}, {8.0, 8.0}, {0.5, 2.0}}) {
    const int n = 40000;
    double sum = 0, sum2 = 0;
    for (int i = 0; i < n; ++i) {
      const double x = beta(rng, a, b);
      ASSERT_TRUE(x > 0 && x < 1);
      sum += x, sum2 += x * x;
    }
    const double mean = sum / n, var = sum2 / n - mean * mean;
    const double want_var = a * b / ((a + b) * (a + b) * (a + b + 1));
    EXPECT_NEAR(mean, a / (a + b), 5 * std::sqrt(want_var / n)) << a << "," << b;
    EXPECT_NEAR(var, want_var, 0.05 * want_var) << a << "," << b;
  }
  // Beta(0.5, 2): CDF 1.5 sqrt(x) - 0.5 x^1.5, so P(x < 0.01) = 0.1495 and P(x < 0.25) = 0.6875.
  // Beta(1, 1) is uniform: P(x < 0.3) = 0.3.
  const int n = 40000;
  int below_001 = 0, below_025 = 0, uniform_below_03 = 0;
  for (int i = 0; i < n; ++i) {
    const double x = beta(rng, 0.5, 2);
    below_001 += x < 0.01, below_025 += x < 0.25;
    uniform_below_03 += beta(rng, 1, 1) < 0.3;
  }
  EXPECT_NEAR(below_001 / double(n), 0.1495, 0.01);
  EXPECT_NEAR(below_025 / double(n), 0.6875, 0.01);
  EXPECT_NEAR(uniform_below_03 / double(n), 0.3, 0.01);
  EXPECT_THROW(beta(rng, 0, 1), Error);
}

// ---- resize and letterbox ---------------------------------------------------------------------------

TEST(AugmentResize, LongSideBecomesImageSizeShortSideRoundsUp) {
  EXPECT_EQ(resize_long_side(cv::Mat(50, 100, CV_8UC3), 64, true).size(), cv::Size(64, 32));
  EXPECT_EQ(resize_long_side(cv::Mat(7, 30, CV_8UC3), 64, true).size(), cv::Size(64, 15));  // 7 * 64/30 = 14.9
  EXPECT_EQ(resize_long_side(cv::Mat(90, 45, CV_8UC3), 60, false).size(), cv::Size(30, 60));
  const cv::Mat same(20, 64, CV_8UC3);
  EXPECT_EQ(resize_long_side(same, 64, false).data, same.data);  // r == 1: untouched
}

TEST(AugmentResize, ShrinksWithAreaForEvaluationAndLinearForTraining) {
  // Columns 0,0,90,0,0,90 shrunk 3x: area averages each triple (30); linear samples columns 1 and 4 (0).
  cv::Mat img(3, 6, CV_8UC3, cv::Scalar::all(0));
  img.col(2).setTo(cv::Scalar::all(90)), img.col(5).setTo(cv::Scalar::all(90));
  const cv::Mat area = resize_long_side(img, 2, false), linear = resize_long_side(img, 2, true);
  ASSERT_EQ(area.size(), cv::Size(2, 1));
  EXPECT_EQ(area.at<cv::Vec3b>(0, 0), cv::Vec3b(30, 30, 30));
  EXPECT_EQ(linear.at<cv::Vec3b>(0, 1), cv::Vec3b(0, 0, 0));
}

TEST(AugmentResize, SampleLabelsScaleWithTheImage) {
  Sample s = solid(30, 7, {1, 2, 3});
  s.boxes = {{2, 3, 1, 30, 7}};
  s.segments = {{{3, 1}, {30, 7}}};
  const Sample r = resize_sample(s, 64, true);  // 30x7 -> 64x15: x * 64/30, y * 15/7
  ASSERT_EQ(r.image.size(), cv::Size(64, 15));
  EXPECT_EQ(r.boxes[0].cls, 2);
  expect_box(r.boxes[0], 6.4, 15.0 / 7, 64, 15);
  EXPECT_NEAR(r.segments[0][0].x, 6.4, 1e-4);
  EXPECT_NEAR(r.segments[0][0].y, 15.0 / 7, 1e-4);
}

TEST(Letterbox, WideImageIntoSquareWithoutAutoPadsTopAndBottom) {
  Sample s = solid(100, 50, {10, 20, 30});
  s.boxes = {{0, 10, 5, 60, 45}};
  LetterboxOptions o;
  o.auto_pad = false;
  const Letterbox lb = letterbox(s.image, 64, 64, o);  // r = 0.64: 64x32 content, 32 rows of padding
  ASSERT_EQ(lb.image.size(), cv::Size(64, 64));
  EXPECT_DOUBLE_EQ(lb.ratio.x, 0.64);
  EXPECT_DOUBLE_EQ(lb.ratio.y, 0.64);
  EXPECT_DOUBLE_EQ(lb.pad.x, 0);
  EXPECT_DOUBLE_EQ(lb.pad.y, 16);
  EXPECT_EQ(lb.image.at<cv::Vec3b>(15, 30), kGrey);
  EXPECT_EQ(lb.image.at<cv::Vec3b>(16, 30), cv::Vec3b(10, 20, 30));
  EXPECT_EQ(lb.image.at<cv::Vec3b>(47, 30), cv::Vec3b(10, 20, 30));
  EXPECT_EQ(lb.image.at<cv::Vec3b>(48, 30), kGrey);
  letterbox_labels(s, lb);
  expect_box(s.boxes[0], 6.4, 5 * 0.64 + 16, 38.4, 45 * 0.64 + 16);
}

TEST(Letterbox, AutoPadsOnlyToTheNextStrideMultiple) {
  // 100x50 -> 64x32 needs no padding at all: 32 is a multiple of 32.
  EXPECT_EQ(letterbox(cv::Mat(50, 100, CV_8UC3), 64, 64).image.size(), cv::Size(64, 32));
  // 1000x510 at r 0.64: 640x326 (326.4), 314 rows short, 314 mod 32 = 26 -> 13 + 13 -> 352 rows.
  Letterbox lb = letterbox(cv::Mat(510, 1000, CV_8UC3, cv::Scalar::all(0)), 640, 640);
  EXPECT_EQ(lb.image.size(), cv::Size(640, 352));
  EXPECT_DOUBLE_EQ(lb.pad.y, 13);
  // 1000x520: 332.8 -> 333 rows, 307 mod 32 = 19 -> 9.5: round(9.4) = 9 above, round(9.6) = 10 below.
  lb = letterbox(cv::Mat(520, 1000, CV_8UC3, cv::Scalar::all(0)), 640, 640);
  EXPECT_EQ(lb.image.size(), cv::Size(640, 352));
  EXPECT_DOUBLE_EQ(lb.pad.y, 9.5);
  EXPECT_EQ(lb.image.at<cv::Vec3b>(8, 0), kGrey);
  EXPECT_EQ(lb.image.at<cv::Vec3b>(9, 0), cv::Vec3b(0, 0, 0));
  EXPECT_EQ(lb.image.at<cv::Vec3b>(341, 0), cv::Vec3b(0, 0, 0));
  EXPECT_EQ(lb.image.at<cv::Vec3b>(342, 0), kGrey);
}

// A 3000 x 1 image at 64: r = 64 / 3000 rounds the short side to 0 px; it keeps one row (detect runs such
// images, which only training's checks refuse): 64 x 1 content, 31 rows short -> 32 rows with auto padding
// (15 above, 16 below), 63 rows of padding without.
TEST(Letterbox, ThinImageKeepsOnePixel) {
  Letterbox lb = letterbox(cv::Mat(1, 3000, CV_8UC3, cv::Scalar::all(0)), 64, 64);
  EXPECT_EQ(lb.image.size(), cv::Size(64, 32));
  EXPECT_EQ(lb.image.at<cv::Vec3b>(15, 0), cv::Vec3b(0, 0, 0));
  EXPECT_EQ(lb.image.at<cv::Vec3b>(14, 0), kGrey);
  EXPECT_EQ(lb.image.at<cv::Vec3b>(16, 0), kGrey);
  LetterboxOptions square;
  square.auto_pad = false;
  EXPECT_EQ(letterbox(cv::Mat(3000, 1, CV_8UC3), 64, 64, square).image.size(), cv::Size(64, 64));
}

TEST(Letterbox, ScaleFillStretchesAndNoScaleUpKeepsSmallImages) {
  LetterboxOptions fill;
  fill.auto_pad = false, fill.scale_fill = true;
  Letterbox lb = letterbox(cv::Mat(50, 100, CV_8UC3), 64, 64, fill);
  EXPECT_EQ(lb.image.size(), cv::Size(64, 64));
  EXPECT_DOUBLE_EQ(lb.ratio.x, 0.64);
  EXPECT_DOUBLE_EQ(lb.ratio.y, 1.28);
  EXPECT_DOUBLE_EQ(lb.pad.y, 0);

  LetterboxOptions keep;
  keep.auto_pad = false, keep.scale_up = false;
  lb = letterbox(cv::Mat(25, 50, CV_8UC3, cv::Scalar::all(0)), 64, 64, keep);  // pads 14 and 39
  EXPECT_DOUBLE_EQ(lb.ratio.x, 1);
  EXPECT_DOUBLE_EQ(lb.pad.x, 7);
  EXPECT_DOUBLE_EQ(lb.pad.y, 19.5);
  EXPECT_EQ(lb.image.at<cv::Vec3b>(18, 7), kGrey);
  EXPECT_EQ(lb.image.at<cv::Vec3b>(19, 7), cv::Vec3b(0, 0, 0));
  EXPECT_EQ(lb.image.at<cv::Vec3b>(43, 56), cv::Vec3b(0, 0, 0));
  EXPECT_EQ(lb.image.at<cv::Vec3b>(44, 56), kGrey);
  EXPECT_EQ(lb.image.at<cv::Vec3b>(30, 6), kGrey);
  EXPECT_EQ(lb.image.at<cv::Vec3b>(30, 57), kGrey);
}

// ---- colour -----------------------------------------------------------------------------------------

TEST(Hsv, ZeroGainsLeaveImageAndGeneratorAlone) {
  cv::Mat img(4, 4, CV_8UC3, cv::Scalar(12, 200, 77));
  const cv::Mat before = img.clone();
  std::mt19937 rng(1), untouched(1);
  augment_hsv(img, 0, 0, 0, rng);
  EXPECT_EQ(cv::norm(img, before, cv::NORM_INF), 0);
  EXPECT_EQ(rng, untouched);
}

// YOLOv7's augment_hsv has no zero-gain shortcut: the image is OpenCV's 8-bit BGR -> HSV -> BGR round trip
// of itself, which moves some pixels of a noisy image (YOLOv5's leaves it alone, as above).
TEST(Hsv, Yolov7RoundTripsEvenWithZeroGains) {
  cv::Mat noise(32, 32, CV_8UC3);
  cv::RNG(5).fill(noise, cv::RNG::UNIFORM, 0, 256);
  cv::Mat hsv, expected;
  cv::cvtColor(noise, hsv, cv::COLOR_BGR2HSV);
  cv::cvtColor(hsv, expected, cv::COLOR_HSV2BGR);
  cv::Mat img = noise.clone();
  std::mt19937 rng(1);
  augment_hsv(img, 0, 0, 0, rng, Dialect::yolov7);
  EXPECT_EQ(cv::norm(img, expected, cv::NORM_INF), 0);
  EXPECT_GT(cv::norm(img, noise, cv::NORM_INF), 0);
  cv::Mat v5 = noise.clone();
  augment_hsv(v5, 0, 0, 0, rng, Dialect::yolov5);
  EXPECT_EQ(cv::norm(v5, noise, cv::NORM_INF), 0);
}

TEST(Hsv, HueWrapsAt180AndSaturationValueClip) {
  // Pure blue is H 120 (240 deg / 2), S 255, V 255.
  cv::Mat img(2, 2, CV_8UC3, cv::Scalar(255, 0, 0));
  apply_hsv_gains(img, {1.6, 1, 1});  // 192 mod 180 = 12 (24 deg): R 255, G 255 * 24/60 = 102, B 0
  const cv::Vec3b wrapped = img.at<cv::Vec3b>(1, 1);
  EXPECT_EQ(wrapped[0], 0);
  EXPECT_NEAR(wrapped[1], 102, 1);
  EXPECT_EQ(wrapped[2], 255);
  img.setTo(cv::Scalar(255, 0, 0));
  apply_hsv_gains(img, {2.2, 1, 1});  // 264 mod 180 = 84 (168 deg): G 255, B 255 * 0.8 = 204, R 0
  EXPECT_NEAR(img.at<cv::Vec3b>(0, 0)[0], 204, 1);
  EXPECT_EQ(img.at<cv::Vec3b>(0, 0)[1], 255);
  EXPECT_EQ(img.at<cv::Vec3b>(0, 0)[2], 0);

  img.setTo(cv::Scalar(255, 0, 0));
  apply_hsv_gains(img, {1, 0.5, 1});  // S 127 (127.5 truncated): G = R = 255 * (1 - 127/255) = 128
  EXPECT_EQ(img.at<cv::Vec3b>(0, 0)[0], 255);
  EXPECT_NEAR(img.at<cv::Vec3b>(0, 0)[1], 128, 1);
  EXPECT_NEAR(img.at<cv::Vec3b>(0, 0)[2], 128, 1);

  img.setTo(cv::Scalar(100, 0, 0));
  apply_hsv_gains(img, {1, 1, 2});  // V 100 -> 200
  EXPECT_EQ(img.at<cv::Vec3b>(0, 0), cv::Vec3b(200, 0, 0));
  apply_hsv_gains(img, {1, 1, 2});  // V 200 -> 400 clipped to 255
  EXPECT_EQ(img.at<cv::Vec3b>(0, 0), cv::Vec3b(255, 0, 0));
}

TEST(Hsv, EqualsOpenCvsLutPipelineOnNoise) {
  // The reference: upstream's steps in OpenCV (cvtColor, cv::LUT with numpy-style tables, cvtColor).
  Sample base = solid(257, 131, {0, 0, 0});
  cv::randu(base.image, 0, 256);
  for (const cv::Vec3d& gains : {cv::Vec3d(1.013, 0.42, 1.37), cv::Vec3d(0.987, 1.69, 0.61), cv::Vec3d(1.9, 1, 1)}) {
    cv::Mat lut(1, 256, CV_8UC3);
    for (int x = 0; x < 256; ++x) {
      const double hue = std::fmod(x * gains[0], 180.0);
      lut.at<cv::Vec3b>(x) = cv::Vec3b(uint8_t(hue), uint8_t(std::min(x * gains[1], 255.0)), uint8_t(std::min(x * gains[2], 255.0)));
    }
    cv::Mat expected;
    cv::cvtColor(base.image, expected, cv::COLOR_BGR2HSV);
    cv::LUT(expected, lut, expected);
    cv::cvtColor(expected, expected, cv::COLOR_HSV2BGR);
    cv::Mat got = base.image.clone();
    apply_hsv_gains(got, gains);
    EXPECT_EQ(cv::norm(got, expected, cv::NORM_INF), 0) << gains;
  }
}

TEST(Hsv, RandomGainsAreDeterministicPerSeed) {
  const cv::Mat base(8, 8, CV_8UC3, cv::Scalar(40, 90, 160));
  cv::Mat a = base.clone(), b = base.clone(), c = base.clone();
  std::mt19937 ra(5), rb(5), rc(6);
  augment_hsv(a, 0.015, 0.7, 0.4, ra), augment_hsv(b, 0.015, 0.7, 0.4, rb), augment_hsv(c, 0.015, 0.7, 0.4, rc);
  EXPECT_EQ(cv::norm(a, b, cv::NORM_INF), 0);
  EXPECT_GT(cv::norm(a, c, cv::NORM_INF), 0);
  EXPECT_GT(cv::norm(a, base, cv::NORM_INF), 0);
}

// ---- perspective ------------------------------------------------------------------------------------

// Warps a 100x100 sample holding `boxes` with `params` into the same size.
Sample warped(const PerspectiveParams& params, std::vector<Box> boxes, std::vector<Polygon> polygons = {}) {
  Sample s = solid(100, 100, {0, 0, 0});
  s.boxes = std::move(boxes), s.segments = std::move(polygons);
  apply_perspective(s, params, {100, 100});
  return s;
}

TEST(Perspective, ZeroGainsAreTheIdentity) {
  AugmentOptions o;
  o.degrees = o.translate = o.scale = o.shear = o.perspective = 0;
  Sample s = solid(100, 80, {0, 0, 0});
  cv::randu(s.image, 0, 255);
  const cv::Mat before = s.image.clone();
  s.boxes = {{1, 10, 20, 90, 60}, {2, 0, 0, 100, 80}};
  std::mt19937 rng(0);
  random_perspective(s, o, {0, 0}, rng);
  EXPECT_EQ(cv::norm(s.image, before, cv::NORM_INF), 0);
  ASSERT_EQ(s.boxes.size(), 2u);
  expect_box(s.boxes[0], 10, 20, 90, 60);
  expect_box(s.boxes[1], 0, 0, 100, 80);
  EXPECT_TRUE(cv::norm(cv::Mat(perspective_matrix({}, {100, 80}, {100, 80}) - cv::Matx33d::eye())) < 1e-12);
}

TEST(Perspective, NegativeBorderCropsAroundTheCentre) {
  AugmentOptions o;
  o.degrees = o.translate = o.scale = o.shear = o.perspective = 0;
  Sample s = solid(100, 80, {0, 0, 0});
  s.image.at<cv::Vec3b>(30, 40) = cv::Vec3b(1, 2, 3);
  s.boxes = {{0, 30, 30, 60, 50}};
  std::mt19937 rng(0);
  random_perspective(s, o, {-25, -20}, rng);  // 50x40 out: x - 25, y - 20
  ASSERT_EQ(s.image.size(), cv::Size(50, 40));
  EXPECT_EQ(s.image.at<cv::Vec3b>(10, 15), cv::Vec3b(1, 2, 3));
  ASSERT_EQ(s.boxes.size(), 1u);
  expect_box(s.boxes[0], 5, 10, 35, 30);
}

TEST(Perspective, ScaleHalfAboutTheCentre) {
  PerspectiveParams p;
  p.scale = 0.5;  // x -> 50 + (x - 50) / 2
  Sample s = warped(p, {{0, 10, 20, 90, 60}});
  expect_box(s.boxes[0], 30, 35, 70, 55);
  EXPECT_EQ(s.image.at<cv::Vec3b>(0, 0), kGrey);  // comes from (-50, -50): outside
  EXPECT_EQ(s.image.at<cv::Vec3b>(50, 50), cv::Vec3b(0, 0, 0));
}

TEST(Perspective, PaintedInputGivesTheSameResultAsTheWholeImage) {
  Sample whole = solid(300, 200, {0, 0, 0});
  cv::randu(whole.image, 0, 255);
  whole.boxes = {{1, 100, 60, 180, 140}, {2, 10, 10, 40, 30}};
  PerspectiveParams zoom, turn, projective;
  zoom.scale = 1.37, zoom.translate_x = 0.43, zoom.translate_y = 0.58;
  turn.scale = 1.2, turn.degrees = 17, turn.shear_x_degrees = 3, turn.translate_x = 0.55;
  projective.scale = 0.9, projective.perspective_x = 2e-4;
  for (const PerspectiveParams& p : {zoom, turn, projective}) {
    Sample expected = whole;
    apply_perspective(expected, p, {150, 100});
    Sample painted{cv::Mat(), whole.boxes, {}};
    int64_t area = 0;
    apply_perspective_painted(
        painted, whole.image.size(),
        [&](cv::Rect rect, cv::Mat& pixels) {
          area += rect.area();
          whole.image(rect).copyTo(pixels);
        },
        p, {150, 100});
    EXPECT_EQ(cv::norm(painted.image, expected.image, cv::NORM_INF), 0) << "degrees " << p.degrees;
    ASSERT_EQ(painted.boxes.size(), expected.boxes.size());
    for (size_t i = 0; i < painted.boxes.size(); ++i)
      expect_box(painted.boxes[i], expected.boxes[i].x1, expected.boxes[i].y1, expected.boxes[i].x2, expected.boxes[i].y2);
    if (p.perspective_x == 0) {
      EXPECT_LT(area, whole.image.size().area()) << "zoomed in: reads less than the input";
    }
  }
  const auto nothing = [](cv::Rect, cv::Mat&) {};
  Sample unpaired{cv::Mat(), {{0, 1, 1, 5, 5}}, {{}, {}}};  // 2 polygons for 1 box
  EXPECT_THROW(apply_perspective_painted(unpaired, {300, 200}, nothing, zoom, {150, 100}), Error);
  Sample fine{cv::Mat(), {{0, 1, 1, 5, 5}}, {}};
  EXPECT_THROW(apply_perspective_painted(fine, {0, 200}, nothing, zoom, {150, 100}), Error);
  EXPECT_THROW(apply_perspective_painted(fine, {300, 200}, nothing, zoom, {0, 100}), Error);
}

TEST(Perspective, NinetyDegreesTurnsCounterClockwise) {
  PerspectiveParams p;
  p.degrees = 90;  // (x, y) -> (y, 100 - x): the left edge goes to the bottom
  Sample s = solid(100, 100, {0, 0, 0});
  s.image(cv::Rect(8, 18, 5, 5)).setTo(cv::Scalar(7, 8, 9));  // around (10, 20)
  s.boxes = {{0, 10, 20, 40, 90}};
  apply_perspective(s, p, {100, 100});
  expect_box(s.boxes[0], 20, 60, 90, 90, 1e-3);
  EXPECT_EQ(s.image.at<cv::Vec3b>(90, 20), cv::Vec3b(7, 8, 9));  // row 100 - 10, column 20
}

TEST(Perspective, TranslationShearAndPerspectiveByHand) {
  PerspectiveParams t;
  t.translate_x = 0.6, t.translate_y = 0.3;  // x + 10, y - 20
  expect_box(warped(t, {{0, 10, 30, 50, 70}}).boxes[0], 20, 10, 60, 50);

  PerspectiveParams sh;
  sh.shear_x_degrees = 45;  // x -> x + (y - 50): corners of (40, 40, 60, 60) reach x 30 and 70
  expect_box(warped(sh, {{0, 40, 40, 60, 60}}).boxes[0], 30, 40, 70, 60, 1e-3);

  // P[2][0] = 0.001: about the centre, (x, y) -> (x, y) / (1 + 0.001 x); corners x 10 and 30 divide
  // by 1.01 and 1.03.
  PerspectiveParams pp;
  pp.perspective_x = 0.001;
  expect_box(warped(pp, {{0, 60, 40, 80, 60}}).boxes[0], 50 + 10 / 1.01, 50 - 10 / 1.01, 50 + 30 / 1.03,
             50 + 10 / 1.01, 1e-3);
}

TEST(Perspective, ShearAppliesAfterRotation) {
  // M = S * R about the centre: R (X, Y) -> (Y, -X), then S (x, y) -> (x + y, y). Corners of
  // (0, 0, 10, 10) go to (0, 0), (0, -10), (10, 0), (-10, -10). Rotating after shearing would give
  // x 0..10, y -20..0 instead.
  PerspectiveParams p;
  p.degrees = 90, p.shear_x_degrees = 45;
  expect_box(warped(p, {{0, 50, 50, 60, 60}}).boxes[0], 40, 40, 60, 50, 1e-3);
}

TEST(Perspective, BoxesAreClippedAndFilteredByCandidates) {
  PerspectiveParams p;
  p.translate_x = 1.0;  // x + 50
  const Sample s = warped(p, {{1, 40, 10, 70, 50}, {2, 55, 10, 95, 50}});
  ASSERT_EQ(s.boxes.size(), 1u);  // the second leaves the image entirely
  EXPECT_EQ(s.boxes[0].cls, 1);
  expect_box(s.boxes[0], 90, 10, 100, 50);
}

TEST(Perspective, PolygonsGiveTightBoxesAndALowerAreaThreshold) {
  PerspectiveParams rot;
  rot.degrees = 45;  // triangle (-30,-30), (30,-30), (-30,30) about the centre -> x -42.4..0, y -42.4..42.4
  const Sample tri = warped(rot, {{0, 20, 20, 80, 80}}, {{{20, 20}, {80, 20}, {20, 80}}});
  const double d = 30 * std::sqrt(2.0);
  expect_box(tri.boxes[0], 50 - d, 50 - d, 50, 50 + d, 1e-3);
  EXPECT_EQ(tri.segments[0].size(), 1000u);  // resampled, as upstream

  PerspectiveParams shift;
  shift.translate_x = 0.13;  // x - 37: (0, 0, 40, 40) keeps a 3x40 sliver, 7.5% of its area
  EXPECT_TRUE(warped(shift, {{0, 0, 0, 40, 40}}).boxes.empty());  // box threshold 0.1
  const Sample kept = warped(shift, {{0, 0, 0, 40, 40}}, {square(0, 0, 40, 40)});  // polygon threshold 0.01
  ASSERT_EQ(kept.boxes.size(), 1u);
  EXPECT_GE(kept.boxes[0].x1, 0);
  EXPECT_LT(kept.boxes[0].x1, 0.2);
  expect_box(kept.boxes[0], kept.boxes[0].x1, 0, 3, 40);
  // Empty polygons do not count: boxes warp by their corners and the polygons are dropped.
  const Sample empty = warped(shift, {{0, 0, 0, 40, 40}, {1, 50, 0, 90, 40}}, {Polygon{}, Polygon{}});
  ASSERT_EQ(empty.boxes.size(), 1u);
  expect_box(empty.boxes[0], 13, 0, 53, 40);
  EXPECT_TRUE(empty.segments.empty());
}

TEST(Perspective, RandomDrawsStayInTheirRanges) {
  AugmentOptions o;
  o.degrees = 10, o.shear = 5, o.perspective = 0.001, o.scale = 0.5, o.translate = 0.1;
  std::mt19937 rng(9);
  for (int i = 0; i < 200; ++i) {
    const PerspectiveParams v5 = draw_perspective(o, rng, Dialect::yolov5);
    const PerspectiveParams v7 = draw_perspective(o, rng, Dialect::yolov7);
    EXPECT_TRUE(v5.scale >= 0.5 && v5.scale <= 1.5);
    EXPECT_TRUE(v7.scale >= 0.5 && v7.scale <= 1.6);
    EXPECT_TRUE(std::abs(v5.degrees) <= 10 && std::abs(v5.shear_y_degrees) <= 5);
    EXPECT_TRUE(std::abs(v5.perspective_x) <= 0.001 && std::abs(v5.translate_x - 0.5) <= 0.1);
  }
}

// YOLOv7's zoom range U(1 - scale, 1.1 + scale) closes at scale -0.05: every draw zooms by exactly 1.05.
TEST(Perspective, Yolov7ScaleAtItsLowestZoomsByAConstant) {
  AugmentOptions o;
  o.scale = -0.05;
  std::mt19937 rng(3);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(draw_perspective(o, rng, Dialect::yolov7).scale, 1.05);
}

TEST(PerspectiveBoxCandidates, AcceptAndRejectByHand) {
  const Box ten{0, 0, 0, 10, 10}, hundred{0, 0, 0, 100, 100};
  EXPECT_TRUE(box_candidate(ten, ten));
  EXPECT_FALSE(box_candidate(ten, Box{0, 0, 0, 2, 10}));                 // width 2 is not > 2
  EXPECT_FALSE(box_candidate(hundred, Box{0, 0, 0, 10, 10}));            // 1% of the area
  EXPECT_TRUE(box_candidate(hundred, Box{0, 0, 0, 40, 30}));             // 12%
  const Box long_thin{0, 0, 0, 300, 3};
  EXPECT_FALSE(box_candidate(long_thin, Box{0, 0, 0, 300, 2.5f}));       // aspect 120
  EXPECT_TRUE(box_candidate(long_thin, Box{0, 0, 0, 250, 2.6f}));        // aspect 96
  CandidateThresholds v7;
  v7.ar_thr = 20;
  EXPECT_FALSE(box_candidate(long_thin, Box{0, 0, 0, 250, 2.6f}, v7));
}

// ---- flips, mixup, copy-paste -----------------------------------------------------------------------

TEST(Flip, MirrorsImageBoxesAndPolygons) {
  Sample s = solid(10, 6, {0, 0, 0});
  s.image.at<cv::Vec3b>(0, 0) = cv::Vec3b(9, 9, 9);
  s.boxes = {{1, 1, 2, 4, 5}};
  s.segments = {{{1, 2}, {4, 5}}};
  Sample lr = s, ud = s;
  lr.image = s.image.clone(), ud.image = s.image.clone();
  flip_lr(lr);
  flip_ud(ud);
  expect_box(lr.boxes[0], 6, 2, 9, 5);
  expect_box(ud.boxes[0], 1, 1, 4, 4);
  EXPECT_EQ(lr.segments[0][0], cv::Point2f(9, 2));
  EXPECT_EQ(ud.segments[0][0], cv::Point2f(1, 4));
  EXPECT_EQ(lr.image.at<cv::Vec3b>(0, 9), cv::Vec3b(9, 9, 9));
  EXPECT_EQ(ud.image.at<cv::Vec3b>(5, 0), cv::Vec3b(9, 9, 9));
}

TEST(Flip, RandomFlipsFollowTheirProbabilitiesAndAlwaysDrawTwice) {
  AugmentOptions o;
  o.fliplr = 1, o.flipud = 0;
  Sample s = solid(10, 6, {0, 0, 0});
  s.boxes = {{0, 1, 2, 4, 5}};
  std::mt19937 rng(3), expected(3);
  random_flips(s, o, rng);
  expect_box(s.boxes[0], 6, 2, 9, 5);
  expected.discard(4);  // two random() draws of two words each
  EXPECT_EQ(rng, expected);
  o.fliplr = 0, o.flipud = 1;
  random_flips(s, o, rng);
  expect_box(s.boxes[0], 6, 1, 9, 4);
}

TEST(Mixup, BlendsWithTruncationAndConcatenatesLabels) {
  Sample a = solid(3, 2, {100, 255, 0}), b = solid(3, 2, {201, 0, 0});
  a.boxes = {{1, 0, 0, 1, 1}}, a.segments = {square(0, 0, 1, 1)};
  b.boxes = {{2, 1, 1, 2, 2}}, b.segments = {square(1, 1, 2, 2)};
  Sample m = a;
  mixup(m, b, 0.3);  // 100 * 0.3 + 201 * 0.7 = 170.7 -> 170; 255 * 0.3 = 76.5 -> 76
  EXPECT_EQ(m.image.at<cv::Vec3b>(1, 2), cv::Vec3b(170, 76, 0));
  ASSERT_EQ(m.boxes.size(), 2u);
  EXPECT_EQ(m.boxes[1].cls, 2);
  EXPECT_EQ(m.segments.size(), 2u);
  b.segments.clear();
  m = a;
  mixup(m, b, 0.5);
  EXPECT_EQ(m.image.at<cv::Vec3b>(0, 0), cv::Vec3b(150, 127, 0));
  EXPECT_EQ(m.boxes.size(), 2u);
  EXPECT_TRUE(m.segments.empty());  // one side had none
  Sample small = solid(2, 2, {0, 0, 0});
  EXPECT_THROW(mixup(m, small, 0.5), Error);
}

TEST(Mixup, RandomRatioIsNearHalfForAlpha32) {
  Sample a = solid(4, 4, {0, 0, 0});
  const Sample b = solid(4, 4, {200, 200, 200});
  std::mt19937 rng(11);
  mixup(a, b, rng, 32.0);  // 200 * (1 - r), r ~ Beta(32, 32): sd 0.062
  EXPECT_NEAR(a.image.at<cv::Vec3b>(0, 0)[0], 100, 40);
}

TEST(CopyPaste, PastesMirroredInstanceWhereItHidesNothing) {
  Sample s = solid(100, 60, {50, 50, 50});
  s.image(cv::Rect(10, 10, 21, 21)).setTo(cv::Scalar(0, 0, 255));
  s.boxes = {{3, 10, 10, 30, 30}};
  s.segments = {square(10, 10, 30, 30)};
  std::mt19937 rng(0);
  copy_paste(s, 1.0, rng);
  ASSERT_EQ(s.boxes.size(), 2u);
  EXPECT_EQ(s.boxes[1].cls, 3);
  expect_box(s.boxes[1], 70, 10, 90, 30);
  ASSERT_EQ(s.segments.size(), 2u);
  EXPECT_EQ(s.segments[1][0], cv::Point2f(90, 10));
  EXPECT_EQ(s.image.at<cv::Vec3b>(20, 80), cv::Vec3b(0, 0, 255));
  EXPECT_EQ(s.image.at<cv::Vec3b>(20, 73), cv::Vec3b(0, 0, 255));
  EXPECT_EQ(s.image.at<cv::Vec3b>(20, 95), cv::Vec3b(50, 50, 50));
  EXPECT_EQ(s.image.at<cv::Vec3b>(20, 60), cv::Vec3b(50, 50, 50));
  EXPECT_EQ(s.image.at<cv::Vec3b>(5, 80), cv::Vec3b(50, 50, 50));
}

TEST(CopyPaste, SkipsInstancesThatWouldCoverABoxAndRoundsHalfToEven) {
  Sample centred = solid(100, 60, {50, 50, 50});
  centred.boxes = {{0, 40, 10, 60, 30}};  // its mirror is itself: IoA 1
  centred.segments = {square(40, 10, 60, 30)};
  const cv::Mat before = centred.image.clone();
  std::mt19937 rng(0);
  copy_paste(centred, 1.0, rng);
  EXPECT_EQ(centred.boxes.size(), 1u);
  EXPECT_EQ(cv::norm(centred.image, before, cv::NORM_INF), 0);

  Sample five = solid(100, 60, {50, 50, 50});  // five instances on the left, mirrors all free
  for (int i = 0; i < 5; ++i) {
    five.boxes.push_back(Box{0, 5, 10.0f * i + 1, 10, 10.0f * i + 6});
    five.segments.push_back(square(5, 10.0f * i + 1, 10, 10.0f * i + 6));
  }
  copy_paste(five, 0.5, rng);  // round(2.5) = 2 in Python
  EXPECT_EQ(five.boxes.size(), 7u);
  EXPECT_EQ(five.segments.size(), 7u);
}

TEST(CopyPaste, BoxIoaIsIntersectionOverTheOtherBox) {
  EXPECT_NEAR(box_ioa(Box{0, 0, 0, 10, 10}, Box{0, 5, 5, 15, 15}), 0.25, 1e-6);
  EXPECT_NEAR(box_ioa(Box{0, 0, 0, 10, 10}, Box{0, 2, 2, 4, 4}), 1.0, 1e-6);
  EXPECT_EQ(box_ioa(Box{0, 0, 0, 10, 10}, Box{0, 20, 20, 30, 30}), 0);
}

TEST(AugmentChecks, BadSamplesAreRejected) {
  Sample s = solid(10, 10, {0, 0, 0});
  s.boxes = {{0, 1, 1, 5, 5}, {0, 2, 2, 6, 6}};
  s.segments = {square(1, 1, 5, 5)};  // one polygon for two boxes
  EXPECT_THROW(flip_lr(s), Error);
  Sample gray{cv::Mat(4, 4, CV_8UC1), {}, {}};
  EXPECT_THROW(flip_ud(gray), Error);
}

}  // namespace
}  // namespace kestrel::data
