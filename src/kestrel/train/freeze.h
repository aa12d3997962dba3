// Upstream's --freeze (parameters of chosen layers get no gradient and no update), the layer selection
// it shares with --checkpoint, and --freeze-bn (BatchNorm statistics kept fixed).
#pragma once
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "kestrel/models/yolo_model.h"

namespace kestrel::train {

// [n] means layers 0..n-1 ([0]: none); a longer list means exactly those layer indices.
std::vector<int> selected_layers(const std::vector<int>& spec);

// Turns off requires_grad of the parameters of the selected layers ("model.<i>.…"), on for the rest.
// Returns the frozen parameters' names, in the model's order (upstream logs "freezing <name>" for each).
std::vector<std::string> freeze_layers(models::YoloModel& model, const std::vector<int>& spec);

// Every BatchNorm of `model` in eval mode: normalises with, and no longer updates, its running statistics.
void set_batchnorm_eval(torch::nn::Module& model);

}  // namespace kestrel::train
