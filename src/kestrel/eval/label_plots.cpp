#include "kestrel/eval/label_plots.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
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

// The labels as [n, 5] float on the CPU, their shape checked.
at::Tensor label_table(const at::Tensor& labels) {
  if (labels.numel() > 0 && (labels.dim() != 2 || labels.size(1) != 5))
    fail("plot_labels: labels have shape ", labels.sizes(), ", expected [n, 5] (class, x, y, width, height)");
  return labels.numel() > 0 ? labels.to(at::kCPU, at::kFloat).contiguous() : at::zeros({0, 5});
}

// Each value's bin (int64), the maximum in the last one.
at::Tensor bin_index(const at::Tensor& values, const HistogramBins& b) {
  return ((values - b.lo) * (static_cast<double>(b.n) / (b.hi - b.lo))).floor().clamp(0, b.n - 1).to(at::kLong);
}

// Counts [bx.n]; and [bx.n, by.n] for pairs (x[i], y[i]), x along the first dimension: one bincount each.
at::Tensor counts_1d(const at::Tensor& x, const HistogramBins& bx) { return at::bincount(bin_index(x, bx), {}, bx.n); }

at::Tensor counts_2d(const at::Tensor& x, const HistogramBins& bx, const at::Tensor& y, const HistogramBins& by) {
  return at::bincount(bin_index(x, bx) * by.n + bin_index(y, by), {}, bx.n * by.n).view({bx.n, by.n});
}

// A 2D histogram's cells (counts [nx, ny], y up) over `box`. Cells with no box stay blank (seaborn masks
// counts <= 0); the colour runs from the smallest count (matplotlib's autoscaled vmin) to the pmax level.
// Painted at one pixel a cell and scaled to the box (nearest neighbour): a pass over the cells, not the pixels.
void draw_cells(cv::Mat& img, const cv::Rect& box, const at::Tensor& counts) {
  const int64_t nx = counts.size(0), ny = counts.size(1);
  const at::Tensor contiguous = counts.contiguous();
  const int64_t* c = contiguous.data_ptr<int64_t>();
  std::vector<int64_t> nonzero;
  for (int64_t i = 0; i < nx * ny; ++i)
    if (c[i] > 0) nonzero.push_back(c[i]);
  if (nonzero.empty()) return;
  const double vmin = static_cast<double>(*std::min_element(nonzero.begin(), nonzero.end()));
  const double vmax = level_for(nonzero, kPmax);
  cv::Mat cells(static_cast<int>(ny), static_cast<int>(nx), CV_8UC3, kWhite);
  for (int64_t i = 0; i < nx; ++i)
    for (int64_t j = 0; j < ny; ++j) {
      const int64_t n = c[i * ny + j];
      if (n == 0) continue;
      const double t = vmax > vmin ? (static_cast<double>(n) - vmin) / (vmax - vmin) : 1.0;
      const cv::Scalar s = histogram_colour(t);
      cells.at<cv::Vec3b>(static_cast<int>(ny - 1 - j), static_cast<int>(i)) =
          cv::Vec3b(cv::saturate_cast<uchar>(s[0]), cv::saturate_cast<uchar>(s[1]), cv::saturate_cast<uchar>(s[2]));
    }
  cv::Mat scaled;
  cv::resize(cells, scaled, box.size(), 0, 0, cv::INTER_NEAREST);
  scaled.copyTo(img(box));
}

