// An affine warp whose input is never materialised whole: the output is produced in bands of rows,
// and for each band a caller-supplied painter fills only the input rectangle that band reads. The
// mosaic uses it so that its 2s x 2s canvas exists only a few rows at a time, in cache, instead of
// being filled and copied in memory (the loader's largest cost on a 2-core machine after HSV).
//
// Same pixels as cv::warpAffine(input, ..., INTER_LINEAR | WARP_INVERSE_MAP, BORDER_CONSTANT, value):
// the sampling positions are OpenCV's own fixed-point ones (1/32 pixel, computed as its warpAffine
// does), shifted by whole pixels into each band's rectangle, and cv::remap interpolates them.
#pragma once
#include <functional>

#include <opencv2/core.hpp>

namespace kestrel::data {

// Fills `pixels` (rect's size, CV_8UC3, possibly a view into a larger buffer) with the input's pixels
// inside `rect`, which always lies inside the input.
using InputPainter = std::function<void(cv::Rect rect, cv::Mat& pixels)>;

// Output pixel (x, y) samples the input at inverse * (x, y, 1) (bilinear; `border` outside the input).
// `band_rows` output rows per band (the last band may be shorter).
cv::Mat warp_affine_in_bands(const cv::Matx23d& inverse, cv::Size input, cv::Size output, const InputPainter& paint,
                             int border = 114, int band_rows = 16);

}  // namespace kestrel::data
