#include "kestrel/eval/plot_canvas.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <cstdio>
#include <filesystem>

#include <opencv2/imgproc.hpp>

#include "kestrel/core/ascii_lower.h"
#include "kestrel/core/error.h"
#include "kestrel/data/image_io.h"

namespace kestrel::eval::canvas {

// matplotlib's tab10 cycle, BGR: the colours upstream's per-class curves get.
cv::Scalar tab10(size_t i) {
  static const cv::Scalar colours[] = {{180, 119, 31}, {14, 127, 255}, {44, 160, 44},   {40, 39, 214},  {189, 103, 148},
                                       {75, 86, 140},  {194, 119, 227}, {127, 127, 127}, {34, 189, 188}, {207, 190, 23}};
  return colours[i % 10];
}

void text(cv::Mat& img, const std::string& s, cv::Point at, double scale, const cv::Scalar& colour, int thickness) {
  cv::putText(img, s, at, kFont, scale, colour, thickness, cv::LINE_AA);
}

cv::Size text_size(const std::string& s, double scale, int thickness) {
  int baseline = 0;
  return cv::getTextSize(s, kFont, scale, thickness, &baseline);
}

// Text centred on `centre`, optionally rotated 90 degrees counter-clockwise (y-axis labels): Hershey text
// is horizontal only, so it is drawn on its own patch and the patch rotated.
void centred_text(cv::Mat& img, const std::string& s, cv::Point centre, double scale, bool vertical,
                  const cv::Scalar& colour, int thickness) {
  const cv::Size size = text_size(s, scale, thickness);
  if (!vertical) {
    text(img, s, {centre.x - size.width / 2, centre.y + size.height / 2}, scale, colour, thickness);
    return;
  }
  cv::Mat patch(size.height * 2, size.width + 4, CV_8UC3, kWhite);
  text(patch, s, {2, size.height * 3 / 2}, scale, colour, thickness);
  cv::Mat rotated;
  cv::rotate(patch, rotated, cv::ROTATE_90_COUNTERCLOCKWISE);
  cv::Rect where(centre.x - rotated.cols / 2, centre.y - rotated.rows / 2, rotated.cols, rotated.rows);
  where &= cv::Rect(0, 0, img.cols, img.rows);
  if (where.area() > 0) {
    cv::Mat mask;
    cv::Mat src = rotated(cv::Rect(where.x - (centre.x - rotated.cols / 2), where.y - (centre.y - rotated.rows / 2),
                                   where.width, where.height));
    cv::inRange(src, kWhite, kWhite, mask);
    cv::bitwise_not(mask, mask);
    src.copyTo(img(where), mask);  // only the glyphs: the cell colour under a label stays
  }
}

// Ticks at 1, 2 or 5 times a power of ten, about five of them.
std::vector<double> ticks(double lo, double hi) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / 5, power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= m * power) {
      step = m * power;
      break;
    }
  // By index, not by adding steps: where hi - lo is a few ulps, t + step == t and the sum never gets there.
  const double first = std::ceil(lo / step - 1e-9), last = std::floor(hi / step + 1e-9);
  if (!(last - first >= 0 && last - first <= 50)) return {lo, hi};
  std::vector<double> out;
  for (int i = 0; i <= static_cast<int>(last - first); ++i) {
    const double t = (first + i) * step;
    out.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  }
  return out;
}

std::string tick_label(double v, double step) {
  int decimals = 0;  // as many as the step needs: 2.5 -> 1, 0.25 -> 2, 0.02 -> 2
  for (double scaled = step; decimals < 6 && std::abs(scaled - std::round(scaled)) > 1e-6 * scaled; scaled *= 10) ++decimals;
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, v);
  return buffer;
}

void draw_axes(cv::Mat& img, const Axes& ax, const std::string& xlabel, const std::string& ylabel,
               const std::string& title, double font, bool x_ticks) {
  cv::rectangle(img, ax.box, kBlack, 2);
  const int tick = std::max(6, ax.box.width / 120);
  const auto xt = ticks(ax.x0, ax.x1), yt = ticks(ax.y0, ax.y1);
  const double xs = xt.size() > 1 ? xt[1] - xt[0] : 1, ys = yt.size() > 1 ? yt[1] - yt[0] : 1;
  int label_end = std::numeric_limits<int>::min();  // right edge of the last x label drawn
  for (double t : x_ticks ? xt : std::vector<double>{}) {
    const cv::Point p = ax.map(t, ax.y0);
    cv::line(img, p, {p.x, p.y + tick}, kBlack, 2);
    const std::string label = tick_label(t, xs);
    const int half = text_size(label, font).width / 2;
    if (p.x - half < label_end + 8) continue;  // long labels of a narrow panel (0.000490 ...): every other one
    centred_text(img, label, {p.x, p.y + tick + text_size("0", font).height}, font);
    label_end = p.x + half;
  }
  int widest = 0;
  for (double t : yt) {
    const cv::Point p = ax.map(ax.x0, t);
    cv::line(img, p, {p.x - tick, p.y}, kBlack, 2);
    const std::string s = tick_label(t, ys);
    const cv::Size size = text_size(s, font);
    widest = std::max(widest, size.width);
    text(img, s, {p.x - tick - 8 - size.width, p.y + size.height / 2}, font);
  }
  const int h = text_size("0", font).height;
  if (!xlabel.empty()) centred_text(img, xlabel, {ax.box.x + ax.box.width / 2, ax.box.y + ax.box.height + tick + h * 3}, font * 1.1);
  if (!ylabel.empty()) centred_text(img, ylabel, {ax.box.x - tick - widest - h * 2, ax.box.y + ax.box.height / 2}, font * 1.1, true);
  if (!title.empty()) centred_text(img, title, {ax.box.x + ax.box.width / 2, ax.box.y - h}, font * 1.1);
}

