// labels.jpg and labels_correlogram.jpg: upstream's plot_labels (utils/plots.py v7.0), written at the start
// of training from the training split's labels (and by `kestrel data show`).
//
// labels.jpg: a (8, 8) x 200 dpi figure of four panels: instances per class (bars in the class colours,
// class names under them when there are fewer than 30), the first 1000 boxes drawn centred (their sizes
// side by side), and 50 x 50-bin 2D histograms of the box centres (x, y) and sizes (width, height).
//
// labels_correlogram.jpg: seaborn's pairplot of the columns x, y, width, height as upstream calls it
// (corner=True, kind='hist', 50 bins on the diagonal, pmax 0.9): a (10, 10) x 200 dpi figure, a 4 x 4 grid
// of which the diagonal and the lower triangle are drawn (corner=True leaves the upper triangle empty). The
// diagonal holds each variable's histogram in 50 bins, the panel in row r, column c < r the 2D histogram of
// variable c (across) against variable r (up) in numpy's 'auto' bins (seaborn's default there). Each axis
// spans its variable's min..max, shared along the grid's columns and rows; tick labels on the outer panels
// only, as matplotlib's shared axes. At most the first 1,000,000 labels are counted.
//
// Drawn with the charts' primitives (plot_canvas.h); seaborn's colour ramp is approximated, the counts are
// exact.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <opencv2/core.hpp>

#include "kestrel/data/dataset_index.h"

namespace kestrel::eval {

constexpr int kLabelsSize = 1600;                       // (8, 8) x 200
constexpr int kCorrelogramSize = 2000;                  // (10, 10) x 200: seaborn's 2.5 inches a variable
constexpr int64_t kCorrelogramMaxLabels = 1'000'000;    // the labels the correlogram counts at most
constexpr int64_t kCorrelogramDiagonalBins = 50;        // diag_kws=dict(bins=50)
constexpr int64_t kMaxAutoBins = 400;                   // a cap on numpy's 'auto' rule: cells of a pixel or more

// The plotting area of each panel in upstream's order: 0 class histogram, 1 boxes, 2 x-y, 3 width-height.
cv::Rect labels_panel(int i);

// labels: [n, 5] class, cx, cy, w, h (normalised), any dtype or device. The histogram has one bar per
// class up to the largest of (largest class + 1, names.size()); its y axis runs to 1.05 x the tallest bar.
cv::Mat render_labels(const at::Tensor& labels, const std::vector<std::string>& names);

// Writes labels.jpg at `path` and the correlogram beside it, at correlogram_path(path). The folder must exist.
void plot_labels(const at::Tensor& labels, const std::vector<std::string>& names, const std::string& path);

// The correlogram's file next to a labels.jpg: .../labels.jpg -> .../labels_correlogram.jpg (<stem>_correlogram<ext>).
std::string correlogram_path(const std::string& labels_path);

// Equal-width histogram bins [lo, hi] as numpy.histogram_bin_edges: over the values' min..max, widened by 0.5
// a side when they are all equal, 0..1 when there are none. n > 0: n bins; n = 0: numpy's 'auto' count (the
// narrower of Sturges' width range / (log2 size + 1) and Freedman-Diaconis' 2 IQR / cbrt(size), Sturges'
// alone when the IQR is 0), at most kMaxAutoBins. A value falls in bin floor((v - lo) / (hi - lo) * n), the
// maximum in the last one.
struct HistogramBins {
  double lo = 0, hi = 1;
  int64_t n = 1;
};
HistogramBins histogram_bins(const at::Tensor& values, int64_t n);

// The counts drawn in the correlogram's panel (row, col), variables 0 x, 1 y, 2 width, 3 height (labels as
// for render_labels). row == col: the variable's histogram, x = its 50 bins, counts [50]; row > col: the 2D
// histogram, x = variable col's 'auto' bins (across), y = variable row's (up), counts [x.n, y.n]. int64, CPU.
struct PanelHistogram {
  HistogramBins x, y;  // y is unused on the diagonal
  at::Tensor counts;
};
PanelHistogram correlogram_histogram(const at::Tensor& labels, int row, int col);

// The plotting area of the correlogram's panel (row, col), 0..3 each; also for the empty upper triangle.
cv::Rect correlogram_panel(int row, int col);
cv::Mat render_correlogram(const at::Tensor& labels);

// Every box row of the records as [n, 5] float (upstream's np.concatenate(dataset.labels)).
at::Tensor label_rows(const std::vector<data::ImageRecord>& records);

}  // namespace kestrel::eval
