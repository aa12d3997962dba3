#include "kestrel/data/banded_warp.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <mutex>
#include <vector>

#include <opencv2/imgproc.hpp>

#include "kestrel/core/error.h"

namespace kestrel::data {
namespace {

// OpenCV's warpAffine fixed point (imgwarp.cpp): positions in 1/1024 pixel, rounded to 1/32 pixel
// (INTER_BITS) for the bilinear weight table.
constexpr int kAbBits = 10, kAbScale = 1 << kAbBits;
constexpr int kInterBits = 5, kInterTab = 1 << kInterBits;
constexpr int kRoundDelta = kAbScale / kInterTab / 2;

// Scratch reused across calls on one thread: the band's maps and its painted input rectangle.
struct BandScratch {
  cv::Mat map_xy;     // [band_rows, width] CV_16SC2: integer input position of each output pixel
  cv::Mat map_alpha;  // [band_rows, width] CV_16UC1: its 1/32-pixel fraction, y * 32 + x
  cv::Mat painted;    // CV_8UC3, at least as large as any rectangle painted so far
};

cv::Mat warp_whole(const cv::Matx23d& inverse, cv::Size input, cv::Size output, const InputPainter& paint, int border) {
  cv::Mat whole(input, CV_8UC3);
  paint(cv::Rect(0, 0, input.width, input.height), whole);
  cv::Mat out;
  cv::warpAffine(whole, out, cv::Mat(inverse), output, cv::INTER_LINEAR | cv::WARP_INVERSE_MAP, cv::BORDER_CONSTANT,
                 cv::Scalar::all(border));
  return out;
}

// OpenCV's rounded position of output pixel (x, y) in 1/32 pixel is a row part plus a column part,
// each non-decreasing or non-increasing in its variable: a band's extreme positions are at its corners.
int row_start(const cv::Matx23d& inverse, int y, int row) {
  return cv::saturate_cast<int>((inverse(row, 1) * y + inverse(row, 2)) * kAbScale) + kRoundDelta;
}

std::vector<cv::Rect> band_rects(const cv::Matx23d& inverse, cv::Size input, cv::Size output, int band_rows,
                                 const std::vector<int>& x_step, const std::vector<int>& y_step) {
  const cv::Rect whole(0, 0, input.width, input.height);
  std::vector<cv::Rect> rects;
  for (int y0 = 0; y0 < output.height; y0 += band_rows) {
    const int last = std::min(y0 + band_rows, output.height) - 1;
    // Positions (sx, sy) at the band's corners; taps reach (sx + 1, sy + 1).
    int x_lo = INT_MAX, y_lo = INT_MAX, x_hi = INT_MIN, y_hi = INT_MIN;
    for (const int y : {y0, last})
      for (const int x : {0, output.width - 1}) {
        const int sx = (row_start(inverse, y, 0) + x_step[size_t(x)]) >> kAbBits;
        const int sy = (row_start(inverse, y, 1) + y_step[size_t(x)]) >> kAbBits;
        x_lo = std::min(x_lo, sx), x_hi = std::max(x_hi, sx), y_lo = std::min(y_lo, sy), y_hi = std::max(y_hi, sy);
      }
    rects.push_back(cv::Rect(cv::Point(x_lo, y_lo), cv::Point(x_hi + 2, y_hi + 2)) & whole);
  }
  return rects;
}

// The banded path proper (see the header); `rects` are the bands' input rectangles, from band_rects.
cv::Mat warp_bands(const cv::Matx23d& inverse, cv::Size input, cv::Size output, const InputPainter& paint, int border,
                   int band_rows, const std::vector<int>& x_step, const std::vector<int>& y_step,
                   const std::vector<cv::Rect>& rects) {
  const int width = output.width;
  thread_local BandScratch scratch;
  scratch.map_xy.create(band_rows, width, CV_16SC2);
  scratch.map_alpha.create(band_rows, width, CV_16UC1);
  const cv::Scalar grey = cv::Scalar::all(border);
  cv::Mat out(output, CV_8UC3);
  for (size_t band_index = 0; band_index < rects.size(); ++band_index) {
    const int y0 = int(band_index) * band_rows, rows = std::min(band_rows, output.height - y0);
    const cv::Rect rect = rects[band_index];
    cv::Mat band = out.rowRange(y0, y0 + rows);
    if (rect.empty()) {  // every tap is outside the input
      band.setTo(grey);
      continue;
    }
    // The maps (warpAffineBlockline), in the rectangle's coordinates: a whole-pixel shift, the
    // fractions unchanged. Positions outside the rectangle are outside the input too (it holds every
    // tap inside); clamping them to just outside (-2, or the size) keeps both of their taps outside.
    for (int r = 0; r < rows; ++r) {
      const int X0 = row_start(inverse, y0 + r, 0), Y0 = row_start(inverse, y0 + r, 1);
      short* xy = scratch.map_xy.ptr<short>(r);
      ushort* alpha = scratch.map_alpha.ptr<ushort>(r);
      for (int x = 0; x < width; ++x) {
        const int X = (X0 + x_step[size_t(x)]) >> (kAbBits - kInterBits);
        const int Y = (Y0 + y_step[size_t(x)]) >> (kAbBits - kInterBits);
        xy[2 * x] = short(std::min(std::max((X >> kInterBits) - rect.x, -2), rect.width));
        xy[2 * x + 1] = short(std::min(std::max((Y >> kInterBits) - rect.y, -2), rect.height));
        alpha[x] = ushort((Y & (kInterTab - 1)) * kInterTab + (X & (kInterTab - 1)));
      }
    }
    if (scratch.painted.cols < rect.width || scratch.painted.rows < rect.height)
      scratch.painted.create(std::max(scratch.painted.rows, rect.height), std::max(scratch.painted.cols, rect.width),
                             CV_8UC3);
    cv::Mat pixels = scratch.painted(cv::Rect(0, 0, rect.width, rect.height));
    const uchar* before = pixels.data;
    paint(rect, pixels);
    if (pixels.data != before || pixels.size() != rect.size() || pixels.type() != CV_8UC3)
      fail("warp_affine_in_bands: the painter must fill the given pixels in place");
    cv::remap(pixels, band, scratch.map_xy.rowRange(0, rows), scratch.map_alpha.rowRange(0, rows), cv::INTER_LINEAR,
              cv::BORDER_CONSTANT, grey);
  }
  return out;
}

cv::Mat warp(const cv::Matx23d& inverse, cv::Size input, cv::Size output, const InputPainter& paint, int border,
             int band_rows, bool banded_allowed) {
  if (input.width <= 0 || input.height <= 0) fail("warp_affine_in_bands: empty input ", input.width, "x", input.height);
  if (output.width <= 0 || output.height <= 0)
    fail("warp_affine_in_bands: empty output ", output.width, "x", output.height);
  if (band_rows < 1) fail("warp_affine_in_bands: band_rows must be >= 1, got ", band_rows);
  for (const cv::Size size : {input, output})
    if (size.width >= SHRT_MAX || size.height >= SHRT_MAX)
      fail("warp_affine_in_bands: ", size.width, "x", size.height, " is too large (remap's limit is 32767)");
  for (int i = 0; i < 6; ++i)
    if (!std::isfinite(inverse.val[i])) fail("warp_affine_in_bands: the transform is not finite");
  // Positions in 1/1024 pixel must fit an int with room to spare (a near-singular transform, e.g. a
  // scale near 0, sends them far out): else OpenCV's own path, whatever it makes of them.
  bool fits = banded_allowed;
  for (const cv::Point2d corner : {cv::Point2d(0, 0), cv::Point2d(output.width, 0), cv::Point2d(0, output.height),
                                   cv::Point2d(output.width, output.height)}) {
    const double u = inverse(0, 0) * corner.x + inverse(0, 1) * corner.y + inverse(0, 2);
    const double v = inverse(1, 0) * corner.x + inverse(1, 1) * corner.y + inverse(1, 2);
    fits = fits && std::abs(u) < (1 << 19) && std::abs(v) < (1 << 19);
  }
  if (!fits) return warp_whole(inverse, input, output, paint, border);
  band_rows = std::min(band_rows, output.height);
  // Per-column steps, as warpAffine's adelta / bdelta (same expression, same rounding).
  std::vector<int> x_step(size_t(output.width), 0), y_step(size_t(output.width), 0);
  for (int x = 0; x < output.width; ++x) {
    x_step[size_t(x)] = cv::saturate_cast<int>(inverse(0, 0) * x * kAbScale);
    y_step[size_t(x)] = cv::saturate_cast<int>(inverse(1, 0) * x * kAbScale);
  }
  const std::vector<cv::Rect> rects = band_rects(inverse, input, output, band_rows, x_step, y_step);
  // Rotated or sheared bands have overlapping bounding boxes: past the whole input's area, painting
  // it once is cheaper.
  int64_t painted = 0;
  for (const cv::Rect& r : rects) painted += r.area();
  if (painted > int64_t(input.area())) return warp_whole(inverse, input, output, paint, border);
  return warp_bands(inverse, input, output, paint, border, band_rows, x_step, y_step, rects);
}

}  // namespace

bool banded_warp_matches_opencv() {
  static const bool matches = [] {
    cv::Mat input(61, 83, CV_8UC3);
    cv::RNG(12345).fill(input, cv::RNG::UNIFORM, 0, 256);
    const auto copy = [&](cv::Rect rect, cv::Mat& pixels) { input(rect).copyTo(pixels); };
    // Zoomed in (bands paint parts), off-centre, fractional offsets; and mirrored.
    for (const cv::Matx23d& inverse : {cv::Matx23d(0.61, 0, 17.3, 0, 0.73, 9.1), cv::Matx23d(-0.8, 0, 70.6, 0, 0.9, -3.4)}) {
      cv::Mat expected;
      cv::warpAffine(input, expected, cv::Mat(inverse), {40, 50}, cv::INTER_LINEAR | cv::WARP_INVERSE_MAP,
                     cv::BORDER_CONSTANT, cv::Scalar::all(114));
      if (cv::norm(warp(inverse, input.size(), {40, 50}, copy, 114, 4, true), expected, cv::NORM_INF) != 0) return false;
    }
    return true;
  }();
  return matches;
}

cv::Mat warp_affine_in_bands(const cv::Matx23d& inverse, cv::Size input, cv::Size output, const InputPainter& paint,
                             int border, int band_rows) {
  return warp(inverse, input, output, paint, border, band_rows, banded_warp_matches_opencv());
}

}  // namespace kestrel::data
