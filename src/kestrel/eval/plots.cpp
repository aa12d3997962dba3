#include "kestrel/eval/plots.h"

#include "kestrel/core/python_repr.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <utility>

#include <ATen/ATen.h>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "kestrel/core/error.h"
#include "kestrel/data/image_io.h"
#include "kestrel/eval/plot_canvas.h"

namespace kestrel::eval {

using namespace canvas;  // the drawing primitives, shared with label_plots.cpp

namespace {

std::vector<double> rows_of(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU, at::kDouble).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

std::string format(const char* fmt, double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, fmt, v);
  return buffer;
}

// Box filter over fraction f of the curve, ends padded with the end values (upstream's smooth()).
std::vector<double> smooth(const std::vector<double>& y, double f) {
  const int64_t n = static_cast<int64_t>(y.size());
  if (n == 0) return y;
  const int64_t taps = static_cast<int64_t>(std::nearbyint(static_cast<double>(n) * f * 2)) / 2 + 1;
  std::vector<double> out(n, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = -taps / 2; k <= taps / 2; ++k) out[i] += y[std::clamp<int64_t>(i + k, 0, n - 1)] / static_cast<double>(taps);
  return out;
}

// scipy.ndimage.gaussian_filter1d(y, sigma) with its defaults: truncate 4, mode 'reflect' (d c b a | a b c d | d c b a).
std::vector<double> gaussian_filter1d(const std::vector<double>& y, double sigma) {
  const int64_t n = static_cast<int64_t>(y.size()), radius = static_cast<int64_t>(4.0 * sigma + 0.5);
  std::vector<double> weights(2 * radius + 1);
  double total = 0;
  for (int64_t k = -radius; k <= radius; ++k) total += weights[k + radius] = std::exp(-0.5 * k * k / (sigma * sigma));
  std::vector<double> out(n, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = -radius; k <= radius; ++k) {
      int64_t j = i + k;
      while (j < 0 || j >= n) j = j < 0 ? -j - 1 : 2 * n - j - 1;
      out[i] += y[j] * weights[k + radius] / total;
    }
  return out;
}

}  // namespace

// ---- confusion matrix ---------------------------------------------------------------------------------

ConfusionMatrix::ConfusionMatrix(int64_t nc, double conf, double iou_thres)
    : nc_(nc), conf_(conf), iou_thres_(iou_thres), counts_((nc + 1) * (nc + 1), 0) {
  if (nc < 1) fail("ConfusionMatrix: nc must be at least 1, got ", nc);
}

