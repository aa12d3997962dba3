#include "kestrel/data/paste_in.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>

#include <opencv2/imgproc.hpp>

#include "kestrel/core/error.h"
#include "kestrel/data/augment.h"
#include "kestrel/data/mosaic.h"

namespace kestrel::data {

std::vector<PasteObject> cut_objects(const Sample& canvas, double probability, std::mt19937& rng) {
  check_sample(canvas, "paste_in");
  return cut_objects(canvas, canvas.image.size(),
                     [&](cv::Rect rect, cv::Mat& pixels) { canvas.image(rect).copyTo(pixels); }, probability, rng);
}

std::vector<PasteObject> cut_objects(const Sample& labels, cv::Size size, const InputPainter& paint,
                                     double probability, std::mt19937& rng) {
  if (size.width <= 0 || size.height <= 0) fail("paste_in: empty canvas ", size.width, "x", size.height);
  check_labels(labels, "paste_in");
  if (!(probability >= 0 && probability <= 1)) fail("paste_in: probability must be in [0, 1], got ", probability);
  std::vector<PasteObject> objects;
  const int n = static_cast<int>(labels.segments.size());
  if (probability == 0 || n == 0) return objects;
  const int w = size.width, h = size.height;
  // Truncation to an integer, then clipping to [0, hi]: the same as truncating the clipped value.
  auto pixel = [](float v, int hi) { return static_cast<int>(std::clamp(static_cast<double>(v), 0.0, static_cast<double>(hi))); };
  // std::nearbyint rounds half to even, as Python's round(): one object of a canvas gives none.
  for (int j : sample_indices(rng, n, static_cast<int>(std::nearbyint(probability * n)))) {
    const Box& b = labels.boxes[static_cast<size_t>(j)];
    const int x1 = pixel(b.x1, w - 1), y1 = pixel(b.y1, h - 1), x2 = pixel(b.x2, w - 1), y2 = pixel(b.y2, h - 1);
    if (x2 <= x1 || y2 <= y1) continue;
    const cv::Rect crop(x1, y1, x2 - x1, y2 - y1);
    PasteObject object;
    object.cls = b.cls;
    // Upstream fills the polygon (points truncated as numpy's astype(int32)) on the whole canvas and crops.
    // Filled in a frame that holds the crop and every point inside the canvas, it gives those pixels without
    // a canvas-sized mask: OpenCV redraws the edges into points outside its image, so only the canvas's own
    // borders may cut the polygon (the crop's own frame cut it at its right and bottom vertices).
    std::vector<std::vector<cv::Point>> contour(1);
    for (const cv::Point2f& p : labels.segments[static_cast<size_t>(j)]) {
      contour[0].emplace_back(static_cast<int>(p.x), static_cast<int>(p.y));
      object.polygon.emplace_back(p.x - static_cast<float>(x1), p.y - static_cast<float>(y1));
    }
    object.mask = cv::Mat::zeros(crop.size(), CV_8U);
    if (!contour[0].empty()) {
      const cv::Rect frame = (cv::boundingRect(contour[0]) | crop) & cv::Rect(0, 0, w, h);
      cv::Mat filled = cv::Mat::zeros(frame.size(), CV_8U);
      cv::drawContours(filled, contour, -1, cv::Scalar(255), cv::FILLED, cv::LINE_8, cv::noArray(), INT_MAX, -frame.tl());
      filled(crop - frame.tl()).copyTo(object.mask);
    }
    cv::Mat pixels(crop.size(), CV_8UC3);
    paint(crop, pixels);
    object.image = cv::Mat::zeros(crop.size(), CV_8UC3);
    pixels.copyTo(object.image, object.mask);
    objects.push_back(std::move(object));
  }
  return objects;
}

std::vector<PasteObject> collect_paste_objects(const std::function<Sample(size_t)>& load, size_t n_images,
                                               int img_size, std::mt19937& rng,
                                               const std::vector<int64_t>* weighted_draw, size_t wanted, int max_mosaics) {
  if (n_images == 0) fail("paste_in: no images to take objects from");
  const int n = static_cast<int>(n_images);
  std::vector<PasteObject> objects;
  for (int m = 0; m < max_mosaics && objects.size() < wanted; ++m) {
    // Upstream's draw order: the first image, the centre, the three others.
    std::array<size_t, 4> picks{};
    picks[0] = static_cast<size_t>(random_below(rng, n));
    const cv::Point centre = draw_mosaic4_centre(img_size, rng);
    for (size_t i = 1; i < 4; ++i) picks[i] = draw_partner(rng, n, weighted_draw);
    std::array<Sample, 4> tiles;
    for (size_t i = 0; i < 4; ++i) {
      tiles[i] = load(picks[i]);
      // Only objects with outlines can be cut out; boxes without polygons would make the canvas drop
      // every polygon (one polygon per box or none).
      if (tiles[i].segments.empty()) tiles[i].boxes.clear();
    }
    const CanvasParts canvas = mosaic4_canvas_parts(tiles, img_size, centre);
    std::vector<PasteObject> cut = cut_objects(canvas.labels, canvas.size, canvas.paint, 0.5, rng);
    objects.insert(objects.end(), std::make_move_iterator(cut.begin()), std::make_move_iterator(cut.end()));
    if (objects.empty()) break;  // as upstream: the first canvas had nothing to cut out
  }
  return objects;
}

bool paste_box_free(const Sample& sample, const cv::Rect& box) {
  if (box.width <= 20 || box.height <= 20) return false;
  const Box b{0, static_cast<float>(box.x), static_cast<float>(box.y), static_cast<float>(box.x + box.width),
              static_cast<float>(box.y + box.height)};
  // Intersection over the existing box's area (box_ioa: eps 1e-7 where upstream's pastein uses 1e-16).
  return std::all_of(sample.boxes.begin(), sample.boxes.end(),
                     [&](const Box& other) { return box_ioa(b, other) < 0.30; });
}

bool paste_object(Sample& sample, const PasteObject& object, const cv::Rect& box) {
  check_sample(sample, "paste_in");
  if (object.image.empty() || object.image.type() != CV_8UC3 || object.mask.type() != CV_8U ||
      object.mask.size() != object.image.size())
    fail("paste_in: an object needs a non-empty 8-bit BGR image and an 8-bit mask of its size");
  if (box.width <= 0 || box.height <= 0 || (box & cv::Rect(0, 0, sample.image.cols, sample.image.rows)) != box)
    fail("paste_in: the box (", box.x, ", ", box.y, ", ", box.width, "x", box.height, ") is not inside the ",
         sample.image.cols, "x", sample.image.rows, " image");
  const int hs = object.image.rows, ws = object.image.cols;
  // Upstream's arithmetic in doubles: the scale that fits, sizes truncated (so they never exceed the box).
  const double r = std::min(static_cast<double>(box.height) / hs, static_cast<double>(box.width) / ws);
  const int rw = std::min(static_cast<int>(ws * r), box.width), rh = std::min(static_cast<int>(hs * r), box.height);
  if (rw <= 10 || rh <= 10) return false;
  cv::Mat mask, pixels;
  cv::resize(object.mask, mask, cv::Size(rw, rh), 0, 0, cv::INTER_LINEAR);
  if (cv::countNonZero(mask) <= 20) return false;
  cv::resize(object.image, pixels, cv::Size(rw, rh), 0, 0, cv::INTER_LINEAR);
  // Where the scaled mask is non-zero: its soft edge takes pixels blended with the cut-out's black
  // surround, as upstream.
  pixels.copyTo(sample.image(cv::Rect(box.x, box.y, rw, rh)), mask);
  const bool polygons = sample.segments.size() == sample.boxes.size();
  sample.boxes.push_back(Box{object.cls, static_cast<float>(box.x), static_cast<float>(box.y),
                             static_cast<float>(box.x + rw), static_cast<float>(box.y + rh)});
  if (polygons) {
    const double sx = static_cast<double>(rw) / ws, sy = static_cast<double>(rh) / hs;
    Polygon polygon;
    for (const cv::Point2f& p : object.polygon)
      polygon.emplace_back(static_cast<float>(p.x * sx + box.x), static_cast<float>(p.y * sy + box.y));
    sample.segments.push_back(std::move(polygon));
  }
  return true;
}

void paste_in(Sample& sample, const std::vector<PasteObject>& objects, std::mt19937& rng) {
  check_sample(sample, "paste_in");
  if (objects.empty()) return;
  // Box sides as fractions of the image's: larger boxes first, so small objects fill what is left.
  static constexpr std::array<double, 20> kScales = {0.75,  0.75,  0.5,    0.5,    0.5,    0.5,   0.25,
                                                     0.25,  0.25,  0.25,   0.125,  0.125,  0.125, 0.125,
                                                     0.0625, 0.0625, 0.0625, 0.0625, 0.0625, 0.0625};
  const int h = sample.image.rows, w = sample.image.cols;
  for (double s : kScales) {
    if (random_unit(rng) < 0.2) continue;
    const int max_h = static_cast<int>(h * s), max_w = static_cast<int>(w * s);
    if (max_h < 1 || max_w < 1) continue;  // images under 16 px (upstream's randint would raise)
    const int box_h = 1 + random_below(rng, max_h), box_w = 1 + random_below(rng, max_w);  // randint(1, max)
    const int xmin = std::max(0, random_below(rng, w + 1) - box_w / 2);  // randint(0, w) - box_w // 2
    const int ymin = std::max(0, random_below(rng, h + 1) - box_h / 2);
    const int xmax = std::min(w, xmin + box_w), ymax = std::min(h, ymin + box_h);
    const cv::Rect box(xmin, ymin, xmax - xmin, ymax - ymin);
    if (!paste_box_free(sample, box)) continue;
    paste_object(sample, objects[static_cast<size_t>(random_below(rng, static_cast<int>(objects.size())))], box);
  }
}

}  // namespace kestrel::data
