// Multi-process data parallel on LibTorch's c10d: rendezvous from torchrun-style environment variables,
// one process group per run (Gloo for CPU devices, NCCL for CUDA), the initial broadcast of the model
// from rank 0 and bucketed gradient all-reduce after backward.
//
// Gradient buckets are all-reduced while backward runs (GradientReducer); SyncBN is in
// dist/sync_batch_norm, the local launcher in dist/launcher.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "kestrel/core/async_host_copy.h"

namespace torch::nn {
class Module;
}

namespace kestrel::dist {

// What torchrun (or `kestrel train --nproc-per-node`) tells a worker about its place in the job.
struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1; // processes on this node (LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, SLURM_NTASKS_PER_NODE)
  std::string master_addr;  // MASTER_ADDR
  int master_port = 0;      // MASTER_PORT
  bool agent_store = false; // TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent hosts the store
  int restart_count = 0;    // TORCHELASTIC_RESTART_COUNT (prefix of this attempt's keys)
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE,
// TORCHELASTIC_RESTART_COUNT. Without WORLD_SIZE, rank/size/local rank come from mpirun
// (OMPI_COMM_WORLD_*, or PMI_RANK/PMI_SIZE/MPI_LOCALRANKID) or srun (SLURM_PROCID/SLURM_STEP_NUM_TASKS/
// SLURM_LOCALID); MASTER_ADDR and MASTER_PORT are always needed then. None set: one process. Bad
// values fail naming the variable.
DistEnv read_env();

struct DistContext {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  bool enabled = false;  // false: single process, every helper below is a no-op
  // The rank's device, where its collectives' tensors live (NCCL keys its communicators by it): from
  // --device's list or cuda:LOCAL_RANK, not always cuda:local_rank.
  c10::Device device{c10::kCPU};
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

// any_rank inside the training loop, without draining the GPU: each vote() starts the reduction of this
// rank's flag and returns the previous vote's result (false at the first), which every rank reads at the
// same call. With NCCL the result is copied to pinned host memory behind the all-reduce; reading it one
// vote later waits for that copy, long done, where any_rank's .item() would wait for every step queued
// on the device. With Gloo the reduction completes within vote().
class DeferredAnyRank {
 public:
  explicit DeferredAnyRank(DistContext ctx);
  bool vote(bool flag);

 private:
  DistContext ctx_;
  at::Tensor device_flag_;  // [1] float32 on the group's device (CUDA for NCCL, else the CPU)
  AsyncHostCopy result_;    // the last vote's reduced flag, on its way to the host
};
void barrier(const DistContext& ctx);
// After the last collective: NCCL's communicators are destroyed in order (left to ProcessGroupNCCL's
// destructor they are aborted, with a warning). A no-op for Gloo and for a disabled context.
void shutdown(const DistContext& ctx);

// Averages the gradients of `params` over the ranks, overlapped with backward as PyTorch DDP does.
// Parameters are grouped into buckets of about `bucket_mb` MiB (DDP's bucket_cap_mb, default 25;
// consecutive parameters of one dtype and device) in reverse registration order, the order in which
// backward produces their gradients. A hook after each parameter's gradient accumulation copies the
// gradient into its bucket's flat device buffer; when a bucket's last gradient is in, its all-reduce
// (SUM) starts while backward goes on with earlier layers. reduce() starts the buckets backward did
// not complete (a parameter without a gradient counts as zeros, and receives the average, so all
// ranks step the same parameters), waits, divides by world_size and copies back into .grad.
//
// Per optimiser step: prepare_backward(sync) before each backward (sync false on the micro-steps of
// gradient accumulation that do not end in an optimiser step: no communication, gradients
// accumulate locally; true on the last one), then reduce() before the optimiser step. reduce()
// without a prepared backward all-reduces everything after backward (no overlap). No host sync
// beyond the collectives' own wait(). A collective that fails or times out (a rank died or stalled)
// is an error naming this rank and the bucket.
class GradientReducer {
 public:
  GradientReducer(std::vector<at::Tensor> params, DistContext ctx, double bucket_mb = 25.0);
  ~GradientReducer();  // removes the hooks from the parameters
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  void prepare_backward(bool sync);
  void reduce();

  size_t num_buckets() const { return buckets_.size(); }
  // Buckets whose all-reduce started inside the last prepared backward (overlap), for tests and logs.
  size_t buckets_started_in_backward() const { return started_in_backward_; }

 private:
  struct Hook;
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    std::vector<int64_t> offsets;
    at::Tensor flat;
    size_t pending = 0;  // gradients still missing in this backward
    std::vector<at::Tensor> buffer;  // {flat} while its all-reduce runs
    c10::intrusive_ptr<c10d::Work> work;
  };
  void on_gradient_ready(size_t param);
  void copy_in(const Bucket& bucket, size_t j) const;
  void start(size_t bucket);

  std::vector<at::Tensor> params_;
  DistContext ctx_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_, slot_of_;  // per parameter
  std::vector<bool> ready_;                   // per parameter, this backward
  bool armed_ = false;
  size_t started_in_backward_ = 0;
};

}  // namespace kestrel::dist