void ConfusionMatrix::process_batch(const at::Tensor& detections, const at::Tensor& labels) {
  const auto check = [&](const at::Tensor& t, int64_t cols, const char* name) {
    if (t.defined() && t.numel() > 0 && (t.dim() != 2 || t.size(1) != cols))
      fail("ConfusionMatrix: ", name, " has shape ", t.sizes(), ", expected [n, ", cols, "]");
  };
  check(detections, 6, "detections");
  check(labels, 5, "labels");
  const std::vector<double> det = detections.defined() ? rows_of(detections) : std::vector<double>{};
  const std::vector<double> lab = labels.defined() ? rows_of(labels) : std::vector<double>{};
  const int64_t M = static_cast<int64_t>(lab.size() / 5);
  const auto in_range = [&](double c, const char* what) {
    const auto i = static_cast<int64_t>(c);
    if (i < 0 || i >= nc_) fail("ConfusionMatrix: ", what, " class ", c, " outside [0, ", nc_, ")");
    return i;
  };
  struct Box { double x1, y1, x2, y2; int64_t cls; };
  std::vector<Box> gts, dets;
  for (int64_t i = 0; i < M; ++i)
    gts.push_back({lab[i * 5 + 1], lab[i * 5 + 2], lab[i * 5 + 3], lab[i * 5 + 4], in_range(lab[i * 5], "label")});
  for (size_t i = 0; i + 6 <= det.size(); i += 6)  // float32 comparisons, as upstream's tensors
    if (static_cast<float>(det[i + 4]) > static_cast<float>(conf_))
      dets.push_back({det[i], det[i + 1], det[i + 2], det[i + 3], in_range(det[i + 5], "detection")});

  // Candidates in torch.where's order (gt-major), IoU as upstream's float32 box_iou, then its two
  // de-duplications: matches[iou.argsort()[::-1]] (an ascending sort reversed: among equal IoUs the later
  // candidate first) and np.unique(key, return_index=True) (the first of each key, ordered by key). numpy's
  // argsort is stable for a few candidates only (with 8 or more, on AVX-512 machines, its order among equal
  // IoUs is its own): kestrel takes the stable order always.
  struct Match { int64_t gt, det; float iou; };
  std::vector<Match> matches;
  for (int64_t g = 0; g < M; ++g)
    for (size_t d = 0; d < dets.size(); ++d) {
      const Box &a = gts[g], &b = dets[d];
      const auto f = [](double v) { return static_cast<float>(v); };
      const float w = std::max(0.f, std::min(f(a.x2), f(b.x2)) - std::max(f(a.x1), f(b.x1)));
      const float h = std::max(0.f, std::min(f(a.y2), f(b.y2)) - std::max(f(a.y1), f(b.y1)));
      const float inter = w * h;
      const float area_a = (f(a.x2) - f(a.x1)) * (f(a.y2) - f(a.y1)), area_b = (f(b.x2) - f(b.x1)) * (f(b.y2) - f(b.y1));
      const float iou = inter / (area_a + area_b - inter + 1e-7f);
      if (iou > static_cast<float>(iou_thres_)) matches.push_back({g, static_cast<int64_t>(d), iou});
    }
  const auto keep_best = [&](bool per_detection) {
    if (matches.size() < 2) return;  // upstream de-duplicates only from two candidates on
    const auto key = [&](const Match& m) { return per_detection ? m.det : m.gt; };
    std::stable_sort(matches.begin(), matches.end(), [](const Match& a, const Match& b) { return a.iou < b.iou; });
    std::reverse(matches.begin(), matches.end());
    std::vector<Match> kept;
    for (const Match& m : matches)
      if (std::none_of(kept.begin(), kept.end(), [&](const Match& k) { return key(k) == key(m); })) kept.push_back(m);
    std::sort(kept.begin(), kept.end(), [&](const Match& a, const Match& b) { return key(a) < key(b); });
    matches = kept;
  };
  keep_best(true);
  keep_best(false);

  const bool any = !matches.empty();
  for (int64_t g = 0; g < M; ++g) {
    const auto m = std::find_if(matches.begin(), matches.end(), [&](const Match& x) { return x.gt == g; });
    const int64_t predicted = m != matches.end() ? dets[m->det].cls : nc_;
    ++counts_[predicted * (nc_ + 1) + gts[g].cls];
  }
  if (!any) return;  // v7.0: background false positives only counted in images with some match
  for (size_t d = 0; d < dets.size(); ++d)
    if (std::none_of(matches.begin(), matches.end(), [&](const Match& x) { return x.det == static_cast<int64_t>(d); }))
      ++counts_[dets[d].cls * (nc_ + 1) + nc_];
}

at::Tensor ConfusionMatrix::matrix() const {
  return at::tensor(counts_, at::kLong).view({nc_ + 1, nc_ + 1});
}