void curve(cv::Mat& img, const Axes& ax, const std::vector<double>& x, const std::vector<double>& y, const cv::Scalar& colour,
           int thickness) {
  std::vector<cv::Point> points;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i)
    if (std::isfinite(x[i]) && std::isfinite(y[i])) points.push_back(ax.map(x[i], y[i]));
  if (points.size() > 1) cv::polylines(img, points, false, colour, thickness, cv::LINE_AA);
}

// Legend outside the axes on the right, as upstream's bbox_to_anchor=(1.04, 1), loc="upper left".
void legend(cv::Mat& img, const Axes& ax, const std::vector<LegendEntry>& entries, double font) {
  if (entries.empty()) return;
  const int h = text_size("Ag", font).height, row = h * 2, sample = h * 3;
  int width = 0;
  for (const auto& e : entries) width = std::max(width, text_size(e.label, font).width);
  const cv::Rect frame(ax.box.x + ax.box.width + h * 2, ax.box.y, sample + width + h * 3,
                       row * static_cast<int>(entries.size()) + h);
  cv::rectangle(img, frame, cv::Scalar(204, 204, 204), 2);
  for (size_t i = 0; i < entries.size(); ++i) {
    const int y = frame.y + h + static_cast<int>(i) * row + h / 2;
    cv::line(img, {frame.x + h / 2, y}, {frame.x + h / 2 + sample, y}, entries[i].colour, entries[i].thickness, cv::LINE_AA);
    text(img, entries[i].label, {frame.x + h + sample, y + h / 2}, font);
  }
}

void save(const cv::Mat& img, const std::string& path) {
  const std::filesystem::path p(path);
  if (p.has_parent_path() && !std::filesystem::is_directory(p.parent_path()))
    fail(path, ": cannot write the plot (no folder ", p.parent_path().string(), ")");
  const std::string ext = ascii_lower(p.extension().string());
  if (ext == ".jpg" || ext == ".jpeg") data::write_jpeg(path, img, 95);  // labels.jpg: upstream's name and format
  else data::write_png(path, img);
}

std::string class_name(const std::vector<std::string>& names, int64_t c) {
  return c >= 0 && static_cast<size_t>(c) < names.size() ? names[c] : std::to_string(c);
}

// matplotlib's 'Blues' colour map (its nine defining colours, BGR), linearly interpolated; v in [0, 1].
cv::Scalar blues(double v) {
  static const double stops[9][3] = {{255, 251, 247}, {247, 235, 222}, {239, 219, 198}, {225, 202, 158}, {214, 174, 107},
                                     {198, 146, 66},  {181, 113, 33},  {156, 81, 8},    {107, 48, 8}};
  const double x = std::clamp(v, 0.0, 1.0) * 8;
  const int i = std::min(7, static_cast<int>(x));
  const double f = x - i;
  return {stops[i][0] + f * (stops[i + 1][0] - stops[i][0]), stops[i][1] + f * (stops[i + 1][1] - stops[i][1]),
          stops[i][2] + f * (stops[i + 1][2] - stops[i][2])};
}

cv::Scalar viridis(double v) {
  static const cv::Mat lut = [] {
    cv::Mat ramp(1, 256, CV_8UC1), coloured;
    for (int i = 0; i < 256; ++i) ramp.at<uint8_t>(0, i) = static_cast<uint8_t>(i);
    cv::applyColorMap(ramp, coloured, cv::COLORMAP_VIRIDIS);
    return coloured;
  }();
  const cv::Vec3b c = lut.at<cv::Vec3b>(0, static_cast<int>(std::lround(std::clamp(v, 0.0, 1.0) * 255)));
  return {static_cast<double>(c[0]), static_cast<double>(c[1]), static_cast<double>(c[2])};
}

}  // namespace kestrel::eval::canvas
