// Runs kestrel's own CUDA kernels (the src/**/*_kernels.cuh headers) on the CPU, so that tests on machines
// without a GPU execute the very kernel source that nvcc compiles: indexing, bounds, barriers, bit logic.
//
// The model: a launch runs its blocks one after another, in a shuffled order (a kernel must not depend on
// the order of blocks). The threads of a block are fibers run one at a time from one __syncthreads to the
// next, in ascending thread order in one phase and descending in the next, so that a read of another
// thread's write without a barrier between them goes wrong in one of the orders. A kernel's __shared__
// variables become its statics (one block at a time uses them); its dynamic shared memory is a buffer
// filled with 0xFF bytes before every block (reads of unwritten shared memory show). A __syncthreads that
// not every thread of the block reaches (a thread left the kernel while others wait at a barrier:
// undefined behaviour on a GPU) is an error of the launch.
//
// What it cannot show: warp-synchronous tricks (kestrel has none), races between blocks or within a
// phase (only one thread runs at a time; atomics are still real atomics), and device float rounding
// (device math runs as host math). Speed means nothing here. Launches must not nest; one at a time.
//
// Include this header LAST in a test file: its macros (threadIdx, __shared__, ...) would rewrite any header
// after it. Then include the kernel header and launch with kestrel::cuda_emulator::launch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace kestrel::cuda_emulator {

// The built-in variables of the calling (emulated) thread.
struct ThreadContext {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
  unsigned char* dynamic_shared = nullptr;
};
ThreadContext& context();
void syncthreads();

template <typename T>
T* dynamic_shared() {
  return reinterpret_cast<T*>(context().dynamic_shared);
}

// Thrown by launch: a bad launch shape (CUDA's limits: 1024 threads a block, 65535 blocks in y and z,
// 48 KiB dynamic shared memory without opting in) or a divergent __syncthreads.
struct LaunchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs body once for every thread of every block; seed picks the order of blocks.
void run_grid(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& body, uint64_t seed);

// kernel<<<grid, block, shared_bytes>>>(args...), synchronously.
template <typename... Params, typename... Args>
void launch(dim3 grid, dim3 block, size_t shared_bytes, void (*kernel)(Params...), Args&&... args) {
  run_grid(grid, block, shared_bytes, [&] { kernel(args...); }, 2024);
}

}  // namespace kestrel::cuda_emulator

// ---- the device built-ins the kernels use ------------------------------------------------------------------
#define __global__
#define __shared__ static
#define threadIdx (::kestrel::cuda_emulator::context().thread_idx)
#define blockIdx (::kestrel::cuda_emulator::context().block_idx)
#define blockDim (::kestrel::cuda_emulator::context().block_dim)
#define gridDim (::kestrel::cuda_emulator::context().grid_dim)
#define __syncthreads() ::kestrel::cuda_emulator::syncthreads()
#define KESTREL_DYNAMIC_SHARED(type, name) type* name = ::kestrel::cuda_emulator::dynamic_shared<type>()

template <typename T>
T min(T a, T b) {
  return b < a ? b : a;
}
template <typename T>
T max(T a, T b) {
  return a < b ? b : a;
}
// 1 + the index of the lowest set bit, 0 for 0 (CUDA's __ffsll).
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
// CUDA's float atomicAdd: returns the old value.
inline float atomicAdd(float* address, float value) {
  float old, sum;
  __atomic_load(address, &old, __ATOMIC_RELAXED);
  do sum = old + value;  // a failed exchange reloads old
  while (!__atomic_compare_exchange(address, &old, &sum, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
  return old;
}