void plot_confusion_matrix(const ConfusionMatrix& cm, const std::vector<std::string>& names, const std::string& path) {
  const int64_t n = cm.nc() + 1;
  std::vector<double> column_sum(n, 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < n; ++c) column_sum[c] += static_cast<double>(cm.count(r, c));
  cv::Mat img(kConfusionHeight, kConfusionWidth, CV_8UC3, kWhite);
  const bool named = !names.empty() && names.size() < 99 && static_cast<int64_t>(names.size()) == cm.nc();
  const int side = 1650, cell = side / static_cast<int>(n);
  const cv::Rect grid(650, 250, cell * static_cast<int>(n), cell * static_cast<int>(n));
  // Tick labels shrink with the cells so that 80 names stay readable (seaborn's font_scale 0.8 for nc >= 50).
  const double font = std::clamp(cell / 90.0, 0.5, 1.6), tick_font = std::clamp(cell * 0.033, 0.45, 1.3);
  double vmax = 0;
  std::vector<double> value(n * n);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < n; ++c) {
      value[r * n + c] = static_cast<double>(cm.count(r, c)) / (column_sum[c] + 1e-9);
      vmax = std::max(vmax, value[r * n + c]);
    }
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const double v = value[r * n + c];
      if (v < 0.005) continue;  // blank, as upstream's NaN cells
      const cv::Rect box(grid.x + static_cast<int>(c) * cell, grid.y + static_cast<int>(r) * cell, cell, cell);
      const cv::Scalar colour = blues(vmax > 0 ? v / vmax : 0);
      cv::rectangle(img, box, colour, cv::FILLED);
      if (cm.nc() < 30)
        centred_text(img, format("%.2f", v), {box.x + cell / 2, box.y + cell / 2}, font, false,
                     v / std::max(vmax, 1e-9) > 0.5 ? kWhite : kBlack);
    }
  // Tick labels: names + background, or indices (seaborn's "auto" when there are too many to name).
  const int every = named ? 1 : std::max<int>(1, static_cast<int>(n) / 20);
  for (int64_t i = 0; i < n; i += every) {
    const std::string label = named ? (i == cm.nc() ? "background" : names[i]) : std::to_string(i);
    const int mid = static_cast<int>(i) * cell + cell / 2;
    const int thickness = tick_font < 0.8 ? 1 : 2;
    const cv::Size s = text_size(label, tick_font, thickness);
    text(img, label, {grid.x - s.width - 20, grid.y + mid + s.height / 2}, tick_font, kBlack, thickness);
    centred_text(img, label, {grid.x + mid, grid.y + grid.height + 20 + s.width / 2}, tick_font, true, kBlack, thickness);
  }
  centred_text(img, "True", {grid.x + grid.width / 2, kConfusionHeight - 60}, 2.0);
  centred_text(img, "Predicted", {120, grid.y + grid.height / 2}, 2.0, true);
  centred_text(img, "Confusion Matrix", {grid.x + grid.width / 2, grid.y - 90}, 2.2);
  // Colour bar on the right, 0 .. vmax.
  const cv::Rect bar(grid.x + grid.width + 80, grid.y, 70, grid.height);
  for (int y = 0; y < bar.height; ++y)
    cv::line(img, {bar.x, bar.y + y}, {bar.x + bar.width, bar.y + y}, blues(1.0 - static_cast<double>(y) / bar.height));
  cv::rectangle(img, bar, kBlack, 2);
  for (double t : ticks(0, std::max(vmax, 1e-9))) {
    const int y = bar.y + bar.height - static_cast<int>(std::lround(t / std::max(vmax, 1e-9) * bar.height));
    cv::line(img, {bar.x + bar.width, y}, {bar.x + bar.width + 12, y}, kBlack, 2);
    text(img, format("%.1f", t), {bar.x + bar.width + 20, y + 15}, 1.2);
  }
  save(img, path);
}

// ---- PR and confidence curves -------------------------------------------------------------------------

