// Multi-process data parallel on LibTorch's c10d: rendezvous from torchrun-style environment variables,
// one process group per run (Gloo for CPU devices, NCCL for CUDA), the initial broadcast of the model
// from rank 0 and bucketed gradient all-reduce after backward.
//
// Scope of this first slice: the gradient all-reduce runs after backward, bucket by bucket (one
// collective per ~25 MB, as PyTorch DDP's bucket_cap_mb); overlapping it with backward through
// per-parameter autograd hooks, SyncBN and multi-node launching are later steps.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace torch::nn {
class Module;
}

namespace kestrel::dist {

// What torchrun (or `kestrel train --nproc-per-node`) tells a worker about its place in the job.
struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;  // MASTER_ADDR
  int master_port = 0;      // MASTER_PORT
  bool agent_store = false; // TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent hosts the store
  int restart_count = 0;    // TORCHELASTIC_RESTART_COUNT (prefix of this attempt's keys)
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE,
// TORCHELASTIC_RESTART_COUNT. Unset WORLD_SIZE means one process. Bad values fail naming the variable.
DistEnv read_env();

struct DistContext {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  bool enabled = false;  // false: single process, every helper below is a no-op
  c10::intrusive_ptr<c10d::Backend> group;

  bool is_main() const { return rank == 0; }
};

// Joins the job the environment describes (read_env()). WORLD_SIZE unset or 1: a disabled context.
// Rank 0 hosts the TCPStore at MASTER_ADDR:MASTER_PORT unless torchrun's agent already does
// (TORCHELASTIC_USE_AGENT_STORE=True: all ranks are clients, keys under /worker/attempt_<restart>/).
// `timeout` bounds the rendezvous and every later collective; a rank that does not arrive in time
// is an error naming it, not a hang.
DistContext init_from_env(const c10::Device& device, std::chrono::seconds timeout);
DistContext init(const DistEnv& env, const c10::Device& device, std::chrono::seconds timeout);

// The process group over an existing store (tests use a c10d::FileStore): Gloo for CPU devices,
// NCCL for CUDA devices (only in CUDA builds).
DistContext init_with_store(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size, int local_rank,
                            const c10::Device& device, std::chrono::seconds timeout);

// Whether this build can make a group for the device type (Gloo headers / NCCL present at build time).
bool backend_available(const c10::Device& device);

// Copies every parameter and buffer of `module` from rank 0 to all ranks (once, after building the model).
void broadcast_module(torch::nn::Module& module, const DistContext& ctx);
void broadcast_tensors(const std::vector<at::Tensor>& tensors, const DistContext& ctx, int root = 0);

// Every rank calls it: true on all ranks if any rank passed true (e.g. "stop training").
bool any_rank(bool flag, const DistContext& ctx);
void barrier(const DistContext& ctx);

// Averages the gradients of `params` over the ranks: buckets of about `bucket_mb` MiB (consecutive
// parameters of one dtype and device, DDP's default 25), each flattened into a persistent buffer on
// the device, one all-reduce (SUM) per bucket, divided by world_size, copied back into .grad.
// All buckets are launched before the first wait. A parameter without a gradient counts as zeros
// (and receives the average, so all ranks step the same parameters). No host sync beyond the
// collectives' own wait().
class GradientReducer {
 public:
  GradientReducer(std::vector<at::Tensor> params, DistContext ctx, double bucket_mb = 25.0);

  void reduce();

  size_t num_buckets() const { return buckets_.size(); }
  const std::vector<size_t>& bucket_sizes() const { return bucket_numel_; }  // elements per bucket

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    std::vector<int64_t> offsets;
    at::Tensor flat;
  };
  std::vector<at::Tensor> params_;
  DistContext ctx_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_numel_;
};

}  // namespace kestrel::dist
