// The emulator that runs kestrel's CUDA kernels on the CPU (cuda_emulator.h) must itself be right, or the
// kernel tests built on it prove nothing: every thread of every block runs once with its own built-ins,
// __syncthreads really waits, divergence and bad launch shapes are errors, shared memory starts unwritten.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>
#include <vector>

#include "core/cuda_emulator.h"  // last: its macros

namespace kestrel::cuda_emulator {
namespace {

struct Visit {
  unsigned tx, ty, tz, bx, by, bz, dimx, dimy, dimz, gridx, gridy, gridz;
};
std::vector<Visit> visits;

__global__ void record_kernel(int marker) {
  visits.push_back({threadIdx.x, threadIdx.y, threadIdx.z, blockIdx.x, blockIdx.y, blockIdx.z, blockDim.x, blockDim.y,
                    blockDim.z, gridDim.x, gridDim.y, gridDim.z});
  EXPECT_EQ(marker, 7);
}

TEST(CudaEmulator, EveryThreadOfEveryBlockRunsOnceWithItsBuiltIns) {
  visits.clear();
  launch(dim3(3, 2), dim3(4, 2, 2), 0, record_kernel, 7);
  ASSERT_EQ(visits.size(), 3u * 2 * 4 * 2 * 2);
  std::set<std::tuple<unsigned, unsigned, unsigned, unsigned, unsigned, unsigned>> seen;
  for (const Visit& v : visits) {
    EXPECT_LT(v.tx, 4u);
    EXPECT_LT(v.ty, 2u);
    EXPECT_LT(v.tz, 2u);
    EXPECT_LT(v.bx, 3u);
    EXPECT_LT(v.by, 2u);
    EXPECT_EQ(v.bz, 0u);
    EXPECT_EQ(std::tie(v.dimx, v.dimy, v.dimz), std::make_tuple(4u, 2u, 2u));
    EXPECT_EQ(std::tie(v.gridx, v.gridy, v.gridz), std::make_tuple(3u, 2u, 1u));
    seen.insert({v.tx, v.ty, v.tz, v.bx, v.by, v.bz});
  }
  EXPECT_EQ(seen.size(), visits.size());  // no (thread, block) twice
}

// Each thread reads its neighbour's write: right only if the barrier holds every thread until all wrote,
// whatever order the threads run in.
__global__ void neighbour_kernel(int* out) {
  __shared__ int value[8];
  value[threadIdx.x] = 100 * static_cast<int>(blockIdx.x) + static_cast<int>(threadIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = value[(threadIdx.x + 1) % blockDim.x];
}

TEST(CudaEmulator, SyncthreadsWaitsForEveryThread) {
  std::vector<int> out(2 * 8, -1);
  launch(dim3(2), dim3(8), 0, neighbour_kernel, out.data());
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 8; ++t) EXPECT_EQ(out[b * 8 + t], 100 * b + (t + 1) % 8) << b << " " << t;
}

// A tree reduction in dynamic shared memory: log2(64) barriers, each one needed.
__global__ void block_sum_kernel(const int* in, int* out) {
  KESTREL_DYNAMIC_SHARED(int, partial);
  partial[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

TEST(CudaEmulator, SharedMemoryReduction) {
  std::vector<int> in(3 * 64), out(3, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i);
  launch(dim3(3), dim3(64), 64 * sizeof(int), block_sum_kernel, in.data(), out.data());
  // Σ i for i in [64 b, 64 b + 64) = 64·64 b + 63·64/2
  for (int b = 0; b < 3; ++b) EXPECT_EQ(out[b], 4096 * b + 2016);
}

__global__ void divergent_kernel(int* out) {
  if (threadIdx.x % 2 == 1) return;  // half the block leaves before the barrier
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void late_divergent_kernel(int* out) {
  __syncthreads();
  if (threadIdx.x == 3) return;  // one thread skips the second barrier
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void whole_block_leaves_kernel(int* out) {
  if (blockIdx.x == 1) return;  // every thread of the block: no barrier is split
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

TEST(CudaEmulator, DivergentBarriersAreErrors) {
  std::vector<int> out(64, 0);
  EXPECT_THROW(launch(dim3(2), dim3(8), 0, divergent_kernel, out.data()), LaunchError);
  EXPECT_THROW(launch(dim3(1), dim3(8), 0, late_divergent_kernel, out.data()), LaunchError);
  std::fill(out.begin(), out.end(), 0);
  EXPECT_NO_THROW(launch(dim3(3), dim3(8), 0, whole_block_leaves_kernel, out.data()));
  for (int i = 0; i < 24; ++i) EXPECT_EQ(out[i], i / 8 == 1 ? 0 : 1) << i;
}

__global__ void read_shared_kernel(unsigned* out) {
  KESTREL_DYNAMIC_SHARED(unsigned, words);
  if (threadIdx.x == 0) out[blockIdx.x] = words[1];  // never written: the fill of every block
  __syncthreads();
  words[1] = 5;
}

TEST(CudaEmulator, DynamicSharedMemoryStartsUnwrittenInEveryBlock) {
  std::vector<unsigned> out(4, 0);
  launch(dim3(4), dim3(2), 16, read_shared_kernel, out.data());
  for (unsigned v : out) EXPECT_EQ(v, 0xFFFFFFFFu);
}

__global__ void nothing_kernel() {}

TEST(CudaEmulator, BadLaunchShapesAreErrors) {
  EXPECT_THROW(launch(dim3(1), dim3(1025), 0, nothing_kernel), LaunchError);
  EXPECT_THROW(launch(dim3(1), dim3(0), 0, nothing_kernel), LaunchError);
  EXPECT_THROW(launch(dim3(1, 65536), dim3(1), 0, nothing_kernel), LaunchError);
  EXPECT_THROW(launch(dim3(0), dim3(1), 0, nothing_kernel), LaunchError);
  EXPECT_THROW(launch(dim3(1), dim3(1), 48 * 1024 + 1, nothing_kernel), LaunchError);
  EXPECT_NO_THROW(launch(dim3(1), dim3(32, 32), 48 * 1024, nothing_kernel));
}

__global__ void atomic_kernel(float* total) { atomicAdd(total, 0.5f); }

TEST(CudaEmulator, DeviceFunctions) {
  float total = 1.f;
  launch(dim3(5), dim3(100), 0, atomic_kernel, &total);
  EXPECT_EQ(total, 1.f + 0.5f * 500);  // exact: every partial sum is a multiple of 0.5 below 2^24
  EXPECT_EQ(__ffsll(0), 0);
  EXPECT_EQ(__ffsll(1), 1);
  EXPECT_EQ(__ffsll(0b101000), 4);
  EXPECT_EQ(__ffsll(static_cast<long long>(uint64_t{1} << 63)), 64);
  EXPECT_EQ(min<int64_t>(3, -2), -2);
  EXPECT_EQ(max<int64_t>(3, -2), 3);
}

}  // namespace
}  // namespace kestrel::cuda_emulator