namespace {

Axes curve_axes(const std::string& xlabel, const std::string& ylabel, cv::Mat& img) {
  img = cv::Mat(kCurveHeight, kCurveWidth, CV_8UC3, kWhite);
  Axes ax{cv::Rect(260, 110, 1250, 1200), 0, 1, 0, 1};
  draw_axes(img, ax, xlabel, ylabel, "", 1.4);
  return ax;
}

std::vector<double> row(const std::vector<double>& m, int64_t r, int64_t width) {
  return std::vector<double>(m.begin() + r * width, m.begin() + (r + 1) * width);
}

// One curve per class (coloured with a legend entry when there are fewer than 21 classes, else grey),
// returning their mean. curves: [nc, k] row-major; label(c) is the legend text of row c.
std::vector<double> draw_class_curves(cv::Mat& img, const Axes& ax, const std::vector<double>& px,
                                      const std::vector<double>& curves, int64_t nc, int64_t k,
                                      const std::function<std::string(int64_t)>& label,
                                      std::vector<LegendEntry>& entries) {
  std::vector<double> mean(k, 0.0);
  const bool few = nc < 21;
  for (int64_t c = 0; c < nc; ++c) {
    const auto y = row(curves, c, k);
    for (int64_t i = 0; i < k; ++i) mean[i] += y[i] / static_cast<double>(nc);
    curve(img, ax, px, y, few ? tab10(c) : kGrey, few ? 2 : 1);
    if (few) entries.push_back({label(c), tab10(c), 3});
  }
  return mean;
}

}  // namespace

void plot_pr_curve(const ApPerClass& m, const std::vector<std::string>& names, const std::string& path) {
  if (!m.pr_curve.defined() || !m.px.defined()) fail(path, ": no PR curve to plot (ApPerClass without curves)");
  cv::Mat img;
  const Axes ax = curve_axes("Recall", "Precision", img);
  const std::vector<double> px = rows_of(m.px), py = rows_of(m.pr_curve), ap = rows_of(m.ap);
  const auto classes = rows_of(m.classes);
  const int64_t nc = m.pr_curve.size(0), k = m.pr_curve.size(1), T = m.ap.dim() == 2 ? m.ap.size(1) : 1;
  std::vector<LegendEntry> entries;
  const std::vector<double> mean = draw_class_curves(img, ax, px, py, nc, k, [&](int64_t c) {
    return class_name(names, static_cast<int64_t>(classes[c])) + " " + format("%.3f", ap[c * T]);
  }, entries);
  if (nc > 0) {
    curve(img, ax, px, mean, kMeanBlue, 8);
    entries.push_back({"all classes " + format("%.3f", m.map50) + " mAP@0.5", kMeanBlue, 8});
  }
  legend(img, ax, entries, 1.1);
  centred_text(img, "Precision-Recall Curve", {ax.box.x + ax.box.width / 2, ax.box.y - 50}, 1.6);
  save(img, path);
}

void plot_confidence_curve(const ApPerClass& m, CurveKind kind, const std::vector<std::string>& names,
                           const std::string& path) {
  const at::Tensor& t = kind == CurveKind::f1 ? m.f1_curve : kind == CurveKind::precision ? m.precision_curve : m.recall_curve;
  const char* ylabel = kind == CurveKind::f1 ? "F1" : kind == CurveKind::precision ? "Precision" : "Recall";
  if (!t.defined() || !m.px.defined()) fail(path, ": no ", ylabel, " curve to plot (ApPerClass without curves)");
  cv::Mat img;
  const Axes ax = curve_axes("Confidence", ylabel, img);
  const std::vector<double> px = rows_of(m.px), py = rows_of(t);
  const auto classes = rows_of(m.classes);
  const int64_t nc = t.size(0), k = t.size(1);
  std::vector<LegendEntry> entries;
  const std::vector<double> mean = draw_class_curves(img, ax, px, py, nc, k, [&](int64_t c) {
    return class_name(names, static_cast<int64_t>(classes[c]));
  }, entries);
  if (nc > 0) {
    // YOLOv5's plot_mc_curve: smooth(py.mean(0), 0.05); YOLOv7's plots and labels py.mean(0) as it is (the
    // mean its metric takes the operating point from).
    const std::vector<double> smoothed = m.style == MetricStyle::yolov5 ? smooth(mean, 0.05) : mean;
    const size_t best = std::max_element(smoothed.begin(), smoothed.end()) - smoothed.begin();
    curve(img, ax, px, smoothed, kMeanBlue, 8);
    entries.push_back({"all classes " + format("%.2f", smoothed[best]) + " at " + format("%.3f", px[best]), kMeanBlue, 8});
  }
  legend(img, ax, entries, 1.1);
  centred_text(img, std::string(ylabel) + "-Confidence Curve", {ax.box.x + ax.box.width / 2, ax.box.y - 50}, 1.6);
  save(img, path);
}

