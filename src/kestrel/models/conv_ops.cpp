#include "kestrel/models/conv_ops.h"

#include <torch/nn/options/batchnorm.h>
#include <torch/utils.h>

#include "kestrel/core/error.h"
#include "kestrel/models/parameter_budget.h"

namespace kestrel::models {
namespace {
thread_local FlopCounter* active_counter = nullptr;
}

FlopCounter::FlopCounter() : previous_(active_counter) { active_counter = this; }
FlopCounter::~FlopCounter() { active_counter = previous_; }

torch::nn::Conv2d make_conv2d(const torch::nn::Conv2dOptions& o) {
  // LibTorch takes a kernel of 0 and fails later, in the weight initialisation, with an unrelated message;
  // a huge kernel or stride (upstream's largest are 7 and 4) runs for minutes or fails inside oneDNN.
  const auto positive = [](const char* what, const torch::ExpandingArray<2>& v) {
    for (int64_t x : *v)
      if (x < 1 || x > 64) fail("convolution: ", what, " must be in [1, 64], got ", x);
  };
  positive("kernel size", o.kernel_size());
  positive("stride", o.stride());
  positive("dilation", o.dilation());
  // weight [c_out, c_in / groups, kh, kw]; groups < 1 is left for Conv2d's own check.
  const int64_t in_per_group = o.groups() >= 1 ? o.in_channels() / o.groups() : o.in_channels();
  charge_parameters("convolution", {o.out_channels(), in_per_group, (*o.kernel_size())[0], (*o.kernel_size())[1]});
  if (o.bias()) charge_parameters("convolution bias", {o.out_channels()});
  return torch::nn::Conv2d(o);
}

at::Tensor run_conv(torch::nn::Conv2dImpl& conv, const at::Tensor& x) {
  at::Tensor y = conv.forward(x);
  if (active_counter) {
    // weight [c_out, c_in/groups, kh, kw]; output [b, c_out, h, w]: one MAC per weight per output pixel.
    const double macs_per_pixel = static_cast<double>(conv.weight.numel());
    active_counter->add(2.0 * macs_per_pixel * static_cast<double>(y.size(0) * y.size(2) * y.size(3)));
  }
  return y;
}

torch::nn::Conv2d fold_batch_norm(const torch::nn::Conv2dImpl& conv, const torch::nn::BatchNorm2dImpl& bn) {
  torch::NoGradGuard no_grad;
  // scale [c_out] = gamma / sqrt(running_var + eps)
  at::Tensor scale = bn.weight / at::sqrt(bn.running_var + bn.options.eps());
  at::Tensor bias = conv.bias.defined() ? conv.bias : at::zeros_like(bn.running_mean);
  const auto& o = conv.options;
  torch::nn::Conv2d fused(torch::nn::Conv2dOptions(o.in_channels(), o.out_channels(), o.kernel_size())
                              .stride(o.stride())
                              .padding(o.padding())
                              .dilation(o.dilation())
                              .groups(o.groups())
                              .bias(true));
  fused->to(conv.weight.device(), conv.weight.scalar_type());
  fused->weight.copy_(conv.weight * scale.reshape({-1, 1, 1, 1}));
  fused->bias.copy_((bias - bn.running_mean) * scale + bn.bias);
  return fused;
}

}  // namespace kestrel::models
