// State dicts with upstream PyTorch keys ("model.0.conv.weight", "model.0.bn.running_mean", ...):
// parameters and buffers of every module, in PyTorch's order.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

namespace kestrel::models {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Parameters then buffers of each module, modules in registration order (= Python's state_dict()).
NamedTensors state_dict(const torch::nn::Module& module);

struct LoadReport {
  size_t loaded = 0;
  std::vector<std::string> missing;     // in the model, not in the file
  std::vector<std::string> unexpected;  // in the file, not in the model
  std::vector<std::string> mismatched;  // same key, different shape ("key: file [a, b] vs model [c, d]") or integers for floats
  bool complete() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  std::string describe(size_t max_items = 20) const;
};

// Copies matching tensors into the module (dtype converted, device kept). strict: any missing,
// unexpected or mismatched key is an error naming `source` and listing them; not strict: what
// matches is loaded and the report says what did not (upstream's partial --weights transfer).
LoadReport load_state_dict(torch::nn::Module& module, const NamedTensors& tensors, bool strict, const std::string& source);

}  // namespace kestrel::models
