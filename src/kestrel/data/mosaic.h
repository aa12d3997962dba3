// Mosaic augmentation: 4 (YOLOv5 load_mosaic) or 9 (YOLOv7 load_mosaic9) training images on one
// grey canvas, then copy-paste and random perspective crop it to img_size x img_size.
//
// Tiles come already resized with resize_long_side (long side = img_size), boxes and polygons in
// their own pixels. The caller picks them (upstream: the indexed image plus random others; YOLOv5
// shuffles the four, YOLOv7 does not) and passes them in placement order.
#pragma once
#include <array>
#include <random>

#include <opencv2/core.hpp>

#include "kestrel/data/augment.h"
#include "kestrel/data/hyp.h"
#include "kestrel/data/sample.h"

namespace kestrel::data {

// Upstream's mosaic_border: floor(-img_size / 2) on each side, so that the random perspective crops
// the 2s canvas to s (s - 1 for odd sizes, as upstream; sizes are stride multiples in practice).
int mosaic_border(int img_size);

// ---- 4 tiles: top-left, top-right, bottom-left, bottom-right around a centre ----------------------

// int(uniform(s/2, 3s/2)) for y, then for x (upstream's order); returned as (x, y).
cv::Point draw_mosaic4_centre(int img_size, std::mt19937& rng);

// The 2s x 2s canvas (grey 114): tile i's corner nearest the centre sits at the centre, cut by the
// canvas. Boxes and polygons move with their tile and are clipped to [0, 2s]; no filtering.
// Polygons are kept only when every tile with boxes has them.
Sample mosaic4_canvas(const std::array<Sample, 4>& tiles, int img_size, cv::Point centre);

// The same canvas without its pixels: its boxes and polygons, and a painter that fills any rectangle
// of it (grey 114 where no tile lies). Paste-in cuts a few objects out of side mosaics and paints only
// their crops. The painter reads `tiles`, which must outlive it.
struct CanvasParts {
  Sample labels;  // image empty
  cv::Size size;
  InputPainter paint;
};
CanvasParts mosaic4_canvas_parts(const std::array<Sample, 4>& tiles, int img_size, cv::Point centre);

// Canvas at a random centre, copy_paste(options.copy_paste), random_perspective with border
// mosaic_border(s): the result is s x s.
Sample mosaic4(std::array<Sample, 4> tiles, int img_size, const AugmentOptions& options, std::mt19937& rng,
               Dialect dialect = Dialect::yolov5);
Sample mosaic4(std::array<Sample, 4> tiles, int img_size, const AugmentOptions& options, std::mt19937& rng,
               cv::Point centre, Dialect dialect = Dialect::yolov5);

// ---- 9 tiles: centre, top, top-right, right, bottom-right, bottom, bottom-left, left, top-left ----

// int(uniform(0, s)) for y, then for x; returned as (x, y).
cv::Point draw_mosaic9_offset(int img_size, std::mt19937& rng);

// Upstream lays the tiles on a 3s x 3s canvas, the centre tile's top-left at (s, s), each next tile
// against the previous ones, and crops 2s x 2s at `offset`; this returns that crop (grey 114), boxes
// and polygons moved with their tile and clipped to [0, 2s]. Every tile's sides must be <= s.
Sample mosaic9_canvas(const std::array<Sample, 9>& tiles, int img_size, cv::Point offset);

// Canvas at a random offset, copy_paste, random_perspective with border mosaic_border(s): s x s.
Sample mosaic9(std::array<Sample, 9> tiles, int img_size, const AugmentOptions& options, std::mt19937& rng,
               Dialect dialect = Dialect::yolov5);
Sample mosaic9(std::array<Sample, 9> tiles, int img_size, const AugmentOptions& options, std::mt19937& rng,
               cv::Point offset, Dialect dialect = Dialect::yolov5);

}  // namespace kestrel::data
