// An affine warp whose input is never materialised whole: the output is produced in bands of rows,
// and for each band a caller-supplied painter fills only the input rectangle that band reads. The
// mosaic uses it so that its 2s x 2s canvas exists only a few rows at a time, in cache, instead of
// being filled and copied in memory (the loader's largest cost on a 2-core machine after HSV).
//
// Same pixels as cv::warpAffine(input, ..., INTER_LINEAR | WARP_INVERSE_MAP, BORDER_CONSTANT, value):
// the sampling positions are OpenCV 4.6's own fixed-point ones (1/1024 pixel rounded to 1/32,
// computed as its warpAffine does), shifted by whole pixels into each band's rectangle, and cv::remap
// interpolates them. A self-check against cv::warpAffine on first use guards other OpenCV versions
// (newer ones compute positions in float): where it fails, every call paints the whole input once and
// uses cv::warpAffine. So do transforms whose bands would together paint more than the whole input
// (rotations, shears: the bands' bounding boxes overlap) and near-singular ones whose positions would
// overflow OpenCV's fixed point.
#pragma once
#include <functional>

#include <opencv2/core.hpp>

namespace kestrel::data {

// Fills every pixel of `pixels` (rect's size, CV_8UC3, a view into a reused buffer that holds stale
// pixels) with the input's pixels inside `rect`, which lies inside the input, without reallocating it.
// It must not call warp_affine_in_bands itself (the buffers are per thread).
using InputPainter = std::function<void(cv::Rect rect, cv::Mat& pixels)>;

// Output pixel (x, y) samples the input at inverse * (x, y, 1) (bilinear; `border` outside the input).
// `band_rows` output rows per band (the last band may be shorter). Sizes must be below 32767 (remap's
// limit); the inverse must be finite.
cv::Mat warp_affine_in_bands(const cv::Matx23d& inverse, cv::Size input, cv::Size output, const InputPainter& paint,
                             int border = 114, int band_rows = 16);

// Whether the banded path gives cv::warpAffine's pixels with this OpenCV (checked once, on a small
// random case); false means warp_affine_in_bands always takes the whole-input path.
bool banded_warp_matches_opencv();

}  // namespace kestrel::data
