// labels.jpg: upstream's plot_labels (utils/plots.py v7.0), written at the start of training from the
// training split's labels. A (8, 8) x 200 dpi figure of four panels: instances per class (bars in the
// class colours, class names under them when there are fewer than 30), the first 1000 boxes drawn
// centred (their sizes side by side), and 50 x 50-bin 2D histograms of the box centres (x, y) and sizes
// (width, height). Drawn with the charts' primitives (plot_canvas.h); seaborn's colour ramp is
// approximated, the counts are exact. labels_correlogram.jpg (seaborn's pairplot) is not drawn.
#pragma once
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <opencv2/core.hpp>

#include "kestrel/data/dataset_index.h"

namespace kestrel::eval {

constexpr int kLabelsSize = 1600;  // (8, 8) x 200

// The plotting area of each panel in upstream's order: 0 class histogram, 1 boxes, 2 x-y, 3 width-height.
cv::Rect labels_panel(int i);

// labels: [n, 5] class, cx, cy, w, h (normalised), any dtype or device. The histogram has one bar per
// class up to the largest of (largest class + 1, names.size()); its y axis runs to 1.05 x the tallest bar.
cv::Mat render_labels(const at::Tensor& labels, const std::vector<std::string>& names);
void plot_labels(const at::Tensor& labels, const std::vector<std::string>& names, const std::string& path);

// Every box row of the records as [n, 5] float (upstream's np.concatenate(dataset.labels)).
at::Tensor label_rows(const std::vector<data::ImageRecord>& records);

}  // namespace kestrel::eval