// ---- results.png ----------------------------------------------------------------------------------------

void plot_results(const std::string& csv_path, const std::string& path) {
  std::ifstream in(csv_path);
  if (!in) fail(csv_path, ": cannot read");
  std::string line;
  if (!std::getline(in, line)) fail(csv_path, ": empty results file");
  const std::vector<std::string> header = split_csv_row(line);
  if (header.size() < 11) fail(csv_path, ": ", header.size(), " columns, a YOLOv5 results.csv has at least 11");
  std::vector<std::vector<double>> columns(header.size());
  for (int number = 2; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto cells = split_csv_row(line);
    if (cells.size() != header.size()) fail(csv_path, ":", number, ": ", cells.size(), " values for ", header.size(), " columns");
    for (size_t i = 0; i < cells.size(); ++i) {
      char* end = nullptr;
      const double v = std::strtod(cells[i].c_str(), &end);
      if (cells[i].empty() || *end != '\0') fail(csv_path, ":", number, ": '", cells[i], "' is not a number");
      columns[i].push_back(v);
    }
  }
  cv::Mat img(kResultsHeight, kResultsWidth, CV_8UC3, kWhite);
  const int order[10] = {1, 2, 3, 4, 5, 8, 9, 10, 6, 7};  // upstream plot_results
  const std::vector<double>& x = columns[0];
  const int pw = kResultsWidth / 5, ph = kResultsHeight / 2;
  for (int i = 0; i < 10; ++i) {
    const std::vector<double>& y = columns[order[i]];
    double lo = 0, hi = 1;
    if (!y.empty()) {
      lo = *std::min_element(y.begin(), y.end()), hi = *std::max_element(y.begin(), y.end());
      const double pad = hi > lo ? (hi - lo) * 0.05 : std::max(std::abs(hi) * 0.05, 0.01);
      lo -= pad, hi += pad;
    }
    const double xlo = x.empty() ? 0 : x.front(), xhi = x.empty() ? 1 : std::max(x.back(), x.front() + 1);
    Axes ax{cv::Rect((i % 5) * pw + 120, (i / 5) * ph + 70, pw - 150, ph - 150), xlo, xhi, lo, hi};
    draw_axes(img, ax, "", "", header[order[i]], 0.8);
    curve(img, ax, x, y, tab10(0), 3);
    for (size_t k = 0; k < y.size(); ++k) cv::circle(img, ax.map(x[k], y[k]), 5, tab10(0), cv::FILLED, cv::LINE_AA);
    if (y.size() > 1) {
      // dotted smoothing line: short dashes of the Gaussian-filtered curve
      const std::vector<double> s = gaussian_filter1d(y, 3);
      for (size_t k = 0; k + 1 < s.size(); ++k) {
        const cv::Point a = ax.map(x[k], s[k]), b = ax.map(x[k + 1], s[k + 1]);
        const double length = std::hypot(b.x - a.x, b.y - a.y);
        for (double t = 0; t < length; t += 12)
          cv::line(img, a + (b - a) * (t / length), a + (b - a) * (std::min(length, t + 5) / length), tab10(1), 3, cv::LINE_AA);
      }
    }
    if (i == 1) legend(img, Axes{cv::Rect(ax.box.x + ax.box.width - 300, ax.box.y + 10, 0, 0), 0, 1, 0, 1},
                       {{"results", tab10(0), 3}, {"smooth", tab10(1), 3}}, 0.7);
  }
  save(img, path);
}

