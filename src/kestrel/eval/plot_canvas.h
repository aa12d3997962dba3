// The drawing primitives of kestrel's charts (plots.cpp: validation curves, confusion matrix, results.png;
// label_plots.cpp: labels.jpg): matplotlib-like axes, ticks, text, curves and legends on an OpenCV image
// (Hershey font, no matplotlib), and writing the figure. Internal to eval/; not a general plotting API.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

namespace kestrel::eval::canvas {

const cv::Scalar kBlack(0, 0, 0), kWhite(255, 255, 255), kGrey(128, 128, 128), kMeanBlue(255, 0, 0);
constexpr int kFont = cv::FONT_HERSHEY_SIMPLEX;

// matplotlib's tab10 cycle, BGR: the colours upstream's per-class curves get.
cv::Scalar tab10(size_t i);

void text(cv::Mat& img, const std::string& s, cv::Point at, double scale, const cv::Scalar& colour = kBlack,
          int thickness = 2);
cv::Size text_size(const std::string& s, double scale, int thickness = 2);

// Text centred on `centre`, optionally rotated 90 degrees counter-clockwise (y-axis labels): Hershey text
// is horizontal only, so it is drawn on its own patch and the patch rotated.
void centred_text(cv::Mat& img, const std::string& s, cv::Point centre, double scale, bool vertical = false,
                  const cv::Scalar& colour = kBlack, int thickness = 2);

// One plotting area: data ranges mapped onto a pixel rectangle, with matplotlib-like ticks.
struct Axes {
  cv::Rect box;
  double x0, x1, y0, y1;
  cv::Point map(double x, double y) const {
    const double fx = (x - x0) / (x1 - x0 == 0 ? 1 : x1 - x0), fy = (y - y0) / (y1 - y0 == 0 ? 1 : y1 - y0);
    return {box.x + static_cast<int>(std::lround(fx * box.width)),
            box.y + box.height - static_cast<int>(std::lround(fy * box.height))};
  }
};

// Ticks at 1, 2 or 5 times a power of ten, about five of them.
std::vector<double> ticks(double lo, double hi);
std::string tick_label(double v, double step);

// Frame, ticks with labels, axis labels and title. x_ticks = false leaves the x ticks to the caller
// (class names under a histogram).
void draw_axes(cv::Mat& img, const Axes& ax, const std::string& xlabel, const std::string& ylabel,
               const std::string& title, double font, bool x_ticks = true);

void curve(cv::Mat& img, const Axes& ax, const std::vector<double>& x, const std::vector<double>& y, const cv::Scalar& colour,
           int thickness);

struct LegendEntry {
  std::string label;
  cv::Scalar colour;
  int thickness;
};

// Legend outside the axes on the right, as upstream's bbox_to_anchor=(1.04, 1), loc="upper left".
void legend(cv::Mat& img, const Axes& ax, const std::vector<LegendEntry>& entries, double font);

// PNG, or JPEG for a .jpg/.jpeg path (upstream's labels.jpg); the folder must exist.
void save(const cv::Mat& img, const std::string& path);

std::string class_name(const std::vector<std::string>& names, int64_t c);

// matplotlib's 'Blues' colour map (its nine defining colours, BGR), linearly interpolated; v in [0, 1].
cv::Scalar blues(double v);
// matplotlib's 'viridis' (OpenCV's copy of it, BGR); v in [0, 1].
cv::Scalar viridis(double v);

}  // namespace kestrel::eval::canvas
