#include "kestrel/data/mosaic.h"

#include <algorithm>
#include <vector>

#include "kestrel/core/error.h"

namespace kestrel::data {

int mosaic_border(int img_size) { return -((img_size + 1) / 2); }  // Python's -s // 2 for s > 0

namespace {

void check_size(int img_size, const char* where) {
  if (img_size <= 0) fail(where, ": image size must be positive, got ", img_size);
}

// Where each tile sits on the mosaic canvas (later tiles over earlier ones, parts outside cut).
struct Layout {
  const Sample* tiles;
  std::vector<cv::Point> origins;  // top-left corner of tile i on the canvas
  cv::Size size;                   // the canvas
};

// The canvas' boxes and polygons, without its image: each tile's moved by its origin and clipped to
// the canvas, as upstream does before random_perspective.
Sample place_labels(const Layout& layout, const char* where) {
  bool polygons = true;  // kept only if every tile with boxes has them: one polygon per box overall
  for (size_t i = 0; i < layout.origins.size(); ++i) {
    check_sample(layout.tiles[i], where);
    if (!layout.tiles[i].boxes.empty() && layout.tiles[i].segments.empty()) polygons = false;
  }
  Sample out;
  for (size_t i = 0; i < layout.origins.size(); ++i) {
    const Sample& tile = layout.tiles[i];
    Sample moved{cv::Mat(), tile.boxes, polygons ? tile.segments : std::vector<Polygon>{}};
    map_labels(moved, {1, 1}, cv::Point2d(layout.origins[i]));
    out.boxes.insert(out.boxes.end(), moved.boxes.begin(), moved.boxes.end());
    out.segments.insert(out.segments.end(), moved.segments.begin(), moved.segments.end());
  }
  auto clip_x = [&](float v) { return std::clamp(v, 0.0f, float(layout.size.width)); };
  auto clip_y = [&](float v) { return std::clamp(v, 0.0f, float(layout.size.height)); };
  for (Box& b : out.boxes) b = Box{b.cls, clip_x(b.x1), clip_y(b.y1), clip_x(b.x2), clip_y(b.y2)};
  for (Polygon& poly : out.segments)
    for (cv::Point2f& p : poly) p = cv::Point2f(clip_x(p.x), clip_y(p.y));
  return out;
}

// Fills `pixels` with the canvas inside `part`: grey 114 where no tile lies.
void paint_tiles(const Layout& layout, cv::Rect part, cv::Mat& pixels) {
  pixels.setTo(cv::Scalar::all(114));
  for (size_t i = 0; i < layout.origins.size(); ++i) {
    const cv::Mat& tile = layout.tiles[i].image;
    const cv::Rect placed = cv::Rect(layout.origins[i], tile.size()) & part;
    if (!placed.empty()) tile(placed - layout.origins[i]).copyTo(pixels(placed - part.tl()));
  }
}

void paint_whole_canvas(const Layout& layout, Sample& canvas) {
  canvas.image.create(layout.size, CV_8UC3);
  paint_tiles(layout, cv::Rect(cv::Point(0, 0), layout.size), canvas.image);
}

Sample whole_canvas(const Layout& layout, const char* where) {
  Sample canvas = place_labels(layout, where);
  paint_whole_canvas(layout, canvas);
  return canvas;
}

// The augmentations both mosaics end with: copy-paste on the 2s canvas, then the perspective crop to
// s. Without copy-paste the canvas is never built whole: the warp has the tiles painted a band at a
// time, only where it reads (banded_warp.h), which saves filling and copying 2s x 2s pixels.
Sample finish(const Layout& layout, int img_size, const AugmentOptions& options, std::mt19937& rng, Dialect dialect,
              const char* where) {
  if (!(options.copy_paste >= 0 && options.copy_paste <= 1))  // checked here: copy_paste runs only with polygons
    fail("copy_paste: probability must be in [0, 1], got ", options.copy_paste);
  const int border = mosaic_border(img_size);
  Sample canvas = place_labels(layout, where);
  if (options.copy_paste > 0 && !canvas.segments.empty()) {  // copy-paste needs every pixel
    paint_whole_canvas(layout, canvas);
    copy_paste(canvas, options.copy_paste, rng);
    random_perspective(canvas, options, cv::Point(border, border), rng, dialect);
    return canvas;
  }
  // copy_paste would draw nothing here: the random stream is the same as on the path above.
  const cv::Size output(layout.size.width + 2 * border, layout.size.height + 2 * border);
  apply_perspective_painted(
      canvas, layout.size, [&](cv::Rect part, cv::Mat& pixels) { paint_tiles(layout, part, pixels); },
      draw_perspective(options, rng, dialect), output, dialect);
  return canvas;
}

}  // namespace

// ---- 4 tiles --------------------------------------------------------------------------------------

cv::Point draw_mosaic4_centre(int img_size, std::mt19937& rng) {
  check_size(img_size, "mosaic4");
  const int border = mosaic_border(img_size);
  const int yc = int(uniform(rng, -border, 2 * img_size + border));
  const int xc = int(uniform(rng, -border, 2 * img_size + border));
  return {xc, yc};
}

namespace {

Layout mosaic4_layout(const std::array<Sample, 4>& tiles, int img_size, cv::Point centre) {
  check_size(img_size, "mosaic4");
  const int s2 = 2 * img_size;
  if (centre.x < 0 || centre.y < 0 || centre.x > s2 || centre.y > s2)
    fail("mosaic4: centre (", centre.x, ", ", centre.y, ") is outside the ", s2, "x", s2, " canvas");
  // Each tile's corner nearest the centre sits on it: top-left, top-right, bottom-left, bottom-right.
  std::vector<cv::Point> origins(4);
  for (size_t i = 0; i < 4; ++i) {
    const cv::Size t = tiles[i].image.size();
    const bool right = i % 2 == 1, bottom = i >= 2;
    origins[i] = cv::Point(right ? centre.x : centre.x - t.width, bottom ? centre.y : centre.y - t.height);
  }
  return Layout{tiles.data(), origins, cv::Size(s2, s2)};
}

}  // namespace

Sample mosaic4_canvas(const std::array<Sample, 4>& tiles, int img_size, cv::Point centre) {
  return whole_canvas(mosaic4_layout(tiles, img_size, centre), "mosaic4");
}

CanvasParts mosaic4_canvas_parts(const std::array<Sample, 4>& tiles, int img_size, cv::Point centre) {
  const Layout layout = mosaic4_layout(tiles, img_size, centre);
  return CanvasParts{place_labels(layout, "mosaic4"), layout.size,
                     [layout](cv::Rect part, cv::Mat& pixels) { paint_tiles(layout, part, pixels); }};
}

Sample mosaic4(std::array<Sample, 4> tiles, int img_size, const AugmentOptions& options, std::mt19937& rng,
               Dialect dialect) {
  const cv::Point centre = draw_mosaic4_centre(img_size, rng);
  return mosaic4(std::move(tiles), img_size, options, rng, centre, dialect);
}

Sample mosaic4(std::array<Sample, 4> tiles, int img_size, const AugmentOptions& options, std::mt19937& rng,
               cv::Point centre, Dialect dialect) {
  return finish(mosaic4_layout(tiles, img_size, centre), img_size, options, rng, dialect, "mosaic4");
}

// ---- 9 tiles --------------------------------------------------------------------------------------

cv::Point draw_mosaic9_offset(int img_size, std::mt19937& rng) {
  check_size(img_size, "mosaic9");
  const int yc = int(uniform(rng, 0, img_size));
  const int xc = int(uniform(rng, 0, img_size));
  return {xc, yc};
}

namespace {

Layout mosaic9_layout(const std::array<Sample, 9>& tiles, int img_size, cv::Point offset) {
  check_size(img_size, "mosaic9");
  const int s = img_size;
  if (offset.x < 0 || offset.y < 0 || offset.x > s || offset.y > s)
    fail("mosaic9: offset (", offset.x, ", ", offset.y, ") is outside [0, ", s, "]");
  for (const Sample& tile : tiles)
    if (tile.image.cols > s || tile.image.rows > s)
      fail("mosaic9: a ", tile.image.cols, "x", tile.image.rows, " tile is larger than the image size ", s,
           " (resize tiles with resize_long_side first)");
  // Top-left corners on upstream's 3s canvas, clockwise from the top around the centre tile (w0 x h0);
  // wp, hp are the previous tile's size.
  const int w0 = tiles[0].image.cols, h0 = tiles[0].image.rows;
  std::vector<cv::Point> origins(9);
  for (size_t i = 0; i < 9; ++i) {
    const int w = tiles[i].image.cols, h = tiles[i].image.rows;
    const int wp = i ? tiles[i - 1].image.cols : 0, hp = i ? tiles[i - 1].image.rows : 0;
    const cv::Point corners[9] = {{s, s},           {s, s - h},           {s + wp, s - h},
                                  {s + w0, s},      {s + w0, s + hp},     {s + w0 - w, s + h0},
                                  {s + w0 - wp - w, s + h0}, {s - w, s + h0 - h}, {s - w, s + h0 - hp - h}};
    origins[i] = corners[i] - offset;  // into the 2s x 2s crop
  }
  return Layout{tiles.data(), origins, cv::Size(2 * s, 2 * s)};
}

}  // namespace

Sample mosaic9_canvas(const std::array<Sample, 9>& tiles, int img_size, cv::Point offset) {
  return whole_canvas(mosaic9_layout(tiles, img_size, offset), "mosaic9");
}

Sample mosaic9(std::array<Sample, 9> tiles, int img_size, const AugmentOptions& options, std::mt19937& rng,
               Dialect dialect) {
  const cv::Point offset = draw_mosaic9_offset(img_size, rng);
  return mosaic9(std::move(tiles), img_size, options, rng, offset, dialect);
}

Sample mosaic9(std::array<Sample, 9> tiles, int img_size, const AugmentOptions& options, std::mt19937& rng,
               cv::Point offset, Dialect dialect) {
  return finish(mosaic9_layout(tiles, img_size, offset), img_size, options, rng, dialect, "mosaic9");
}

}  // namespace kestrel::data
