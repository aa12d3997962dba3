#include "kestrel/eval/label_plots.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include <ATen/ATen.h>
#include <opencv2/imgproc.hpp>

#include "kestrel/core/error.h"
#include "kestrel/data/annotate.h"
#include "kestrel/eval/plot_canvas.h"

namespace kestrel::eval {

using namespace canvas;

namespace {

constexpr int kBins = 50;        // sn.histplot(..., bins=50)
constexpr double kPmax = 0.9;    // sn.histplot(..., pmax=0.9)
constexpr int kMaxBoxes = 1000;  // labels[:1000] in the boxes panel
constexpr double kTickFont = 0.9;

// seaborn's single-colour ramp for histplot (light to dark in the hue of matplotlib's C0), approximated by
// its two ends; t in [0, 1]. BGR.
cv::Scalar histogram_colour(double t) {
  const cv::Scalar light(230, 203, 178), dark(128, 80, 23);
  t = std::clamp(t, 0.0, 1.0);
  return light + (dark - light) * t;
}

// seaborn's _quantile_to_level: the count at which the cells sorted by count (largest first) reach
// 1 - pmax of the total, so that the colour saturates for the busiest cells.
double level_for(std::vector<int64_t> counts, double pmax) {
  std::sort(counts.rbegin(), counts.rend());
  const double total = static_cast<double>(std::accumulate(counts.begin(), counts.end(), int64_t{0}));
  if (total == 0) return 0;
  double cumulative = 0;
  for (int64_t c : counts) {
    cumulative += static_cast<double>(c);
    if (cumulative / total >= 1 - pmax) return static_cast<double>(c);
  }
  return static_cast<double>(counts.back());
}

// numpy.histogram_bin_edges(values, 50) ends: min .. max, widened by 0.5 a side when they are equal.
std::pair<double, double> range_of(const std::vector<float>& v) {
  if (v.empty()) return {0, 1};
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *lo == *hi ? std::pair<double, double>{*lo - 0.5, *hi + 0.5} : std::pair<double, double>{*lo, *hi};
}

int bin_of(double v, double lo, double hi) {
  return std::clamp(static_cast<int>(std::floor((v - lo) / (hi - lo) * kBins)), 0, kBins - 1);  // max in the last bin
}

void histogram_2d(cv::Mat& img, const cv::Rect& box, const std::vector<float>& x, const std::vector<float>& y,
                  const std::string& xlabel, const std::string& ylabel) {
  const auto [x0, x1] = range_of(x);
  const auto [y0, y1] = range_of(y);
  const Axes ax{box, x0, x1, y0, y1};
  std::vector<int64_t> counts(kBins * kBins, 0);
  for (size_t i = 0; i < x.size(); ++i) ++counts[bin_of(x[i], x0, x1) * kBins + bin_of(y[i], y0, y1)];
  std::vector<int64_t> nonzero;
  for (int64_t c : counts)
    if (c > 0) nonzero.push_back(c);
  if (!nonzero.empty()) {
    // Cells with no box stay blank (seaborn masks counts <= 0); the colour runs from the smallest count
    // (matplotlib's autoscaled vmin) to the pmax level.
    const double vmin = static_cast<double>(*std::min_element(nonzero.begin(), nonzero.end()));
    const double vmax = level_for(nonzero, kPmax);
    for (int i = 0; i < kBins; ++i)
      for (int j = 0; j < kBins; ++j) {
        const int64_t c = counts[i * kBins + j];
        if (c == 0) continue;
        const double t = vmax > vmin ? (static_cast<double>(c) - vmin) / (vmax - vmin) : 1.0;
        const cv::Point a = ax.map(x0 + (x1 - x0) * i / kBins, y0 + (y1 - y0) * (j + 1) / kBins);
        const cv::Point b = ax.map(x0 + (x1 - x0) * (i + 1) / kBins, y0 + (y1 - y0) * j / kBins);
        cv::rectangle(img, cv::Rect(a, b), histogram_colour(t), cv::FILLED);
      }
  }
  draw_axes(img, ax, xlabel, ylabel, "", kTickFont);
}

void class_histogram(cv::Mat& img, const std::vector<int64_t>& per_class, const std::vector<std::string>& names) {
  const int64_t k = static_cast<int64_t>(per_class.size());
  const int64_t tallest = per_class.empty() ? 0 : *std::max_element(per_class.begin(), per_class.end());
  const Axes ax{labels_panel(0), -0.5, static_cast<double>(k) - 0.5, 0, std::max<double>(1.0, tallest * 1.05)};
  const bool named = !names.empty() && names.size() < 30;  // upstream: 0 < len(names) < 30
  draw_axes(img, ax, named ? "" : "classes", "instances", "", kTickFont, /*x_ticks=*/!named);
  for (int64_t c = 0; c < k; ++c) {
    // hist(..., bins=linspace(0, nc, nc + 1) - 0.5, rwidth=0.8): a bar 0.8 wide centred on the class.
    const double x = static_cast<double>(c);
    if (per_class[c] > 0)
      cv::rectangle(img, cv::Rect(ax.map(x - 0.4, static_cast<double>(per_class[c])), ax.map(x + 0.4, 0)),
                    data::palette_colour(static_cast<int>(c)), cv::FILLED);
    if (named && static_cast<size_t>(c) < names.size()) {
      const cv::Point p = ax.map(x, 0);
      cv::line(img, p, {p.x, p.y + 8}, kBlack, 2);
      const int width = text_size(names[c], 0.8).width;
      centred_text(img, names[c], {p.x, p.y + 16 + width / 2}, 0.8, /*vertical=*/true);
    }
  }
}

}  // namespace

cv::Rect labels_panel(int i) {
  static const cv::Rect panels[4] = {{170, 50, 580, 500}, {900, 50, 600, 600}, {170, 930, 580, 560}, {920, 930, 580, 560}};
  if (i < 0 || i > 3) fail("labels_panel: panel ", i, " does not exist (0..3)");
  return panels[i];
}

at::Tensor label_rows(const std::vector<data::ImageRecord>& records) {
  std::vector<float> flat;
  for (const auto& r : records)
    for (const auto& row : r.rows) flat.insert(flat.end(), row.box.begin(), row.box.end());
  return at::tensor(flat, at::kFloat).view({-1, 5});
}

cv::Mat render_labels(const at::Tensor& labels, const std::vector<std::string>& names) {
  if (labels.numel() > 0 && (labels.dim() != 2 || labels.size(1) != 5))
    fail("plot_labels: labels have shape ", labels.sizes(), ", expected [n, 5] (class, x, y, width, height)");
  const at::Tensor l = labels.numel() > 0 ? labels.to(at::kCPU, at::kFloat).contiguous() : at::zeros({0, 5});
  const int64_t n = l.size(0);
  const float* v = l.data_ptr<float>();
  std::vector<float> column[5];
  for (int64_t i = 0; i < n; ++i)
    for (int k = 0; k < 5; ++k) column[k].push_back(v[i * 5 + k]);
  int64_t k = static_cast<int64_t>(names.size());
  for (float c : column[0]) k = std::max<int64_t>(k, static_cast<int64_t>(c) + 1);
  std::vector<int64_t> per_class(static_cast<size_t>(std::max<int64_t>(k, 1)), 0);
  for (float c : column[0])
    if (c >= 0) ++per_class[static_cast<size_t>(c)];

  cv::Mat img(kLabelsSize, kLabelsSize, CV_8UC3, kWhite);
  class_histogram(img, per_class, names);
  // Boxes centred on the panel, at the panel's scale (upstream: on a 2000 x 2000 image shown in the panel).
  const cv::Rect panel = labels_panel(1);
  for (int64_t i = 0; i < std::min<int64_t>(n, kMaxBoxes); ++i) {
    const double w = column[3][i] * panel.width, h = column[4][i] * panel.height;
    const cv::Point a(panel.x + static_cast<int>(std::lround(panel.width / 2.0 - w / 2)),
                      panel.y + static_cast<int>(std::lround(panel.height / 2.0 - h / 2)));
    const cv::Point b(panel.x + static_cast<int>(std::lround(panel.width / 2.0 + w / 2)),
                      panel.y + static_cast<int>(std::lround(panel.height / 2.0 + h / 2)));
    cv::rectangle(img, a, b, data::palette_colour(static_cast<int>(column[0][i])), 1);
  }
  histogram_2d(img, labels_panel(2), column[1], column[2], "x", "y");
  histogram_2d(img, labels_panel(3), column[3], column[4], "width", "height");
  return img;
}

void plot_labels(const at::Tensor& labels, const std::vector<std::string>& names, const std::string& path) {
  save(render_labels(labels, names), path);
}

}  // namespace kestrel::eval
