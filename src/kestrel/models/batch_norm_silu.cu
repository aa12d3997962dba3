// The CUDA kernels of batch_norm_silu (see batch_norm_silu.h). x and dy are channels-last [N, C, H, W],
// i.e. rows of C channels: element i belongs to channel i % C. Per-channel values are float32.
//  - forward_kernel and input_grad_kernel: one element per thread, grid-stride.
//  - sums_kernel: blocks of 32 channels x 16 rows; each thread sums a strided set of rows of one channel,
//    the block adds its 16 partial sums in shared memory, and one atomicAdd per channel and block
//    writes to the [2, C] result (so the sums' last bits depend on the order blocks finish).
#include "kestrel/models/batch_norm_silu.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kestrel/core/error.h"

namespace kestrel::models::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kSumChannels = 32, kSumRows = 16;  // sums_kernel's block

int64_t blocks_for(int64_t n) { return std::min<int64_t>(std::max<int64_t>((n + kThreads - 1) / kThreads, 1), 65536); }

template <typename T>
__global__ void forward_kernel(const T* __restrict__ x, const float* __restrict__ scale, const float* __restrict__ shift,
                               T* __restrict__ y, int64_t n, int64_t channels) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % channels;
    y[i] = static_cast<T>(silu(static_cast<float>(x[i]) * scale[c] + shift[c]));
  }
}

template <typename T>
__global__ void sums_kernel(const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ mean,
                            const float* __restrict__ invstd, const float* __restrict__ weight,
                            const float* __restrict__ bias, float* __restrict__ sums, int64_t rows, int64_t channels) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(kSumChannels) + threadIdx.x;
  float dz_sum = 0.f, dz_xhat_sum = 0.f;
  if (c < channels) {
    const float mu = mean[c], is = invstd[c], w = weight[c], b = bias[c];
    for (int64_t r = blockIdx.y * static_cast<int64_t>(kSumRows) + threadIdx.y; r < rows;
         r += static_cast<int64_t>(gridDim.y) * kSumRows) {
      const int64_t i = r * channels + c;
      const float xhat = (static_cast<float>(x[i]) - mu) * is;
      const float dz = static_cast<float>(dy[i]) * silu_grad(xhat * w + b);
      dz_sum += dz;
      dz_xhat_sum += dz * xhat;
    }
  }
  // Every thread reaches the barrier (no early return above).
  __shared__ float partial[2][kSumRows][kSumChannels + 1];
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
                                  const float* __restrict__ bias, const float* __restrict__ gain,
                                  const float* __restrict__ k1, const float* __restrict__ k2, T* __restrict__ dx,
                                  int64_t n, int64_t channels) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % channels;
    const float xhat = (static_cast<float>(x[i]) - mean[c]) * invstd[c];
    const float dz = static_cast<float>(dy[i]) * silu_grad(xhat * weight[c] + bias[c]);
    dx[i] = static_cast<T>(gain[c] * (dz - k1[c] - xhat * k2[c]));
  }
}

void check_inputs(const char* what, const at::Tensor& x, std::initializer_list<const at::Tensor*> same_layout,
                  std::initializer_list<const at::Tensor*> per_channel) {
  if (!x.is_cuda() || x.dim() != 4 || !x.is_contiguous(at::MemoryFormat::ChannelsLast))
    fail(what, ": x must be a 4-d channels-last CUDA tensor");
  for (const at::Tensor* t : same_layout)
    if (t->sizes() != x.sizes() || t->scalar_type() != x.scalar_type() || t->device() != x.device() ||
        !t->is_contiguous(at::MemoryFormat::ChannelsLast))
      fail(what, ": the gradient must match x (shape, dtype, device, channels-last)");
  for (const at::Tensor* t : per_channel)
    if (t->numel() != x.size(1) || t->scalar_type() != at::kFloat || t->device() != x.device() || !t->is_contiguous())
      fail(what, ": per-channel tensors must be [C] float32 on x's device");
}

}  // namespace

at::Tensor bn_silu_forward_cuda(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift) {
  check_inputs("bn_silu_forward_cuda", x, {}, {&scale, &shift});
  const c10::cuda::CUDAGuard device_guard(x.device());
  at::Tensor y = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  const int64_t n = x.numel();
  if (n == 0) return y;
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bn_silu_forward_cuda", [&] {
    forward_kernel<scalar_t><<<blocks_for(n), kThreads, 0, stream>>>(x.data_ptr<scalar_t>(), scale.data_ptr<float>(),
                                                                      shift.data_ptr<float>(), y.data_ptr<scalar_t>(), n,
                                                                      x.size(1));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

at::Tensor bn_silu_backward_sums_cuda(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean,
                                      const at::Tensor& invstd, const at::Tensor& weight, const at::Tensor& bias) {
  check_inputs("bn_silu_backward_sums_cuda", x, {&dy}, {&mean, &invstd, &weight, &bias});
  const c10::cuda::CUDAGuard device_guard(x.device());
  const int64_t channels = x.size(1), rows = channels == 0 ? 0 : x.numel() / channels;
  at::Tensor sums = at::zeros({2, channels}, mean.options());
  if (rows == 0 || channels == 0) return sums;
  // Enough blocks to fill the GPU (about 2048), each thread summing at least ~32 rows.
  const int64_t channel_blocks = (channels + kSumChannels - 1) / kSumChannels;
  const int64_t row_blocks = std::clamp<int64_t>((rows + kSumRows * 32 - 1) / (kSumRows * 32), 1,
                                                 std::max<int64_t>(2048 / channel_blocks, 1));
  const dim3 grid(static_cast<unsigned>(channel_blocks), static_cast<unsigned>(std::min<int64_t>(row_blocks, 65535)));
  const dim3 block(kSumChannels, kSumRows);
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
                                       const at::Tensor& gain, const at::Tensor& k1, const at::Tensor& k2) {
  check_inputs("bn_silu_backward_input_cuda", x, {&dy}, {&mean, &invstd, &weight, &bias, &gain, &k1, &k2});
  const c10::cuda::CUDAGuard device_guard(x.device());
  at::Tensor dx = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  const int64_t n = x.numel();
  if (n == 0) return dx;
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bn_silu_backward_input_cuda", [&] {
    input_grad_kernel<scalar_t><<<blocks_for(n), kThreads, 0, stream>>>(
        dy.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), mean.data_ptr<float>(), invstd.data_ptr<float>(),
        weight.data_ptr<float>(), bias.data_ptr<float>(), gain.data_ptr<float>(), k1.data_ptr<float>(),
        k2.data_ptr<float>(), dx.data_ptr<scalar_t>(), n, x.size(1));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return dx;
}

}  // namespace kestrel::models::detail
