#include "kestrel/data/banded_warp.h"

#include <algorithm>
#include <climits>
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

}  // namespace

cv::Mat warp_affine_in_bands(const cv::Matx23d& inverse, cv::Size input, cv::Size output, const InputPainter& paint,
                             int border, int band_rows) {
  if (input.width <= 0 || input.height <= 0) fail("warp_affine_in_bands: empty input ", input.width, "x", input.height);
  if (output.width <= 0 || output.height <= 0) fail("warp_affine_in_bands: empty output ", output.width, "x", output.height);
  if (band_rows < 1) fail("warp_affine_in_bands: band_rows must be >= 1, got ", band_rows);
  if (input.width >= SHRT_MAX || input.height >= SHRT_MAX)
    fail("warp_affine_in_bands: input ", input.width, "x", input.height, " is too large (remap's limit is 32767)");
  const int width = output.width;
  // Per-column steps, as warpAffine's adelta / bdelta (same expression, same rounding).
  std::vector<int> x_step(size_t(width), 0), y_step(size_t(width), 0);
  for (int x = 0; x < width; ++x) {
    x_step[size_t(x)] = cv::saturate_cast<int>(inverse(0, 0) * x * kAbScale);
    y_step[size_t(x)] = cv::saturate_cast<int>(inverse(1, 0) * x * kAbScale);
  }
  thread_local BandScratch scratch;
  scratch.map_xy.create(band_rows, width, CV_16SC2);
  scratch.map_alpha.create(band_rows, width, CV_16UC1);
  const cv::Rect whole(0, 0, input.width, input.height);
  const cv::Scalar grey = cv::Scalar::all(border);
  cv::Mat out(output, CV_8UC3);
  // OpenCV's rounded position of output pixel (x, y), in 1/32 pixel: x and y parts add, and each part
  // is non-decreasing or non-increasing in its variable, so a band's extreme positions are at its corners.
  auto row_start = [&](int y, int row) {
    return cv::saturate_cast<int>((inverse(row, 1) * y + inverse(row, 2)) * kAbScale) + kRoundDelta;
  };
  for (int y0 = 0; y0 < output.height; y0 += band_rows) {
    const int rows = std::min(band_rows, output.height - y0);
    // 1. The rectangle of taps: positions (sx, sy) at the band's corners, taps up to (sx + 1, sy + 1).
    int x_lo = INT_MAX, y_lo = INT_MAX, x_hi = INT_MIN, y_hi = INT_MIN;
    for (const int y : {y0, y0 + rows - 1})
      for (const int x : {0, width - 1}) {
        const int sx = (row_start(y, 0) + x_step[size_t(x)]) >> kAbBits;
        const int sy = (row_start(y, 1) + y_step[size_t(x)]) >> kAbBits;
        x_lo = std::min(x_lo, sx), x_hi = std::max(x_hi, sx), y_lo = std::min(y_lo, sy), y_hi = std::max(y_hi, sy);
      }
    cv::Mat band = out.rowRange(y0, y0 + rows);
    const cv::Rect rect = cv::Rect(cv::Point(x_lo, y_lo), cv::Point(x_hi + 2, y_hi + 2)) & whole;
    if (rect.empty()) {  // every tap is outside the input
      band.setTo(grey);
      continue;
    }
    // 2. The maps (warpAffineBlockline), in the rectangle's coordinates: a whole-pixel shift, the
    // fractions unchanged. Positions outside the rectangle are outside the input too (it holds every
    // tap inside); clamping them to just outside (-2, or the size) keeps both of their taps outside.
    for (int r = 0; r < rows; ++r) {
      const int X0 = row_start(y0 + r, 0), Y0 = row_start(y0 + r, 1);
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
    // 3. Paint the rectangle, interpolate.
    if (scratch.painted.cols < rect.width || scratch.painted.rows < rect.height)
      scratch.painted.create(std::max(scratch.painted.rows, rect.height), std::max(scratch.painted.cols, rect.width), CV_8UC3);
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

}  // namespace kestrel::data
