// Launches the kernels of batch_norm_silu_kernels.cuh (see batch_norm_silu.h): argument checks and launch
// shapes.
#include "kestrel/models/batch_norm_silu.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kestrel/core/error.h"
#include "kestrel/models/batch_norm_silu_kernels.cuh"

namespace kestrel::models::detail {
namespace {

void check_rows(const char* what, const at::Tensor& x, std::initializer_list<const at::Tensor*> same_layout) {
  if (!x.is_cuda() || x.dim() != 4 || !x.is_contiguous(at::MemoryFormat::ChannelsLast))
    fail(what, ": x must be a 4-d channels-last CUDA tensor");
  for (const at::Tensor* t : same_layout)
    if (t->sizes() != x.sizes() || t->scalar_type() != x.scalar_type() || t->device() != x.device() ||
        !t->is_contiguous(at::MemoryFormat::ChannelsLast))
      fail(what, ": the gradient must match x (shape, dtype, device, channels-last)");
}

void check_per_channel(const char* what, int64_t numel, const at::Device& device,
                       std::initializer_list<const at::Tensor*> tensors) {
  for (const at::Tensor* t : tensors)
    if (t->numel() != numel || t->scalar_type() != at::kFloat || t->device() != device || !t->is_contiguous())
      fail(what, ": per-channel tensors must be float32, contiguous, ", numel, " values on ", device);
}

}  // namespace

at::Tensor bn_silu_prepare_cuda(const at::Tensor& mean, const at::Tensor& invstd, const at::Tensor& weight,
                                const at::Tensor& bias, const at::Tensor& running_mean, const at::Tensor& running_var,
                                bool update, double momentum, int64_t count, double eps) {
  const int64_t channels = mean.numel();
  check_per_channel("bn_silu_prepare_cuda", channels, mean.device(), {&mean, &invstd, &weight, &bias});
  if (update) check_per_channel("bn_silu_prepare_cuda", channels, mean.device(), {&running_mean, &running_var});
  const c10::cuda::CUDAGuard device_guard(mean.device());
  at::Tensor scale_shift = at::empty({2, channels}, mean.options());
  if (channels == 0) return scale_shift;
  const auto stream = at::cuda::getCurrentCUDAStream();
  const Launch launch = prepare_launch(channels);
  prepare_kernel<<<launch.grid, launch.block, 0, stream>>>(
      mean.data_ptr<float>(), invstd.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
      update ? running_mean.data_ptr<float>() : nullptr, update ? running_var.data_ptr<float>() : nullptr,
      scale_shift.data_ptr<float>(), channels, update, momentum, static_cast<long long>(count), eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return scale_shift;
}

at::Tensor bn_silu_forward_cuda(const at::Tensor& x, const at::Tensor& scale_shift) {
  check_rows("bn_silu_forward_cuda", x, {});
  check_per_channel("bn_silu_forward_cuda", 2 * x.size(1), x.device(), {&scale_shift});
  const c10::cuda::CUDAGuard device_guard(x.device());
  at::Tensor y = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  const int64_t channels = x.size(1), rows = channels == 0 ? 0 : x.numel() / channels;
  if (rows == 0 || channels == 0) return y;
  const auto stream = at::cuda::getCurrentCUDAStream();
  const Launch launch = elementwise_launch(rows, channels);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bn_silu_forward_cuda", [&] {
    forward_kernel<scalar_t><<<launch.grid, launch.block, 0, stream>>>(x.data_ptr<scalar_t>(), scale_shift.data_ptr<float>(),
                                                         y.data_ptr<scalar_t>(), rows, channels);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

at::Tensor bn_silu_backward_sums_cuda(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean,
                                      const at::Tensor& invstd, const at::Tensor& weight, const at::Tensor& bias) {
  check_rows("bn_silu_backward_sums_cuda", x, {&dy});
  check_per_channel("bn_silu_backward_sums_cuda", x.size(1), x.device(), {&mean, &invstd, &weight, &bias});
  const c10::cuda::CUDAGuard device_guard(x.device());
  const int64_t channels = x.size(1), rows = channels == 0 ? 0 : x.numel() / channels;
  at::Tensor sums = at::zeros({2, channels}, mean.options());
  if (rows == 0 || channels == 0) return sums;
  const Launch launch = sums_launch(rows, channels);
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bn_silu_backward_sums_cuda", [&] {
    sums_kernel<scalar_t><<<launch.grid, launch.block, 0, stream>>>(dy.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), mean.data_ptr<float>(),
                                                      invstd.data_ptr<float>(), weight.data_ptr<float>(),
                                                      bias.data_ptr<float>(), sums.data_ptr<float>(), rows, channels);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return sums;
}

at::Tensor bn_silu_backward_input_cuda(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean,
                                       const at::Tensor& invstd, const at::Tensor& weight, const at::Tensor& bias,
                                       const at::Tensor& sums, int64_t count) {
  check_rows("bn_silu_backward_input_cuda", x, {&dy});
  check_per_channel("bn_silu_backward_input_cuda", x.size(1), x.device(), {&mean, &invstd, &weight, &bias});
  check_per_channel("bn_silu_backward_input_cuda", 2 * x.size(1), x.device(), {&sums});
  const c10::cuda::CUDAGuard device_guard(x.device());
  at::Tensor dx = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  const int64_t channels = x.size(1), rows = channels == 0 ? 0 : x.numel() / channels;
  if (rows == 0 || channels == 0) return dx;
  const auto stream = at::cuda::getCurrentCUDAStream();
  const Launch launch = elementwise_launch(rows, channels);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bn_silu_backward_input_cuda", [&] {
    input_grad_kernel<scalar_t><<<launch.grid, launch.block, 0, stream>>>(
        dy.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), mean.data_ptr<float>(), invstd.data_ptr<float>(),
        weight.data_ptr<float>(), bias.data_ptr<float>(), sums.data_ptr<float>(), count, dx.data_ptr<scalar_t>(), rows,
        channels);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return dx;
}

}  // namespace kestrel::models::detail
