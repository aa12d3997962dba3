#include "kestrel/models/batch_norm_silu.h"

#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "kestrel/core/error.h"
#include "kestrel/models/checkpoint.h"

namespace kestrel::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- the CPU twins of the kernels: the same per-element code on channels-last [rows, C] -------------------

void prepare_channels(const at::Tensor& mean, const at::Tensor& invstd, const at::Tensor& w, const at::Tensor& b,
                      const at::Tensor& running_mean, const at::Tensor& running_var, bool update, double momentum,
                      int64_t count, double eps, at::Tensor& scale_shift) {
  const int64_t channels = mean.numel();
  float* out = scale_shift.data_ptr<float>();
  for (int64_t c = 0; c < channels; ++c)
    detail::prepare_channel(mean.data_ptr<float>()[c], invstd.data_ptr<float>()[c], w.data_ptr<float>()[c],
                            b.data_ptr<float>()[c], out + c, out + channels + c, update, momentum, count, eps,
                            update ? running_mean.data_ptr<float>() + c : nullptr,
                            update ? running_var.data_ptr<float>() + c : nullptr);
}

template <typename T>
void forward_rows(const T* x, const float* scale_shift, T* y, int64_t rows, int64_t channels) {
  at::parallel_for(0, rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t i = r * channels + c;
        y[i] = static_cast<T>(detail::silu(static_cast<float>(x[i]) * scale_shift[c] + scale_shift[channels + c]));
      }
  });
}

// sums [2, C]: Σ dz, Σ dz·x̂ (double accumulators: the CPU is the reference).
template <typename T>
void backward_sums_rows(const T* dy, const T* x, const float* mean, const float* invstd, const float* weight,
                        const float* bias, float* sums, int64_t rows, int64_t channels) {
  std::vector<double> dz_sum(static_cast<size_t>(channels)), dz_xhat_sum(static_cast<size_t>(channels));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t i = r * channels + c;
      float xhat = 0;
      const float dz = detail::grad_at_bn_output(static_cast<float>(dy[i]), static_cast<float>(x[i]), mean[c], invstd[c],
                                                 weight[c], bias[c], &xhat);
      dz_sum[static_cast<size_t>(c)] += dz;
      dz_xhat_sum[static_cast<size_t>(c)] += static_cast<double>(dz) * xhat;
    }
  for (int64_t c = 0; c < channels; ++c) {
    sums[c] = static_cast<float>(dz_sum[static_cast<size_t>(c)]);
    sums[channels + c] = static_cast<float>(dz_xhat_sum[static_cast<size_t>(c)]);
  }
}

template <typename T>
void backward_input_rows(const T* dy, const T* x, const float* mean, const float* invstd, const float* weight,
                         const float* bias, const float* sums, int64_t count, T* dx, int64_t rows, int64_t channels) {
  at::parallel_for(0, rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t i = r * channels + c;
        float xhat = 0;
        const float dz = detail::grad_at_bn_output(static_cast<float>(dy[i]), static_cast<float>(x[i]), mean[c],
                                                   invstd[c], weight[c], bias[c], &xhat);
        const float k1 = sums[c] / static_cast<float>(count), k2 = sums[channels + c] / static_cast<float>(count);
        dx[i] = static_cast<T>(weight[c] * invstd[c] * (dz - k1 - xhat * k2));
      }
  });
}

at::Tensor channels_last(const at::Tensor& t) { return t.contiguous(at::MemoryFormat::ChannelsLast); }
at::Tensor per_channel(const at::Tensor& t) { return t.detach().to(at::kFloat).contiguous(); }
int64_t rows_of(const at::Tensor& x) { return x.size(1) == 0 ? 0 : x.numel() / x.size(1); }

[[noreturn]] void no_cuda() { fail("fused BN-SiLU: a CUDA tensor, but this kestrel was built without CUDA"); }

// scale_shift [2, C]; running statistics updated in place when `update`.
at::Tensor prepare(const at::Tensor& mean, const at::Tensor& invstd, const at::Tensor& w, const at::Tensor& b,
                   BatchNorm2dImpl& bn, bool update, double momentum, int64_t count) {
  if (mean.is_cuda()) {
#ifdef KESTREL_WITH_CUDA
    return detail::bn_silu_prepare_cuda(mean, invstd, w, b, bn.running_mean, bn.running_var, update, momentum, count,
                                        bn.options.eps());
#else
    no_cuda();
#endif
  }
  at::Tensor scale_shift = at::empty({2, mean.numel()}, mean.options());
  prepare_channels(mean, invstd, w, b, bn.running_mean, bn.running_var, update, momentum, count, bn.options.eps(),
                   scale_shift);
  return scale_shift;
}

at::Tensor forward_output(const at::Tensor& x, const at::Tensor& scale_shift) {
  if (x.is_cuda()) {
#ifdef KESTREL_WITH_CUDA
    return detail::bn_silu_forward_cuda(x, scale_shift);
#else
    no_cuda();
#endif
  }
  at::Tensor y = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bn_silu_forward", [&] {
    forward_rows(x.data_ptr<scalar_t>(), scale_shift.data_ptr<float>(), y.data_ptr<scalar_t>(), rows_of(x), x.size(1));
  });
  return y;
}

