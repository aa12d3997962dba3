// The three optimiser parameter groups of YOLOv5/YOLOv7, in upstream's order: biases (no weight
// decay, warm-up from warmup_bias_lr), weights with decay, normalisation weights without decay.
#pragma once
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

namespace kestrel::train {

struct ParamGroups {
  std::vector<at::Tensor> biases;        // every parameter named "bias"
  std::vector<at::Tensor> weights;       // convolution (and other) weights: decayed
  std::vector<at::Tensor> norm_weights;  // BatchNorm weights and YOLOv7's implicit knowledge: not decayed
};

// Every parameter of `model` lands in exactly one group (frozen ones too, as upstream).
ParamGroups split_parameters(const torch::nn::Module& model);

}  // namespace kestrel::train
