// YOLOv5's validation and training charts (utils/metrics.py and utils/plots.py of ultralytics/yolov5
// v7.0) as PNG files: confusion_matrix.png, PR_curve.png, F1/P/R_curve.png and results.png. Drawn with
// OpenCV's core+imgproc (Hershey font, no matplotlib), written with data::write_png. The layout follows
// upstream's figures at upstream's pixel sizes (figsize x dpi) so files line up side by side; styling is
// approximate, the numbers are not.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kestrel/eval/ap_metrics.h"

namespace kestrel::eval {

// Upstream ConfusionMatrix: rows = predicted class, columns = true class, index nc = background.
class ConfusionMatrix {
 public:
  explicit ConfusionMatrix(int64_t nc, double conf = 0.25, double iou_thres = 0.45);

  // One image, as val.py calls it: detections [N, 6] (x1, y1, x2, y2, conf, cls; N may be 0 or the tensor
  // undefined), labels [M, 5] (cls, x1, y1, x2, y2), both in the same pixel space.
  // Upstream rules: detections with conf > conf count; gt/detection pairs with IoU > iou_thres are
  // candidates regardless of class; each detection keeps its highest-IoU gt, then each gt its highest-IoU
  // detection. A matched gt adds to [detected class, gt class], an unmatched gt to [background, gt class],
  // an unmatched detection to [detected class, background] — but only when the image had at least one
  // match (v7.0's `if n:`; an image whose detections all miss adds no background false positives).
  // Classes outside [0, nc) are an error.
  void process_batch(const at::Tensor& detections, const at::Tensor& labels);

  int64_t nc() const { return nc_; }
  int64_t count(int64_t predicted, int64_t true_class) const { return counts_[predicted * (nc_ + 1) + true_class]; }
  at::Tensor matrix() const;  // [nc + 1, nc + 1] int64

 private:
  int64_t nc_;
  double conf_, iou_thres_;
  std::vector<int64_t> counts_;  // row-major [(nc + 1) x (nc + 1)]
};

// Pixel sizes of the charts: upstream's figsize times its dpi.
constexpr int kConfusionWidth = 3000, kConfusionHeight = 2250;  // (12, 9) x 250
constexpr int kCurveWidth = 2250, kCurveHeight = 1500;          // (9, 6) x 250
constexpr int kResultsWidth = 2400, kResultsHeight = 1200;      // (12, 6) x 200
constexpr int kEvolveWidth = 2000, kEvolveRowHeight = 400;      // (10, 12) x 200 for 6 rows of 5

// confusion_matrix.png: each column normalised by its sum (the true class), cells under 0.005 blank,
// values printed when nc < 30, class names on the axes when names.size() == nc < 99.
void plot_confusion_matrix(const ConfusionMatrix& cm, const std::vector<std::string>& names, const std::string& path);

// PR_curve.png: precision against recall at IoU 0.5 per class (grey when 21 classes or more, named
// otherwise) and their mean, labelled "all classes 0.xxx mAP@0.5". `names` is indexed by class id.
// The mean curve averages every class with targets; upstream's averages only those with predictions
// (its py skips the others), so the two differ when a class was never predicted. The label is the same.
void plot_pr_curve(const ApPerClass& m, const std::vector<std::string>& names, const std::string& path);

enum class CurveKind { f1, precision, recall };
// F1_curve.png / P_curve.png / R_curve.png: the metric against confidence per class and the mean,
// labelled "all classes 0.xx at 0.xxx" (the smoothed mean's maximum and where it is, as upstream; for
// YOLOv7's metric the unsmoothed mean, as YOLOv7). Drawn only where some prediction was correct (m.scored):
// val.py and test.py call ap_per_class(plot=True) only then.
void plot_confidence_curve(const ApPerClass& m, CurveKind kind, const std::vector<std::string>& names,
                           const std::string& path);

// results.png from a YOLOv5 results.csv (train/run_files.h): 2 x 5 panels, train box/obj/cls, P, R on top,
// val box/obj/cls, mAP50, mAP50-95 below, each against epoch with a Gaussian-smoothed (sigma 3) dotted line.
void plot_results(const std::string& csv_path, const std::string& path);

// Upstream's hist2d(x, y, n) colouring of a scatter plot: for each point, the log of the number of points in
// its cell of an (n - 1) x (n - 1) grid spanning the points' ranges (numpy's histogram2d / digitize rules;
// a range of one value is one cell).
std::vector<double> log_cell_density(const std::vector<double>& x, const std::vector<double>& y, int n);

// evolve.png (upstream's plot_evolve): one panel per hyperparameter, 5 a row, each generation's value against
// its fitness, coloured by log_cell_density(value, fitness, 20) through viridis, the fittest generation
// marked with a black '+', titled "key = value of the fittest" ('%.3g'). `values[g][k]`: generation g's
// value of keys[k]. Upstream's fixed 6 x 5 grid fails beyond 30 keys; here the rows grow.
void plot_evolve(const std::vector<std::string>& keys, const std::vector<std::vector<double>>& values,
                 const std::vector<double>& fitness, const std::string& path);

}  // namespace kestrel::eval
