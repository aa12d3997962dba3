// The CUDA kernels of batch_norm_silu (see batch_norm_silu.h), in a header of their own so that the CPU tests
// can run this very source under tests/core/cuda_emulator.h (batch_norm_silu.cu launches them on a GPU). x and dy are channels-last [N, C, H, W],
// i.e. `rows` = N·H·W rows of C channels. Per-channel values are float32.
//  - The three row kernels use blocks of 32 channels x 8 (or 16) rows: a warp reads 32 consecutive
//    channels of one row, each thread keeps its channel's constants in registers and walks rows with a
//    grid stride (no per-element division to find the channel).
//  - sums_kernel adds a block's partial sums in shared memory, then one atomicAdd per channel and block
//    into the zeroed [2, C] result (so the sums' last bits depend on the order blocks finish).
//  - prepare_kernel: one thread per channel (running statistics and the forward constants).
// Nothing here may include CUDA or ATen-CUDA headers: the emulation compiles it with the host compiler.
#pragma once
#include <algorithm>
#include <cstdint>

#include "kestrel/models/batch_norm_silu.h"

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

// The launch shapes, one place for batch_norm_silu.cu and the emulated tests.
struct Launch {
  dim3 grid, block;
};
constexpr int kPrepareThreads = 128;
inline Launch prepare_launch(int64_t channels) {
  return {dim3(static_cast<unsigned>((channels + kPrepareThreads - 1) / kPrepareThreads)), dim3(kPrepareThreads)};
}
// forward_kernel and input_grad_kernel
inline Launch elementwise_launch(int64_t rows, int64_t channels) {
  return {row_grid(rows, channels, kRows, 65535 * 4), dim3(kChannels, kRows)};
}
// sums_kernel: about 2048 blocks, each adding its partial sums with one atomicAdd per channel.
inline Launch sums_launch(int64_t rows, int64_t channels) {
  return {row_grid(rows, channels, kSumRows * 8, 2048), dim3(kChannels, kSumRows)};
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

}  // namespace
}  // namespace kestrel::models::detail