at::Tensor backward_sums(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& invstd,
                         const at::Tensor& weight, const at::Tensor& bias) {
  if (x.is_cuda()) {
#ifdef KESTREL_WITH_CUDA
    return detail::bn_silu_backward_sums_cuda(dy, x, mean, invstd, weight, bias);
#else
    no_cuda();
#endif
  }
  at::Tensor sums = at::zeros({2, x.size(1)}, mean.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bn_silu_backward_sums", [&] {
    backward_sums_rows(dy.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), mean.data_ptr<float>(), invstd.data_ptr<float>(),
                       weight.data_ptr<float>(), bias.data_ptr<float>(), sums.data_ptr<float>(), rows_of(x), x.size(1));
  });
  return sums;
}

at::Tensor backward_input(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& invstd,
                          const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& sums) {
  if (x.is_cuda()) {
#ifdef KESTREL_WITH_CUDA
    return detail::bn_silu_backward_input_cuda(dy, x, mean, invstd, weight, bias, sums, rows_of(x));
#else
    no_cuda();
#endif
  }
  at::Tensor dx = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bn_silu_backward_input", [&] {
    backward_input_rows(dy.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), mean.data_ptr<float>(), invstd.data_ptr<float>(),
                        weight.data_ptr<float>(), bias.data_ptr<float>(), sums.data_ptr<float>(), rows_of(x),
                        dx.data_ptr<scalar_t>(), rows_of(x), x.size(1));
  });
  return dx;
}

// Inputs: x (channels-last), weight, bias, and the batch's mean and invstd [C] and the forward constants
// (computed outside, no gradient of their own: the backward formula is BN's whole gradient through them).
struct BatchNormSiLU : torch::autograd::Function<BatchNormSiLU> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            const at::Tensor& mean, const at::Tensor& invstd, const at::Tensor& scale_shift) {
    ctx->save_for_backward({x, per_channel(weight), per_channel(bias), mean, invstd});
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return forward_output(x, scale_shift);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &b = saved[2], &mean = saved[3], &invstd = saved[4];
    const at::Tensor dy = channels_last(grads[0].to(x.scalar_type()));
    const at::Tensor sums = backward_sums(dy, x, mean, invstd, w, b);  // [2, C]: Σ dz, Σ dz·x̂
    const at::Tensor dx = backward_input(dy, x, mean, invstd, w, b, sums);
    const auto weight_dtype = static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    return {dx, sums[1].to(weight_dtype), sums[0].to(weight_dtype), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool batch_norm_silu_supports(const at::Tensor& x) {
  const auto dtype = x.scalar_type();
  if (x.dim() != 4 || (dtype != at::kFloat && dtype != at::kHalf && dtype != at::kBFloat16)) return false;
  if (x.is_cpu()) return true;
#ifdef KESTREL_WITH_CUDA
  return x.is_cuda() && x.is_contiguous(at::MemoryFormat::ChannelsLast);
#else
  return false;
#endif
}

at::Tensor batch_norm_silu(BatchNorm2dImpl& bn, const at::Tensor& x) {
  if (!batch_norm_silu_supports(x))
    fail("fused BN-SiLU: no kernel for a ", x.scalar_type(), " tensor of ", x.dim(), " dimensions on ", x.device(),
         x.is_cuda() ? " (CUDA takes channels-last float, half or bfloat16)" : "");
  const at::Tensor input = x.is_cpu() ? channels_last(x) : x;
  const int64_t count = rows_of(input);
  if (count < 2) fail("fused BN-SiLU: training batch norm needs more than one value per channel, got ", count);
  const bool update = bn.options.track_running_stats() && !recomputing();  // not twice for one batch
  if (update && !bn.options.momentum())
    fail("fused BN-SiLU: a BatchNorm2d without momentum (cumulative average) is not supported");
  if (update && (bn.running_mean.scalar_type() != at::kFloat || bn.running_var.scalar_type() != at::kFloat))
    fail("fused BN-SiLU: running statistics must be float32");
  at::Tensor mean, invstd, scale_shift;
  {
    torch::NoGradGuard no_grad;
    if (input.is_cuda()) {
      std::tie(mean, invstd) = at::batch_norm_stats(input, bn.options.eps());  // float32 [C]
    } else {
      at::Tensor var;
      std::tie(var, mean) = at::var_mean(input.to(at::kFloat), {0, 2, 3}, /*correction=*/0);
      invstd = (var + bn.options.eps()).rsqrt();
    }
    scale_shift = prepare(mean, invstd, per_channel(bn.weight), per_channel(bn.bias), bn, update,
                          bn.options.momentum().value_or(0.0), count);
    if (update) bn.num_batches_tracked.add_(1);
  }
  return BatchNormSiLU::apply(input, bn.weight, bn.bias, mean, invstd, scale_shift);
}

}  // namespace kestrel::models
