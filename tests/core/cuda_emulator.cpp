// The runtime of cuda_emulator.h. The threads of a block are fibers (ucontext) on the calling thread: a
// scheduler runs each until its next __syncthreads or its end, so barriers are exact and runs are
// deterministic, at a few hundred nanoseconds a switch. The header's macros are not used here.
#include "core/cuda_emulator.h"

#include <ucontext.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#undef __syncthreads

namespace kestrel::cuda_emulator {
namespace {

// One emulated thread: a ucontext with its own stack, run by the scheduler in run_grid until it reaches a
// __syncthreads or leaves the kernel.
struct Fiber {
  enum class State { kReady, kAtBarrier, kFinished };
  ucontext_t context{};
  std::unique_ptr<char[]> stack;  // uninitialised: only the pages a kernel touches cost anything
  ThreadContext builtins;
  State state = State::kReady;
};

constexpr size_t kStackBytes = 256 * 1024;

struct Launch {
  std::vector<Fiber> fibers;
  ucontext_t scheduler{};
  size_t current = 0;
  const std::function<void()>* body = nullptr;
};
Launch* active = nullptr;  // the launch being run (launches do not nest)

// A fresh context that runs fiber_entry on f's stack and returns to `scheduler`. Out of line: getcontext
// returns twice, which would make the compiler distrust the caller's locals.
__attribute__((noinline)) void prepare(Fiber& f, ucontext_t* scheduler);

void fiber_entry() {
  (*active->body)();
  active->fibers[active->current].state = Fiber::State::kFinished;
  // returning resumes the scheduler through uc_link
}

void prepare(Fiber& f, ucontext_t* scheduler) {
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack.get();
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = scheduler;
  makecontext(&f.context, fiber_entry, 0);
}

std::string shape(dim3 d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}

}  // namespace

ThreadContext& context() {
  if (active == nullptr) throw LaunchError("a CUDA built-in outside an emulated kernel");
  return active->fibers[active->current].builtins;
}

void syncthreads() {
  if (active == nullptr) throw LaunchError("__syncthreads outside an emulated kernel");
  Fiber& me = active->fibers[active->current];
  me.state = Fiber::State::kAtBarrier;
  swapcontext(&me.context, &active->scheduler);
}

void run_grid(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& body, uint64_t seed) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64)
    throw LaunchError("invalid block " + shape(block) + ": CUDA takes 1 to 1024 threads a block, z at most 64");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    throw LaunchError("invalid grid " + shape(grid) + ": CUDA takes x < 2^31, y and z at most 65535, none 0");
  if (shared_bytes > 48 * 1024)
    throw LaunchError(std::to_string(shared_bytes) + " bytes of dynamic shared memory: more than the 48 KiB a "
                      "launch gets without opting in");
  if (active != nullptr) throw LaunchError("a launch inside an emulated kernel");

  std::vector<uint3> blocks;
  blocks.reserve(uint64_t{grid.x} * grid.y * grid.z);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) blocks.push_back({x, y, z});
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937_64(seed));

  std::vector<unsigned char> shared(std::max<size_t>(shared_bytes, 1));
  Launch launch;
  launch.body = &body;
  launch.fibers.resize(threads);
  for (uint64_t t = 0; t < threads; ++t) {
    Fiber& f = launch.fibers[t];
    f.stack.reset(new char[kStackBytes]);
    f.builtins.thread_idx = {static_cast<unsigned>(t % block.x), static_cast<unsigned>(t / block.x % block.y),
                             static_cast<unsigned>(t / (uint64_t{block.x} * block.y))};
    f.builtins.block_dim = block;
    f.builtins.grid_dim = grid;
    f.builtins.dynamic_shared = shared.data();
  }
  active = &launch;
  bool divergent = false;
  uint64_t phase = 0;
  for (const uint3& b : blocks) {
    std::memset(shared.data(), 0xFF, shared.size());  // shared memory starts unwritten in every block
    for (Fiber& f : launch.fibers) {
      f.builtins.block_idx = b;
      f.state = Fiber::State::kReady;
      prepare(f, &launch.scheduler);
    }
    // Phases between barriers. Threads run one at a time, in ascending order in one phase and descending
    // in the next: a read of another thread's write that lacks a barrier sees the write in neither or
    // only one of the orders, so it shows in the results.
    for (;;) {
      const bool descending = phase++ % 2 == 1;
      for (uint64_t i = 0; i < threads; ++i) {
        const size_t t = descending ? threads - 1 - i : i;
        if (launch.fibers[t].state != Fiber::State::kReady) continue;
        launch.current = t;
        swapcontext(&launch.scheduler, &launch.fibers[t].context);
      }
      uint64_t finished = 0;
      for (const Fiber& f : launch.fibers) finished += f.state == Fiber::State::kFinished;
      if (finished == threads) break;
      if (finished > 0) divergent = true;  // some wait at a barrier that others have left the kernel without
      for (Fiber& f : launch.fibers)
        if (f.state == Fiber::State::kAtBarrier) f.state = Fiber::State::kReady;
    }
  }
  active = nullptr;
  if (divergent)
    throw LaunchError("a __syncthreads was not reached by every thread of a block (grid " + shape(grid) + ", block " +
                      shape(block) + ")");
}

}  // namespace kestrel::cuda_emulator