void histogram_2d(cv::Mat& img, const cv::Rect& box, const at::Tensor& x, const at::Tensor& y, const std::string& xlabel,
                  const std::string& ylabel) {
  const HistogramBins bx = histogram_bins(x, kBins), by = histogram_bins(y, kBins);
  draw_cells(img, box, counts_2d(x.to(at::kDouble), bx, y.to(at::kDouble), by));
  draw_axes(img, Axes{box, bx.lo, bx.hi, by.lo, by.hi}, xlabel, ylabel, "", kTickFont);
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

// ---- labels_correlogram.jpg

const char* const kVariables[4] = {"x", "y", "width", "height"};
constexpr int kPairLeft = 190, kPairTop = 40, kPairCell = 430, kPairGap = 24;
const cv::Scalar kBarFill(199, 153, 87), kBarEdge(180, 119, 31);  // matplotlib's C0 at alpha 0.75 on white; C0

// The correlogram's data: the columns x, y, width, height (float64, at most kCorrelogramMaxLabels rows) and
// each one's bins, 50 for the diagonal and numpy's 'auto' for the 2D histograms (both over min..max).
struct PairData {
  std::array<at::Tensor, 4> column;
  std::array<HistogramBins, 4> diagonal, pair;
};

PairData pair_data(const at::Tensor& labels) {
  const at::Tensor l = label_table(labels);
  const at::Tensor rows = l.narrow(0, 0, std::min(l.size(0), kCorrelogramMaxLabels)).to(at::kDouble);
  PairData d;
  for (int k = 0; k < 4; ++k) {
    d.column[k] = rows.select(1, k + 1).contiguous();
    d.diagonal[k] = histogram_bins(d.column[k], kCorrelogramDiagonalBins);
    d.pair[k] = histogram_bins(d.column[k], 0);
  }
  return d;
}

PanelHistogram panel_histogram(const PairData& d, int row, int col) {
  if (row < 0 || row > 3 || col < 0 || col > row)
    fail("correlogram_histogram: panel (", row, ", ", col, ") is not drawn (0 <= col <= row <= 3)");
  if (row == col) return {d.diagonal[col], {}, counts_1d(d.column[col], d.diagonal[col])};
  return {d.pair[col], d.pair[row], counts_2d(d.column[col], d.pair[col], d.column[row], d.pair[row])};
}

// pairplot's despined axes: a bottom line and, off the diagonal, a left one (corner=True hides the diagonal's
// count axis), with tick marks; tick labels and the axis name only where a name is given (the grid's bottom
// row for x, its left column for y), as matplotlib's shared axes.
void pair_axes(cv::Mat& img, const Axes& ax, bool left, const std::string& xlabel, const std::string& ylabel) {
  const cv::Rect& b = ax.box;
  const int tick = 8, h = text_size("0", kTickFont).height;
  cv::line(img, {b.x, b.y + b.height}, {b.x + b.width, b.y + b.height}, kBlack, 2);
  const std::vector<double> xt = ticks(ax.x0, ax.x1);
  for (double t : xt) {
    const cv::Point p = ax.map(t, ax.y0);
    cv::line(img, p, {p.x, p.y + tick}, kBlack, 2);
    if (!xlabel.empty())
      centred_text(img, tick_label(t, xt.size() > 1 ? xt[1] - xt[0] : 1), {p.x, p.y + tick + h}, kTickFont);
  }
  if (!xlabel.empty()) centred_text(img, xlabel, {b.x + b.width / 2, b.y + b.height + tick + h * 3}, kTickFont * 1.1);
  if (!left) return;
  cv::line(img, {b.x, b.y}, {b.x, b.y + b.height}, kBlack, 2);
  const std::vector<double> yt = ticks(ax.y0, ax.y1);
  int widest = 0;
  for (double t : yt) {
    const cv::Point p = ax.map(ax.x0, t);
    cv::line(img, p, {p.x - tick, p.y}, kBlack, 2);
    if (ylabel.empty()) continue;
    const std::string s = tick_label(t, yt.size() > 1 ? yt[1] - yt[0] : 1);
    const cv::Size size = text_size(s, kTickFont);
    widest = std::max(widest, size.width);
    text(img, s, {p.x - tick - 8 - size.width, p.y + size.height / 2}, kTickFont);
  }
  if (!ylabel.empty())
    centred_text(img, ylabel, {b.x - tick - widest - h * 2, b.y + b.height / 2}, kTickFont * 1.1, /*vertical=*/true);
}

// The diagonal: the variable's histogram as bars (its own count scale, 0 to 1.05 x the tallest bar, not shown).
void diagonal_histogram(cv::Mat& img, const cv::Rect& box, const PanelHistogram& h, const std::string& xlabel) {
  const int64_t* c = h.counts.data_ptr<int64_t>();
  const int64_t tallest = h.counts.numel() > 0 ? h.counts.max().item<int64_t>() : 0;
  const Axes ax{box, h.x.lo, h.x.hi, 0, std::max(1.0, static_cast<double>(tallest) * 1.05)};
  const double width = (h.x.hi - h.x.lo) / static_cast<double>(h.x.n);
  for (int64_t i = 0; i < h.x.n; ++i) {
    if (c[i] == 0) continue;
    const cv::Rect bar(ax.map(h.x.lo + static_cast<double>(i) * width, static_cast<double>(c[i])),
                       ax.map(h.x.lo + static_cast<double>(i + 1) * width, 0));
    cv::rectangle(img, bar, kBarFill, cv::FILLED);
    cv::rectangle(img, bar, kBarEdge, 1);
  }
  pair_axes(img, ax, /*left=*/false, xlabel, "");
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

HistogramBins histogram_bins(const at::Tensor& values, int64_t n) {
  if (n < 0) fail("histogram_bins: ", n, " bins (0 for numpy's 'auto' rule)");
  const at::Tensor v = values.to(at::kCPU, at::kDouble).flatten();
  const int64_t size = v.numel();
  if (size == 0) return {0, 1, std::max<int64_t>(n, 1)};
  const double lo = v.min().item<double>(), hi = v.max().item<double>();
  if (lo == hi) return {lo - 0.5, hi + 0.5, std::max<int64_t>(n, 1)};  // 'auto': no spread, one bin
  if (n > 0) return {lo, hi, n};
  const double sturges = (hi - lo) / (std::log2(static_cast<double>(size)) + 1);
  const at::Tensor quartiles = at::quantile(v, at::tensor({0.25, 0.75}, at::kDouble));  // linear, as numpy.percentile
  const double iqr = (quartiles[1] - quartiles[0]).item<double>();
  const double freedman_diaconis = 2 * iqr / std::cbrt(static_cast<double>(size));
  const double width = freedman_diaconis > 0 ? std::min(freedman_diaconis, sturges) : sturges;
  return {lo, hi, std::clamp<int64_t>(static_cast<int64_t>(std::ceil((hi - lo) / width)), 1, kMaxAutoBins)};
}

cv::Mat render_labels(const at::Tensor& labels, const std::vector<std::string>& names) {
  const at::Tensor l = label_table(labels);
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
  histogram_2d(img, labels_panel(2), l.select(1, 1), l.select(1, 2), "x", "y");
  histogram_2d(img, labels_panel(3), l.select(1, 3), l.select(1, 4), "width", "height");
  return img;
}

PanelHistogram correlogram_histogram(const at::Tensor& labels, int row, int col) {
  return panel_histogram(pair_data(labels), row, col);
}

cv::Rect correlogram_panel(int row, int col) {
  if (row < 0 || row > 3 || col < 0 || col > 3) fail("correlogram_panel: panel (", row, ", ", col, ") does not exist (0..3)");
  return {kPairLeft + col * (kPairCell + kPairGap), kPairTop + row * (kPairCell + kPairGap), kPairCell, kPairCell};
}

cv::Mat render_correlogram(const at::Tensor& labels) {
  const PairData d = pair_data(labels);
  cv::Mat img(kCorrelogramSize, kCorrelogramSize, CV_8UC3, kWhite);
  for (int row = 0; row < 4; ++row)
    for (int col = 0; col <= row; ++col) {
      const PanelHistogram h = panel_histogram(d, row, col);
      const cv::Rect box = correlogram_panel(row, col);
      const std::string xlabel = row == 3 ? kVariables[col] : "";
      if (row == col) {
        diagonal_histogram(img, box, h, xlabel);
        continue;
      }
      draw_cells(img, box, h.counts);
      pair_axes(img, Axes{box, h.x.lo, h.x.hi, h.y.lo, h.y.hi}, /*left=*/true, xlabel, col == 0 ? kVariables[row] : "");
    }
  return img;
}

std::string correlogram_path(const std::string& labels_path) {
  const std::filesystem::path p(labels_path);
  return (p.parent_path() / (p.stem().string() + "_correlogram" + p.extension().string())).string();
}

void plot_labels(const at::Tensor& labels, const std::vector<std::string>& names, const std::string& path) {
  save(render_labels(labels, names), path);
  save(render_correlogram(labels), correlogram_path(path));
}

}  // namespace kestrel::eval
