#include "kestrel/data/augment.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <opencv2/imgproc.hpp>

#include "kestrel/core/error.h"

namespace kestrel::data {

// ---- random numbers -------------------------------------------------------------------------------

double random_unit(std::mt19937& rng) {
  // CPython's genrand_res53: 27 + 26 bits of two 32-bit outputs.
  const uint32_t a = rng() >> 5, b = rng() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

double uniform(std::mt19937& rng, double lo, double hi) { return lo + (hi - lo) * random_unit(rng); }

size_t draw_partner(std::mt19937& rng, int n, const std::vector<int64_t>* weighted_draw) {
  // random.choices(population) without weights: population[floor(random() * len(population))].
  const size_t size = weighted_draw ? weighted_draw->size() : static_cast<size_t>(n);
  const auto pick = static_cast<size_t>(random_unit(rng) * static_cast<double>(size));
  if (!weighted_draw) return pick;
  const int64_t image = (*weighted_draw)[pick];
  if (image < 0 || image >= n) fail("draw_partner: image ", image, " of a weighted draw over ", n, " images");
  return static_cast<size_t>(image);
}

void python_shuffle(std::vector<size_t>& items, std::mt19937& rng) {
  // random.shuffle: for i from n - 1 down to 1, swap item i with item _randbelow(i + 1).
  for (size_t i = items.size(); i-- > 1;) std::swap(items[i], items[static_cast<size_t>(random_below(rng, static_cast<int>(i) + 1))]);
}

int random_below(std::mt19937& rng, int n) {
  if (n <= 0) fail("random_below: n must be positive, got ", n);
  // CPython's _randbelow: rejection sampling on bit_length(n) top bits (getrandbits).
  int bits = 0;
  while ((uint32_t(n) >> bits) != 0) ++bits;
  for (;;) {
    const uint32_t r = rng() >> (32 - bits);
    if (r < uint32_t(n)) return int(r);
  }
}

std::vector<int> sample_indices(std::mt19937& rng, int n, int k) {
  if (k < 0 || k > n) fail("sample_indices: cannot draw ", k, " of ", n);
  // CPython's random.sample: a shrinking pool for small n, rejection of repeats otherwise.
  std::vector<int> result(size_t(k), 0);
  double setsize = 21;
  if (k > 5) setsize += std::pow(4.0, std::ceil(std::log(k * 3.0) / std::log(4.0)));
  if (n <= setsize) {
    std::vector<int> pool(size_t(n), 0);
    std::iota(pool.begin(), pool.end(), 0);
    for (int i = 0; i < k; ++i) {
      const int j = random_below(rng, n - i);
      result[size_t(i)] = pool[size_t(j)];
      pool[size_t(j)] = pool[size_t(n - i - 1)];
    }
  } else {
    std::vector<bool> taken(size_t(n), false);
    for (int i = 0; i < k; ++i) {
      int j = random_below(rng, n);
      while (taken[size_t(j)]) j = random_below(rng, n);
      taken[size_t(j)] = true;
      result[size_t(i)] = j;
    }
  }
  return result;
}

namespace {

double standard_normal(std::mt19937& rng) {  // Box-Muller
  const double u1 = 1.0 - random_unit(rng);  // (0, 1]: log stays finite
  const double u2 = random_unit(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * CV_PI * u2);
}

// Gamma(shape, 1) by Marsaglia and Tsang; shapes below 1 through Gamma(shape + 1) * U^(1 / shape).
double gamma_draw(std::mt19937& rng, double shape) {
  if (shape < 1) return gamma_draw(rng, shape + 1) * std::pow(1.0 - random_unit(rng), 1.0 / shape);
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = standard_normal(rng);
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = 1.0 - random_unit(rng);
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

}  // namespace

double beta(std::mt19937& rng, double a, double b) {
  if (!(a > 0) || !(b > 0)) fail("beta: parameters must be positive, got ", a, ", ", b);
  const double x = gamma_draw(rng, a), y = gamma_draw(rng, b);
  return x / (x + y);
}

// ---- checks ---------------------------------------------------------------------------------------

void check_sample(const Sample& sample, const char* where) {
  if (sample.image.empty() || sample.image.type() != CV_8UC3)
    fail(where, ": the image must be a non-empty 8-bit BGR image (CV_8UC3)");
  check_labels(sample, where);
}

void check_labels(const Sample& sample, const char* where) {
  if (!sample.segments.empty() && sample.segments.size() != sample.boxes.size())
    fail(where, ": ", sample.segments.size(), " polygons for ", sample.boxes.size(),
         " boxes (need none or one per box)");
}

// ---- resize and letterbox -------------------------------------------------------------------------

cv::Size long_side_size(cv::Size size, int img_size) {
  const int64_t longest = std::max(size.width, size.height);
  if (longest <= 0 || img_size <= 0) fail("long_side_size: sizes must be positive, got ", size.width, "x", size.height, " and ", img_size);
  // ceil(side * img_size / longest) in integers: the float product can land a hair above an integer.
  auto side = [&](int64_t v) { return int((v * img_size + longest - 1) / longest); };
  return {side(size.width), side(size.height)};
}

cv::Mat resize_long_side(const cv::Mat& img, int img_size, bool augment) {
  if (img.empty()) fail("resize_long_side: empty image");
  if (img_size <= 0) fail("resize_long_side: image size must be positive, got ", img_size);
  const int longest = std::max(img.rows, img.cols);
  if (longest == img_size) return img;
  const int interp = (augment || img_size > longest) ? cv::INTER_LINEAR : cv::INTER_AREA;
  cv::Mat out;
  cv::resize(img, out, long_side_size(img.size(), img_size), 0, 0, interp);
  return out;
}

Sample resize_sample(const Sample& sample, int img_size, bool augment) {
  check_sample(sample, "resize_sample");
  Sample out = sample;
  out.image = resize_long_side(sample.image, img_size, augment);
  map_labels(out, {double(out.image.cols) / sample.image.cols, double(out.image.rows) / sample.image.rows}, {0, 0});
  return out;
}

void map_labels(Sample& sample, cv::Point2d scale, cv::Point2d offset) {
  for (Box& b : sample.boxes) {
    b.x1 = float(b.x1 * scale.x + offset.x), b.x2 = float(b.x2 * scale.x + offset.x);
    b.y1 = float(b.y1 * scale.y + offset.y), b.y2 = float(b.y2 * scale.y + offset.y);
  }
  for (Polygon& poly : sample.segments)
    for (cv::Point2f& p : poly) p = cv::Point2f(float(p.x * scale.x + offset.x), float(p.y * scale.y + offset.y));
}

Letterbox letterbox(const cv::Mat& img, int new_height, int new_width, const LetterboxOptions& options) {
  if (img.empty()) fail("letterbox: empty image");
  if (new_height <= 0 || new_width <= 0) fail("letterbox: bad shape ", new_height, "x", new_width);
  if (options.auto_pad && options.stride <= 0) fail("letterbox: stride must be positive, got ", options.stride);
  double r = std::min(double(new_height) / img.rows, double(new_width) / img.cols);
  if (!options.scale_up) r = std::min(r, 1.0);
  Letterbox lb;
  lb.ratio = {r, r};
  // std::nearbyint rounds half to even, as Python's round().
  // At least a pixel: a 3000 x 1 image would round its short side to 0 (upstream's cv2.resize then fails).
  cv::Size unpad(std::max(1, int(std::nearbyint(img.cols * r))), std::max(1, int(std::nearbyint(img.rows * r))));
  double dw = new_width - unpad.width, dh = new_height - unpad.height;
  if (options.auto_pad) {  // minimum rectangle: pad only up to the next stride multiple
    dw = (new_width - unpad.width) % options.stride, dh = (new_height - unpad.height) % options.stride;
  } else if (options.scale_fill) {  // stretch
    dw = dh = 0;
    unpad = cv::Size(new_width, new_height);
    lb.ratio = {double(new_width) / img.cols, double(new_height) / img.rows};
  }
  dw /= 2, dh /= 2;
  cv::Mat resized = img;
  if (unpad != img.size()) cv::resize(img, resized, unpad, 0, 0, cv::INTER_LINEAR);
  const int top = int(std::nearbyint(dh - 0.1)), bottom = int(std::nearbyint(dh + 0.1));
  const int left = int(std::nearbyint(dw - 0.1)), right = int(std::nearbyint(dw + 0.1));
  cv::copyMakeBorder(resized, lb.image, top, bottom, left, right, cv::BORDER_CONSTANT,
                     cv::Scalar::all(options.pad_value));
  lb.pad = {dw, dh};
  return lb;
}

void letterbox_labels(Sample& sample, const Letterbox& lb) { map_labels(sample, lb.ratio, lb.pad); }

// ---- colour ---------------------------------------------------------------------------------------

void apply_hsv_gains(cv::Mat& img, cv::Vec3d gains) {
  if (img.empty() || img.type() != CV_8UC3) fail("augment_hsv: the image must be 8-bit BGR (CV_8UC3)");
  uint8_t table[3][256];  // one per HSV channel, values truncated as numpy's astype(uint8)
  for (int x = 0; x < 256; ++x) {
    double hue = std::fmod(x * gains[0], 180.0);
    if (hue < 0) hue += 180.0;  // numpy's % takes the divisor's sign
    table[0][x] = uint8_t(hue);
    table[1][x] = uint8_t(std::clamp(x * gains[1], 0.0, 255.0));
    table[2][x] = uint8_t(std::clamp(x * gains[2], 0.0, 255.0));
  }
  cv::Mat hsv;
  cv::cvtColor(img, hsv, cv::COLOR_BGR2HSV);  // 8-bit hue is degrees / 2: 0..179
  // The three tables by hand: cv::LUT with a 3-channel table indexes byte by byte (3x slower).
  for (int y = 0; y < hsv.rows; ++y) {
    uint8_t* p = hsv.ptr<uint8_t>(y);
    for (int x = 0; x < hsv.cols; ++x, p += 3) {
      const uint8_t h = table[0][p[0]], s = table[1][p[1]], v = table[2][p[2]];
      p[0] = h, p[1] = s, p[2] = v;
    }
  }
  cv::cvtColor(hsv, img, cv::COLOR_HSV2BGR);  // same size and type: writes into img's own pixels
}

void augment_hsv(cv::Mat& img, double hgain, double sgain, double vgain, std::mt19937& rng, Dialect dialect) {
  if (hgain == 0 && sgain == 0 && vgain == 0) {
    if (dialect == Dialect::yolov7) apply_hsv_gains(img, cv::Vec3d(1, 1, 1));
    return;
  }
  cv::Vec3d gains;
  const double g[3] = {hgain, sgain, vgain};
  for (int c = 0; c < 3; ++c) gains[c] = uniform(rng, -1, 1) * g[c] + 1;
  apply_hsv_gains(img, gains);
}

// ---- geometry -------------------------------------------------------------------------------------

cv::Matx33d perspective_matrix(const PerspectiveParams& params, cv::Size input, cv::Size output) {
  const cv::Matx33d eye = cv::Matx33d::eye();
  cv::Matx33d C = eye, P = eye, R = eye, S = eye, T = eye;
  C(0, 2) = -input.width / 2.0, C(1, 2) = -input.height / 2.0;
  P(2, 0) = params.perspective_x, P(2, 1) = params.perspective_y;
  const cv::Mat rotation = cv::getRotationMatrix2D(cv::Point2f(0, 0), params.degrees, params.scale);  // 2x3 CV_64F
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) R(r, c) = rotation.at<double>(r, c);
  S(0, 1) = std::tan(params.shear_x_degrees * CV_PI / 180), S(1, 0) = std::tan(params.shear_y_degrees * CV_PI / 180);
  T(0, 2) = params.translate_x * output.width, T(1, 2) = params.translate_y * output.height;
  return T * S * R * P * C;  // right to left: centre, perspective, rotate+scale, shear, translate
}

PerspectiveParams draw_perspective(const AugmentOptions& o, std::mt19937& rng, Dialect dialect) {
  PerspectiveParams p;
  p.perspective_x = uniform(rng, -o.perspective, o.perspective);
  p.perspective_y = uniform(rng, -o.perspective, o.perspective);
  p.degrees = uniform(rng, -o.degrees, o.degrees);
  p.scale = uniform(rng, 1 - o.scale, (dialect == Dialect::yolov7 ? 1.1 : 1.0) + o.scale);
  p.shear_x_degrees = uniform(rng, -o.shear, o.shear);
  p.shear_y_degrees = uniform(rng, -o.shear, o.shear);
  p.translate_x = uniform(rng, 0.5 - o.translate, 0.5 + o.translate);
  p.translate_y = uniform(rng, 0.5 - o.translate, 0.5 + o.translate);
  return p;
}

namespace {

cv::Point2d transform_point(const cv::Matx33d& M, double x, double y, bool projective) {
  const double u = M(0, 0) * x + M(0, 1) * y + M(0, 2), v = M(1, 0) * x + M(1, 1) * y + M(1, 2);
  if (!projective) return {u, v};
  const double z = M(2, 0) * x + M(2, 1) * y + M(2, 2);
  return {u / z, v / z};
}

// Upstream resample_segments: the closed polygon (first point repeated at the end) interpolated at
// n evenly spaced positions of its vertex index, so long edges get as many points as short ones.
std::vector<cv::Point2d> resample_polygon(const Polygon& poly, int n = 1000) {
  std::vector<cv::Point2d> out;
  if (poly.empty()) return out;
  const size_t m = poly.size() + 1;  // closed
  auto vertex = [&](size_t i) { return cv::Point2d(poly[i % poly.size()]); };
  const double step = double(m - 1) / (n - 1);
  out.reserve(size_t(n));
  for (int i = 0; i < n; ++i) {
    const double t = i == n - 1 ? double(m - 1) : i * step;  // linspace ends exactly at m - 1
    const size_t k = std::min(size_t(t), m - 1);
    if (k == m - 1) {
      out.push_back(vertex(k));
      continue;
    }
    const double f = t - double(k);
    out.push_back(vertex(k) + (vertex(k + 1) - vertex(k)) * f);
  }
  return out;
}

// Box of the points inside [0, w] x [0, h] (upstream segment2box); all zeros when none is inside.
Box inside_bounds(const std::vector<cv::Point2d>& points, double w, double h) {
  double x1 = INFINITY, y1 = INFINITY, x2 = -INFINITY, y2 = -INFINITY;
  for (const cv::Point2d& p : points) {
    if (p.x < 0 || p.y < 0 || p.x > w || p.y > h) continue;
    x1 = std::min(x1, p.x), y1 = std::min(y1, p.y), x2 = std::max(x2, p.x), y2 = std::max(y2, p.y);
  }
  if (x1 > x2) return Box{};
  return Box{0, float(x1), float(y1), float(x2), float(y2)};
}

Box warp_box_corners(const Box& b, const cv::Matx33d& M, bool projective, cv::Size out) {
  const cv::Point2d corners[4] = {
      transform_point(M, b.x1, b.y1, projective), transform_point(M, b.x2, b.y2, projective),
      transform_point(M, b.x1, b.y2, projective), transform_point(M, b.x2, b.y1, projective)};
  double x1 = INFINITY, y1 = INFINITY, x2 = -INFINITY, y2 = -INFINITY;
  for (const cv::Point2d& p : corners)
    x1 = std::min(x1, p.x), y1 = std::min(y1, p.y), x2 = std::max(x2, p.x), y2 = std::max(y2, p.y);
  auto clip = [](double v, double hi) { return float(std::clamp(v, 0.0, hi)); };
  return Box{b.cls, clip(x1, out.width), clip(y1, out.height), clip(x2, out.width), clip(y2, out.height)};
}

bool has_polygon_points(const std::vector<Polygon>& segments) {  // upstream: any(x.any() for x in segments)
  for (const Polygon& poly : segments)
    for (const cv::Point2f& p : poly)
      if (p.x != 0 || p.y != 0) return true;
  return false;
}

// Transforms boxes (and polygons) with M and keeps the candidates; `scale` is params.scale.
void warp_labels(Sample& sample, const cv::Matx33d& M, bool projective, cv::Size out, double scale, Dialect dialect) {
  const bool use_segments = has_polygon_points(sample.segments);
  CandidateThresholds thresholds;
  thresholds.ar_thr = dialect == Dialect::yolov7 ? 20 : 100;
  thresholds.area_thr = use_segments ? 0.01 : 0.10;
  std::vector<Box> boxes;
  std::vector<Polygon> segments;
  for (size_t i = 0; i < sample.boxes.size(); ++i) {
    const Box& b = sample.boxes[i];
    Box warped;
    Polygon polygon;
    if (use_segments) {
      std::vector<cv::Point2d> points = resample_polygon(sample.segments[i]);
      for (cv::Point2d& p : points) p = transform_point(M, p.x, p.y, projective);
      warped = inside_bounds(points, out.width, out.height);
      warped.cls = b.cls;
      for (const cv::Point2d& p : points) polygon.emplace_back(float(p.x), float(p.y));
    } else {
      warped = warp_box_corners(b, M, projective, out);
    }
    const Box before{b.cls, float(b.x1 * scale), float(b.y1 * scale), float(b.x2 * scale), float(b.y2 * scale)};
    if (!box_candidate(before, warped, thresholds)) continue;
    boxes.push_back(warped);
    if (use_segments) segments.push_back(std::move(polygon));
  }
  sample.boxes = std::move(boxes);
  sample.segments = std::move(segments);  // without points (all empty or zero) they carry nothing: dropped
}

}  // namespace

namespace {

void check_output(cv::Size output) {
  if (output.width <= 0 || output.height <= 0)
    fail("random_perspective: output size ", output.width, "x", output.height, " is empty (border too negative)");
}

bool is_projective(const PerspectiveParams& params) { return params.perspective_x != 0 || params.perspective_y != 0; }

cv::Matx23d affine_rows(const cv::Matx33d& M) { return {M(0, 0), M(0, 1), M(0, 2), M(1, 0), M(1, 1), M(1, 2)}; }

}  // namespace

void apply_perspective(Sample& sample, const PerspectiveParams& params, cv::Size output, Dialect dialect) {
  check_sample(sample, "random_perspective");
  check_output(output);
  const cv::Matx33d M = perspective_matrix(params, sample.image.size(), output);
  const bool projective = is_projective(params);
  if (output != sample.image.size() || M != cv::Matx33d::eye()) {
    cv::Mat warped;
    const cv::Scalar grey = cv::Scalar::all(114);
    if (projective) {
      cv::warpPerspective(sample.image, warped, cv::Mat(M), output, cv::INTER_LINEAR, cv::BORDER_CONSTANT, grey);
    } else {
      cv::warpAffine(sample.image, warped, cv::Mat(affine_rows(M)), output, cv::INTER_LINEAR, cv::BORDER_CONSTANT, grey);
    }
    sample.image = warped;
  }
  warp_labels(sample, M, projective, output, params.scale, dialect);
}

void apply_perspective_painted(Sample& sample, cv::Size input, const InputPainter& paint,
                               const PerspectiveParams& params, cv::Size output, Dialect dialect) {
  if (input.width <= 0 || input.height <= 0) fail("random_perspective: empty input ", input.width, "x", input.height);
  check_output(output);
  check_labels(sample, "random_perspective");
  const cv::Matx33d M = perspective_matrix(params, input, output);
  if (is_projective(params)) {
    sample.image = cv::Mat(input, CV_8UC3);  // a fresh image: the caller's may be shared
    paint(cv::Rect(0, 0, input.width, input.height), sample.image);
    apply_perspective(sample, params, output, dialect);
    return;
  }
  // The inverse that warpAffine derives from M (same formulas), so the pixels equal apply_perspective's.
  cv::Matx23d inverse;
  cv::invertAffineTransform(affine_rows(M), inverse);
  sample.image = warp_affine_in_bands(inverse, input, output, paint);
  warp_labels(sample, M, false, output, params.scale, dialect);
}

void random_perspective(Sample& sample, const AugmentOptions& options, cv::Point border, std::mt19937& rng,
                        Dialect dialect) {
  check_sample(sample, "random_perspective");
  const cv::Size output(sample.image.cols + 2 * border.x, sample.image.rows + 2 * border.y);
  apply_perspective(sample, draw_perspective(options, rng, dialect), output, dialect);
}

bool box_candidate(const Box& before, const Box& after, const CandidateThresholds& t) {
  constexpr double eps = 1e-16;
  const double w1 = double(before.x2) - before.x1, h1 = double(before.y2) - before.y1;
  const double w2 = double(after.x2) - after.x1, h2 = double(after.y2) - after.y1;
  const double aspect = std::max(w2 / (h2 + eps), h2 / (w2 + eps));
  return w2 > t.wh_thr && h2 > t.wh_thr && w2 * h2 / (w1 * h1 + eps) > t.area_thr && aspect < t.ar_thr;
}

void flip_lr(Sample& sample) {
  check_sample(sample, "flip_lr");
  const float w = float(sample.image.cols);
  cv::flip(sample.image, sample.image, 1);
  for (Box& b : sample.boxes) b = Box{b.cls, w - b.x2, b.y1, w - b.x1, b.y2};
  for (Polygon& poly : sample.segments)
    for (cv::Point2f& p : poly) p.x = w - p.x;
}

void flip_ud(Sample& sample) {
  check_sample(sample, "flip_ud");
  const float h = float(sample.image.rows);
  cv::flip(sample.image, sample.image, 0);
  for (Box& b : sample.boxes) b = Box{b.cls, b.x1, h - b.y2, b.x2, h - b.y1};
  for (Polygon& poly : sample.segments)
    for (cv::Point2f& p : poly) p.y = h - p.y;
}

void clip_boxes(Sample& sample, float margin) {
  const float w = float(sample.image.cols) - margin, h = float(sample.image.rows) - margin;
  for (Box& b : sample.boxes)
    b = Box{b.cls, std::clamp(b.x1, 0.f, w), std::clamp(b.y1, 0.f, h), std::clamp(b.x2, 0.f, w), std::clamp(b.y2, 0.f, h)};
}

void random_flips(Sample& sample, const AugmentOptions& options, std::mt19937& rng) {
  if (random_unit(rng) < options.flipud) flip_ud(sample);
  if (random_unit(rng) < options.fliplr) flip_lr(sample);
}

// ---- mixing ---------------------------------------------------------------------------------------

void mixup(Sample& a, const Sample& b, double ratio) {
  check_sample(a, "mixup");
  check_sample(b, "mixup");
  if (a.image.size() != b.image.size())
    fail("mixup: images differ in size (", a.image.cols, "x", a.image.rows, " vs ", b.image.cols, "x",
         b.image.rows, ")");
  if (!(ratio >= 0 && ratio <= 1)) fail("mixup: ratio must be in [0, 1], got ", ratio);
  cv::Mat mixed(a.image.size(), CV_8UC3);
  const int n = a.image.cols * 3;
  for (int y = 0; y < a.image.rows; ++y) {
    const uint8_t* pa = a.image.ptr<uint8_t>(y);
    const uint8_t* pb = b.image.ptr<uint8_t>(y);
    uint8_t* out = mixed.ptr<uint8_t>(y);
    for (int k = 0; k < n; ++k) out[k] = uint8_t(pa[k] * ratio + pb[k] * (1 - ratio));  // truncates, as astype
  }
  a.image = mixed;
  const bool polygons = a.segments.size() == a.boxes.size() && b.segments.size() == b.boxes.size();
  a.boxes.insert(a.boxes.end(), b.boxes.begin(), b.boxes.end());
  if (polygons) {
    a.segments.insert(a.segments.end(), b.segments.begin(), b.segments.end());
  } else {
    a.segments.clear();  // one side has none: keep the one-polygon-per-box rule
  }
}

void mixup(Sample& a, const Sample& b, std::mt19937& rng, double alpha) { mixup(a, b, beta(rng, alpha, alpha)); }

double box_ioa(const Box& box, const Box& other) {
  const double iw = std::max(0.0, double(std::min(box.x2, other.x2)) - std::max(box.x1, other.x1));
  const double ih = std::max(0.0, double(std::min(box.y2, other.y2)) - std::max(box.y1, other.y1));
  const double area = (double(other.x2) - other.x1) * (double(other.y2) - other.y1) + 1e-7;
  return iw * ih / area;
}

void copy_paste(Sample& sample, double probability, std::mt19937& rng) {
  check_sample(sample, "copy_paste");
  if (!(probability >= 0 && probability <= 1)) fail("copy_paste: probability must be in [0, 1], got ", probability);
  const int n = int(sample.segments.size());
  if (probability == 0 || n == 0) return;
  const float w = float(sample.image.cols);
  cv::Mat mask = cv::Mat::zeros(sample.image.size(), CV_8U);  // where the sources lie, before mirroring
  for (int j : sample_indices(rng, n, int(std::nearbyint(probability * n)))) {
    const Box b = sample.boxes[size_t(j)];
    const Box mirrored{b.cls, w - b.x2, b.y1, w - b.x1, b.y2};
    const bool clear = std::all_of(sample.boxes.begin(), sample.boxes.end(),
                                   [&](const Box& other) { return box_ioa(mirrored, other) < 0.30; });
    if (!clear) continue;  // would hide 30% or more of an existing box
    std::vector<std::vector<cv::Point>> contour(1);
    Polygon polygon;
    for (const cv::Point2f& p : sample.segments[size_t(j)]) {
      contour[0].emplace_back(int(p.x), int(p.y));  // truncation, as numpy astype(int32)
      polygon.emplace_back(w - p.x, p.y);
    }
    if (!contour[0].empty()) cv::drawContours(mask, contour, -1, cv::Scalar(255), cv::FILLED);
    sample.boxes.push_back(mirrored);
    sample.segments.push_back(std::move(polygon));
  }
  cv::Mat mirrored_image, mirrored_mask;
  cv::flip(sample.image, mirrored_image, 1);
  cv::flip(mask, mirrored_mask, 1);
  mirrored_image.copyTo(sample.image, mirrored_mask);
}

}  // namespace kestrel::data
