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

// ---- the CPU loops: the kernels' arithmetic on channels-last [M, C] rows -------------------------------

template <typename T>
void forward_rows(const T* x, const float* scale, const float* shift, T* y, int64_t rows, int64_t channels) {
  at::parallel_for(0, rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t i = r * channels + c;
        y[i] = static_cast<T>(detail::silu(static_cast<float>(x[i]) * scale[c] + shift[c]));
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
      const float xhat = (static_cast<float>(x[i]) - mean[c]) * invstd[c];
      const float dz = static_cast<float>(dy[i]) * detail::silu_grad(xhat * weight[c] + bias[c]);
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
                         const float* bias, const float* gain, const float* k1, const float* k2, T* dx, int64_t rows,
                         int64_t channels) {
  at::parallel_for(0, rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t i = r * channels + c;
        const float xhat = (static_cast<float>(x[i]) - mean[c]) * invstd[c];
        const float dz = static_cast<float>(dy[i]) * detail::silu_grad(xhat * weight[c] + bias[c]);
        dx[i] = static_cast<T>(gain[c] * (dz - k1[c] - xhat * k2[c]));
      }
  });
}

at::Tensor channels_last(const at::Tensor& t) { return t.contiguous(at::MemoryFormat::ChannelsLast); }
at::Tensor per_channel(const at::Tensor& t) { return t.detach().to(at::kFloat).contiguous(); }

// y = silu(x * scale + shift)
at::Tensor forward_output(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift) {
  if (x.is_cuda()) return detail::bn_silu_forward_cuda(x, scale, shift);
  const at::Tensor in = channels_last(x);
  at::Tensor y = at::empty_like(in, at::MemoryFormat::ChannelsLast);
  const int64_t channels = in.size(1), rows = in.numel() / std::max<int64_t>(channels, 1);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.scalar_type(), "bn_silu_forward", [&] {
    forward_rows(in.data_ptr<scalar_t>(), scale.data_ptr<float>(), shift.data_ptr<float>(), y.data_ptr<scalar_t>(),
                 rows, channels);
  });
  return y;
}

at::Tensor backward_sums(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& invstd,
                         const at::Tensor& weight, const at::Tensor& bias) {
  if (x.is_cuda()) return detail::bn_silu_backward_sums_cuda(dy, x, mean, invstd, weight, bias);
  const int64_t channels = x.size(1), rows = x.numel() / std::max<int64_t>(channels, 1);
  at::Tensor sums = at::zeros({2, channels}, mean.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bn_silu_backward_sums", [&] {
    backward_sums_rows(dy.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), mean.data_ptr<float>(), invstd.data_ptr<float>(),
                       weight.data_ptr<float>(), bias.data_ptr<float>(), sums.data_ptr<float>(), rows, channels);
  });
  return sums;
}

at::Tensor backward_input(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& invstd,
                          const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& gain, const at::Tensor& k1,
                          const at::Tensor& k2) {
  if (x.is_cuda()) return detail::bn_silu_backward_input_cuda(dy, x, mean, invstd, weight, bias, gain, k1, k2);
  at::Tensor dx = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  const int64_t channels = x.size(1), rows = x.numel() / std::max<int64_t>(channels, 1);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bn_silu_backward_input", [&] {
    backward_input_rows(dy.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), mean.data_ptr<float>(), invstd.data_ptr<float>(),
                        weight.data_ptr<float>(), bias.data_ptr<float>(), gain.data_ptr<float>(), k1.data_ptr<float>(),
                        k2.data_ptr<float>(), dx.data_ptr<scalar_t>(), rows, channels);
  });
  return dx;
}

// Inputs: x (channels-last), weight, bias, and the batch's mean and invstd [C] (computed outside, no
// gradient of their own: the backward formula is BN's whole gradient through them).
struct BatchNormSiLU : torch::autograd::Function<BatchNormSiLU> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            const at::Tensor& mean, const at::Tensor& invstd) {
    const at::Tensor w = per_channel(weight), b = per_channel(bias);
    const at::Tensor scale = invstd * w;  // z = (x − mean)·invstd·w + b = x·scale + shift
    const at::Tensor shift = b - mean * scale;
    ctx->save_for_backward({x, w, b, mean, invstd});
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return forward_output(x, scale, shift);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &b = saved[2], &mean = saved[3], &invstd = saved[4];
    const at::Tensor dy = channels_last(grads[0].to(x.scalar_type()));
    const double count = static_cast<double>(x.numel() / x.size(1));
    const at::Tensor sums = backward_sums(dy, x, mean, invstd, w, b);  // [2, C]
    const at::Tensor dz_sum = sums[0], dz_xhat_sum = sums[1];
    const at::Tensor dx = backward_input(dy, x, mean, invstd, w, b, (w * invstd).contiguous(), (dz_sum / count).contiguous(),
                                         (dz_xhat_sum / count).contiguous());
    const auto weight_dtype = static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    return {dx, dz_xhat_sum.to(weight_dtype), dz_sum.to(weight_dtype), at::Tensor(), at::Tensor()};
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
  const double eps = bn.options.eps();
  at::Tensor mean, invstd;
  {
    torch::NoGradGuard no_grad;
    if (input.is_cuda()) {
      std::tie(mean, invstd) = at::batch_norm_stats(input, eps);  // float32 [C]
    } else {
      at::Tensor var;
      std::tie(var, mean) = at::var_mean(input.to(at::kFloat), {0, 2, 3}, /*correction=*/0);
      invstd = (var + eps).rsqrt();
    }
    // BatchNorm2d's running statistics: momentum m, unbiased variance; left alone while recomputing.
    const int64_t count = input.numel() / input.size(1);
    if (bn.options.track_running_stats() && !recomputing()) {
      if (!bn.options.momentum()) fail("fused BN-SiLU: a BatchNorm2d without momentum (cumulative average) is not supported");
      const double m = *bn.options.momentum();
      const at::Tensor var = invstd.to(at::kDouble).pow(-2) - eps;  // biased, back from invstd
      bn.running_mean.mul_(1 - m).add_(mean.to(bn.running_mean.scalar_type()), m);
      bn.running_var.mul_(1 - m).add_((var * (static_cast<double>(count) / std::max<int64_t>(count - 1, 1)))
                                          .to(bn.running_var.scalar_type()), m);
      bn.num_batches_tracked.add_(1);
    }
  }
  return BatchNormSiLU::apply(input, bn.weight, bn.bias, mean, invstd);
}

}  // namespace kestrel::models
