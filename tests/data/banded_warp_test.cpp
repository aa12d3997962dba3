// The banded warp against OpenCV's own cv::warpAffine (the independent reference): equal pixels for
// many transforms and band heights, painted rectangles inside the input, bad arguments rejected.
#include "kestrel/data/banded_warp.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include <opencv2/imgproc.hpp>

#include "kestrel/core/error.h"

namespace kestrel::data {
namespace {

cv::Mat noise_image(int w, int h, uint64 seed) {
  cv::Mat image(h, w, CV_8UC3);
  cv::RNG(seed).fill(image, cv::RNG::UNIFORM, 0, 256);
  return image;
}

// An output -> input map from a scale, a rotation, a shear and a translation.
cv::Matx23d inverse_map(double scale, double degrees, double shear, double tx, double ty) {
  const double a = degrees * CV_PI / 180, c = std::cos(a) / scale, s = std::sin(a) / scale;
  return cv::Matx23d(c, -s + shear, tx, s, c, ty);
}

struct Painted {
  cv::Mat image;
  int64_t area = 0;
  bool inside = true;
};

Painted warp_painted(const cv::Mat& input, const cv::Matx23d& inverse, cv::Size output, int band_rows) {
  Painted result;
  const cv::Rect whole(0, 0, input.cols, input.rows);
  result.image = warp_affine_in_bands(
      inverse, input.size(), output,
      [&](cv::Rect rect, cv::Mat& pixels) {
        result.area += rect.area();
        result.inside = result.inside && (rect & whole) == rect && !rect.empty();
        input(rect).copyTo(pixels);
      },
      114, band_rows);
  return result;
}

cv::Mat warp_reference(const cv::Mat& input, const cv::Matx23d& inverse, cv::Size output) {
  cv::Mat out;
  cv::warpAffine(input, out, cv::Mat(inverse), output, cv::INTER_LINEAR | cv::WARP_INVERSE_MAP, cv::BORDER_CONSTANT,
                 cv::Scalar::all(114));
  return out;
}

TEST(BandedWarp, EqualsWarpAffineForManyTransformsAndBands) {
  const cv::Mat input = noise_image(301, 203, 1);
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> scale(0.3, 2.5), degrees(-180, 180), shear(-0.3, 0.3), shift(-150, 350);
  for (int i = 0; i < 60; ++i) {
    const bool turned = i % 2 == 1;  // even cases: scale and translation only, as hyp.scratch-*
    const cv::Matx23d inverse =
        inverse_map(scale(rng), turned ? degrees(rng) : 0, turned ? shear(rng) : 0, shift(rng), shift(rng));
    const cv::Size output(97 + i * 5, 61 + i * 3);
    const cv::Mat expected = warp_reference(input, inverse, output);
    for (int band_rows : {1, 7, 32, 1000}) {
      const Painted got = warp_painted(input, inverse, output, band_rows);
      EXPECT_TRUE(got.inside) << "case " << i << " bands of " << band_rows;
      ASSERT_EQ(got.image.size(), expected.size());
      EXPECT_EQ(cv::norm(got.image, expected, cv::NORM_INF), 0) << "case " << i << " bands of " << band_rows;
    }
  }
}

TEST(BandedWarp, MatchesThisOpenCvSoTheBandedPathIsUsed) {
  // Where the self-check fails, every warp takes the whole-input path and the tests above would pass
  // without testing the bands: this build must take the banded path.
  EXPECT_TRUE(banded_warp_matches_opencv());
}

TEST(BandedWarp, RotatedBandsThatWouldOverlapPaintTheWholeInputOnce) {
  // 20 degrees at scale 0.5: the bands' bounding boxes overlap and add up to more than the input.
  const cv::Mat input = noise_image(400, 300, 5);
  const cv::Matx23d inverse = inverse_map(0.5, 20, 0, 30, -40);
  int calls = 0;
  const cv::Mat got = warp_affine_in_bands(inverse, input.size(), {200, 150}, [&](cv::Rect rect, cv::Mat& pixels) {
    ++calls;
    EXPECT_EQ(rect, cv::Rect(0, 0, 400, 300));
    input(rect).copyTo(pixels);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(cv::norm(got, warp_reference(input, inverse, {200, 150}), cv::NORM_INF), 0);
}

TEST(BandedWarp, EdgesAndOutsideTheInputAreTheBorderValue) {
  const cv::Mat input = noise_image(64, 48, 2);
  // Half a pixel and a fraction beyond each edge (taps straddle the edge), and wholly outside.
  for (const cv::Matx23d& inverse : {cv::Matx23d(1, 0, -0.47, 0, 1, -0.61), cv::Matx23d(1, 0, 0.53, 0, 1, 0.29),
                                     cv::Matx23d(0.5, 0, -5000, 0, 0.5, 20), cv::Matx23d(-1, 0, 63.3, 0, -1, 47.8)}) {
    const cv::Mat expected = warp_reference(input, inverse, {80, 60});
    EXPECT_EQ(cv::norm(warp_painted(input, inverse, {80, 60}, 16).image, expected, cv::NORM_INF), 0);
  }
  // Wholly outside: nothing painted, all grey.
  const Painted away = warp_painted(input, cv::Matx23d(1, 0, 1000, 0, 1, 0), {40, 30}, 8);
  EXPECT_EQ(away.area, 0);
  EXPECT_EQ(cv::norm(away.image, cv::Mat(30, 40, CV_8UC3, cv::Scalar::all(114)), cv::NORM_INF), 0);
}

TEST(BandedWarp, NearSingularTransformsTakeTheWholeInputPath) {
  // Scale 1e-6: positions far beyond the fixed point's range; OpenCV's own path decides the pixels.
  const cv::Mat input = noise_image(50, 40, 6);
  const cv::Matx23d inverse(1e6, 0, -3e7, 0, 1e6, -2e7);
  int calls = 0;
  const cv::Mat got = warp_affine_in_bands(inverse, input.size(), {30, 20}, [&](cv::Rect rect, cv::Mat& pixels) {
    ++calls;
    input(rect).copyTo(pixels);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(cv::norm(got, warp_reference(input, inverse, {30, 20}), cv::NORM_INF), 0);
}

TEST(BandedWarp, ZoomingInPaintsOnlyWhatItReads) {
  // Output (x, y) reads (100 + x / 2, 100 + y / 2): for x, y in [0, 199.5], taps 100..200, a 101 x 101
  // square of the 400 x 400 input. Each band of 32 output rows reads 17 input rows, one shared with the
  // next band: 7 bands, at most 7 rows painted twice.
  const cv::Mat input = noise_image(400, 400, 4);
  const Painted got = warp_painted(input, cv::Matx23d(0.5, 0, 100, 0, 0.5, 100), {200, 200}, 32);
  EXPECT_GE(got.area, 101 * 101);
  EXPECT_LE(got.area, 101 * (101 + 7));
}

TEST(BandedWarp, BadArgumentsAreErrors) {
  const auto nothing = [](cv::Rect, cv::Mat&) {};
  const cv::Matx23d identity(1, 0, 0, 0, 1, 0);
  EXPECT_THROW(warp_affine_in_bands(identity, {0, 10}, {10, 10}, nothing), Error);
  EXPECT_THROW(warp_affine_in_bands(identity, {10, 10}, {10, 0}, nothing), Error);
  EXPECT_THROW(warp_affine_in_bands(identity, {10, 10}, {10, 10}, nothing, 114, 0), Error);
  EXPECT_THROW(warp_affine_in_bands(identity, {40000, 10}, {10, 10}, nothing), Error);
  EXPECT_THROW(warp_affine_in_bands(identity, {10, 10}, {10, 40000}, nothing), Error);
  EXPECT_THROW(warp_affine_in_bands(cv::Matx23d(1, 0, NAN, 0, 1, 0), {10, 10}, {10, 10}, nothing), Error);
  // A painter that replaces the buffer instead of filling it is caught, not silently ignored.
  const auto reallocating = [](cv::Rect rect, cv::Mat& pixels) {
    pixels = cv::Mat(rect.size(), CV_8UC3, cv::Scalar::all(1));
  };
  EXPECT_THROW(warp_affine_in_bands(identity, {10, 10}, {10, 10}, reallocating), Error);
}

}  // namespace
}  // namespace kestrel::data
