// A batch drawn as one image, upstream's plot_images (utils/plots.py v7.0): train_batch0.jpg of `kestrel
// data show`, and val.py's val_batch<i>_labels.jpg (ground truth) and val_batch<i>_pred.jpg (predictions
// with confidences). Boxes are drawn with data::box_label (annotate.h), the drawing detect uses.
#pragma once
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <opencv2/core.hpp>

#include "kestrel/data/loader.h"

namespace kestrel::data {

struct BatchImageOptions {
  int max_images = 16;             // upstream's max_subplots (a 4 x 4 grid)
  int max_size = 1920;             // the grid's side is at most this (tiles shrink, never grow)
  double conf_thres = 0.25;        // predictions drawn above this confidence (upstream's plot threshold)
  std::vector<std::string> paths;  // image file per batch position: its name (40 characters) on the tile
};

// Upstream's geometry: ns = ceil(sqrt(n)) tiles a side on a white ns x ns grid, image i at column i / ns,
// row i % ns (filled column by column); tiles scaled by s = min(1, max_size / ns / max(H, W)) to
// ceil(s * H) x ceil(s * W); a white 2-pixel frame around each tile; line width round(fs / 10) with
// fs = int((tile h + tile w) * ns * 0.01), at least 1.
// The batch's own targets, labelled with the class name.
cv::Mat render_batch(const Batch& batch, const std::vector<std::string>& names, const BatchImageOptions& options = {});

// predictions: one [n, 6] tensor per batch image (x1, y1, x2, y2, conf, cls in pixels of the batch image,
// as non_max_suppression returns them); those above conf_thres labelled "name 0.9".
cv::Mat render_batch(const Batch& batch, const std::vector<at::Tensor>& predictions, const std::vector<std::string>& names,
                     const BatchImageOptions& options = {});

// Where image i of the batch lands in the rendered grid (for tests and callers that annotate further).
cv::Rect batch_tile(const Batch& batch, int64_t i, const BatchImageOptions& options = {});

}  // namespace kestrel::data
