// Convolution with operation counting, and folding BatchNorm into a convolution.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include "kestrel/models/batch_norm.h"

namespace kestrel::models {

// "same" padding of upstream's autopad: k // 2 for odd kernels.
inline int64_t autopad(int64_t kernel, int64_t padding = -1) { return padding >= 0 ? padding : kernel / 2; }

// A model's convolution layer: charges its weight (and bias) to the thread's ParameterBudget before
// allocating them (parameter_budget.h). The model builder creates every Conv2d through here.
torch::nn::Conv2d make_conv2d(const torch::nn::Conv2dOptions& options);

// Every convolution of the model goes through here so that FlopCounter sees it.
at::Tensor run_conv(torch::nn::Conv2dImpl& conv, const at::Tensor& x);

// While alive, counts 2 x multiply-accumulates of every run_conv on this thread (the convention of
// model_facts.md: convolution FLOPs only, batch norm and activations excluded).
class FlopCounter {
 public:
  FlopCounter();
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;
  double flops() const { return flops_; }
  void add(double flops) { flops_ += flops; }

 private:
  double flops_ = 0;
  FlopCounter* previous_;
};

// bn(conv(x)) as one convolution with bias (same geometry as `conv`, eval-mode BN folded in):
// W' = W * s, b' = (b - running_mean) * s + beta, s = gamma / sqrt(running_var + eps).
torch::nn::Conv2d fold_batch_norm(const torch::nn::Conv2dImpl& conv, const torch::nn::BatchNorm2dImpl& bn);

}  // namespace kestrel::models
