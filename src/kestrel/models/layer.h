// The unit the model YAML lists: one row of [from, number, module, args] becomes one Layer.
#pragma once
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

namespace kestrel::models {

class Layer : public torch::nn::Module {
 public:
  // Most layers read one input (the output of the layer named by `from`).
  virtual at::Tensor forward(const at::Tensor& x) = 0;
  // Layers with several `from` indices (Concat, Shortcut) override this; inputs are in `from` order.
  virtual at::Tensor forward_inputs(const std::vector<at::Tensor>& xs) { return forward(xs.at(0)); }
  // Folds batch norm (and re-parameterisable branches) into convolutions for inference.
  virtual void fuse() {}
};

}  // namespace kestrel::models
