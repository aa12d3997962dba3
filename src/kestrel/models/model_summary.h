// Counting a model the way model_facts.md does, and the layer table `kestrel models` prints.
#pragma once
#include <string>
#include <vector>

#include "kestrel/models/yolo_model.h"

namespace kestrel::models {

struct ModelStats {
  int64_t layers = 0;           // rows of the YAML (top-level modules)
  int64_t parameters = 0;
  int64_t trainable = 0;        // parameters with requires_grad
  int64_t buffer_elements = 0;  // BN running stats, num_batches_tracked, anchors ...
  int64_t state_keys = 0;       // entries of the state dict
  double gflops = 0;            // 2 x MACs of all convolutions for one img x img image
  std::vector<double> strides;
};

// Convolution GFLOPs at img x img: measured by a forward pass at 2 x max stride and scaled by
// (img / probe)^2, which is exact when img is a multiple of the max stride (every feature map then
// scales by the same factor) and upstream's estimate (model_info's) for other sizes.
double conv_gflops(YoloModel& model, int64_t img);
ModelStats model_stats(YoloModel& model, int64_t img = 640);

// The upstream-style table: index, from, n, params, module, arguments; then a summary line.
std::string format_model_table(YoloModel& model, const ModelStats& stats, int64_t img);

}  // namespace kestrel::models