std::vector<double> log_cell_density(const std::vector<double>& x, const std::vector<double>& y, int n) {
  if (x.size() != y.size()) fail("log_cell_density: ", x.size(), " x values for ", y.size(), " y values");
  if (x.empty()) return {};
  const int cells = std::max(1, n - 1);
  // numpy: edges linspace(min, max, n); digitize(v) - 1 clipped to the last cell, which holds the maximum.
  const auto cell_of = [cells](const std::vector<double>& v) {
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    std::vector<int> index;
    for (double e : v)
      index.push_back(*hi > *lo ? std::clamp(static_cast<int>(std::floor((e - *lo) / (*hi - *lo) * cells)), 0, cells - 1)
                                : cells - 1);
    return index;
  };
  const std::vector<int> cx = cell_of(x), cy = cell_of(y);
  std::map<std::pair<int, int>, int> count;
  for (size_t i = 0; i < x.size(); ++i) ++count[{cx[i], cy[i]}];
  std::vector<double> density;
  for (size_t i = 0; i < x.size(); ++i) density.push_back(std::log(count[{cx[i], cy[i]}]));
  return density;
}

void plot_evolve(const std::vector<std::string>& keys, const std::vector<std::vector<double>>& values,
                 const std::vector<double>& fitness, const std::string& path) {
  if (values.size() != fitness.size() || values.empty())
    fail(path, ": evolve plot of ", values.size(), " generations with ", fitness.size(), " fitness values");
  for (const auto& row : values)
    if (row.size() != keys.size()) fail(path, ": a generation with ", row.size(), " values for ", keys.size(), " keys");
  const size_t best = static_cast<size_t>(std::max_element(fitness.begin(), fitness.end()) - fitness.begin());
  const int rows = std::max<int>(1, static_cast<int>((keys.size() + 4) / 5));
  cv::Mat img(rows * kEvolveRowHeight, kEvolveWidth, CV_8UC3, kWhite);
  const auto range = [](const std::vector<double>& v) {  // matplotlib's 5 % margins
    double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
    const double pad = hi > lo ? (hi - lo) * 0.05 : std::max(std::abs(hi) * 0.05, 0.01);
    return std::pair<double, double>{lo - pad, hi + pad};
  };
  const auto [f_lo, f_hi] = range(fitness);
  const int pw = kEvolveWidth / 5;
  for (size_t k = 0; k < keys.size(); ++k) {
    std::vector<double> v;
    for (const auto& row : values) v.push_back(row[k]);
    const auto [v_lo, v_hi] = range(v);
    const Axes ax{cv::Rect(static_cast<int>(k % 5) * pw + 90, static_cast<int>(k / 5) * kEvolveRowHeight + 60, pw - 110,
                           kEvolveRowHeight - 130),
                  v_lo, v_hi, f_lo, f_hi};
    char title[160];
    std::snprintf(title, sizeof title, "%s = %.3g", keys[k].c_str(), v[best]);
    draw_axes(img, ax, "", "", title, 0.6);
    const std::vector<double> density = log_cell_density(v, fitness, 20);
    const double d_max = *std::max_element(density.begin(), density.end());
    for (size_t g = 0; g < v.size(); ++g)  // matplotlib normalises the colours over their range (all 0: the lowest)
      cv::circle(img, ax.map(v[g], fitness[g]), 6, viridis(d_max > 0 ? density[g] / d_max : 0), cv::FILLED, cv::LINE_AA);
    const cv::Point mark = ax.map(v[best], fitness[best]);  // 'k+', markersize 15 at 200 dpi
    cv::line(img, mark - cv::Point(21, 0), mark + cv::Point(21, 0), kBlack, 3, cv::LINE_AA);
    cv::line(img, mark - cv::Point(0, 21), mark + cv::Point(0, 21), kBlack, 3, cv::LINE_AA);
  }
  save(img, path);
}

}  // namespace kestrel::eval
