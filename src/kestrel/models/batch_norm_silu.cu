// The CUDA kernels of batch_norm_silu (see batch_norm_silu.h). x and dy are channels-last [N, C, H, W],
// i.e. `rows` = N·H·W rows of C channels. Per-channel values are float32.
//  - The three row kernels use blocks of 32 channels x 8 (or 16) rows: a warp reads 32 consecutive
//    channels of one row, each thread keeps its channel's constants in registers and walks rows with a
//    grid stride (no per-element division to find the channel).
//  - sums_kernel adds a block's partial sums in shared memory, then one atomicAdd per channel and block
//    into the zeroed [2, C] result (so the sums' last bits depend on the order blocks finish).
//  - prepare_kernel: one thread per channel (running statistics and the forward constants).
#include "kestrel/models/batch_norm_silu.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kestrel/core/error.h"

namespace kestrel::models::detail {
namespace {

constexpr int kChannels = 32;  // channels per block (threadIdx.x)
constexpr int kRows = 8;       // rows per block step in the elementwise kernels (threadIdx.y)
constexpr int kSumRows = 16;   // ... in sums_kernel

// Row blocks: enough to fill the GPU, at most 65535 (gridDim.y's limit), each thread at least a few rows.
dim3 row_grid(int64_t rows, int64_t channels, int rows_per_block, int64_t max_blocks) {
  const int64_t channel_blocks = (channels + kChannels - 1) / kChannels;
  const int64_t row_blocks = std::clamp<int64_t>((rows + rows_per_block * 4 - 1) / (rows_per_block * 4), 1,
                                                 std::max<int64_t>(std::min<int64_t>(max_blocks / channel_blocks, 65535), 1));
  return dim3(static_cast<unsigned>(channel_blocks), static_cast<unsigned>(row_blocks));
}

__global__ void prepare_kernel(const float* __restrict__ mean, const float* __restrict__ invstd,
                               const float* __restrict__ weight, const float* __restrict__ bias,
                               float* __restrict__ running_mean, float* __restrict__ running_var,
                               float* __restrict__ scale_shift, int64_t channels, bool update, double momentum,
                               long long count, double eps) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  prepare_channel(mean[c], invstd[c], weight[c], bias[c], scale_shift + c, scale_shift + channels + c, update, momentum,
                  count, eps, update ? running_mean + c : nullptr, update ? running_var + c : nullptr);
}

template <typename T>
__global__ void forward_kernel(const T* __restrict__ x, const float* __restrict__ scale_shift, T* __restrict__ y,
                               int64_t rows, int64_t channels) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(kChannels) + threadIdx.x;
  if (c >= channels) return;  // no barrier in this kernel
  const float scale = scale_shift[c], shift = scale_shift[channels + c];
  for (int64_t r = blockIdx.y * static_cast<int64_t>(kRows) + threadIdx.y; r < rows;
       r += static_cast<int64_t>(gridDim.y) * kRows) {
    const int64_t i = r * channels + c;
    y[i] = static_cast<T>(silu(static_cast<float>(x[i]) * scale + shift));
  }
}

template <typename T>
__global__ void sums_kernel(const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ mean,
                            const float* __restrict__ invstd, const float* __restrict__ weight,
                            const float* __restrict__ bias, float* __restrict__ sums, int64_t rows, int64_t channels) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(kChannels) + threadIdx.x;
  float dz_sum = 0.f, dz_xhat_sum = 0.f;
  if (c < channels) {
    const float mu = mean[c], is = invstd[c], w = weight[c], b = bias[c];
    for (int64_t r = blockIdx.y * static_cast<int64_t>(kSumRows) + threadIdx.y; r < rows;
         r += static_cast<int64_t>(gridDim.y) * kSumRows) {
      const int64_t i = r * channels + c;
      float xhat;
      const float dz = grad_at_bn_output(static_cast<float>(dy[i]), static_cast<float>(x[i]), mu, is, w, b, &xhat);
      dz_sum += dz;
      dz_xhat_sum += dz * xhat;
    }
  }
  // Every thread reaches the barrier (no early return above).
  __shared__ float partial[2][kSumRows][kChannels + 1];
  partial[0][threadIdx.y][threadIdx.x] = dz_sum;
  partial[1][threadIdx.y][threadIdx.x] = dz_xhat_sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    float a = 0.f, b = 0.f;
    for (int k = 0; k < kSumRows; ++k) {
      a += partial[0][k][threadIdx.x];
      b += partial[1][k][threadIdx.x];
    }
    atomicAdd(sums + c, a);
    atomicAdd(sums + channels + c, b);
  }
}

template <typename T>
__global__ void input_grad_kernel(const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ mean,
                                  const float* __restrict__ invstd, const float* __restrict__ weight,
                                  const float* __restrict__ bias, const float* __restrict__ sums, int64_t count,
                                  T* __restrict__ dx, int64_t rows, int64_t channels) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(kChannels) + threadIdx.x;
  if (c >= channels) return;  // no barrier in this kernel
  const float mu = mean[c], is = invstd[c], w = weight[c], b = bias[c];
  const float gain = w * is, k1 = sums[c] / static_cast<float>(count), k2 = sums[channels + c] / static_cast<float>(count);
  for (int64_t r = blockIdx.y * static_cast<int64_t>(kRows) + threadIdx.y; r < rows;
       r += static_cast<int64_t>(gridDim.y) * kRows) {
    const int64_t i = r * channels + c;
    float xhat;
    const float dz = grad_at_bn_output(static_cast<float>(dy[i]), static_cast<float>(x[i]), mu, is, w, b, &xhat);
    dx[i] = static_cast<T>(gain * (dz - k1 - xhat * k2));
  }
}

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
  const int threads = 128;
  prepare_kernel<<<static_cast<unsigned>((channels + threads - 1) / threads), threads, 0, stream>>>(
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
  const dim3 grid = row_grid(rows, channels, kRows, 65535 * 4), block(kChannels, kRows);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bn_silu_forward_cuda", [&] {
    forward_kernel<scalar_t><<<grid, block, 0, stream>>>(x.data_ptr<scalar_t>(), scale_shift.data_ptr<float>(),
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
  // About 2048 blocks: each adds its partial sums with one atomicAdd per channel.
  const dim3 grid = row_grid(rows, channels, kSumRows * 8, 2048), block(kChannels, kSumRows);
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bn_silu_backward_sums_cuda", [&] {
    sums_kernel<scalar_t><<<grid, block, 0, stream>>>(dy.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), mean.data_ptr<float>(),
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
  const dim3 grid = row_grid(rows, channels, kRows, 65535 * 4), block(kChannels, kRows);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bn_silu_backward_input_cuda", [&] {
    input_grad_kernel<scalar_t><<<grid, block, 0, stream>>>(
        dy.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), mean.data_ptr<float>(), invstd.data_ptr<float>(),
        weight.data_ptr<float>(), bias.data_ptr<float>(), sums.data_ptr<float>(), count, dx.data_ptr<scalar_t>(), rows,
        channels);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return dx;
}

}  // namespace kestrel::models::detail
