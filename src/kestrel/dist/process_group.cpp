#include "kestrel/dist/process_group.h"

#include <netdb.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>
#include <mutex>
#include <thread>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/generated/variable_factories.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/nn/module.h>

// Gloo's own headers are not in the torch wheel (its implementation is, inside libtorch_cpu); the
// Debian/Ubuntu package libgloo-dev provides them. Without them this build has no CPU backend.
#if defined(USE_C10D_GLOO) && __has_include(<gloo/algorithm.h>)
#define KESTREL_HAVE_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if defined(KESTREL_WITH_CUDA) && defined(USE_C10D_NCCL) && __has_include(<nccl.h>)
#define KESTREL_HAVE_NCCL 1
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "kestrel/core/error.h"

namespace kestrel::dist {
namespace {

const char* env_or_null(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

int env_int(const char* name, int fallback, int min_value, int max_value) {
  const char* v = env_or_null(name);
  if (v == nullptr) return fallback;
  errno = 0;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < min_value || x > max_value)
    fail("environment variable ", name, "=\"", v, "\": expected an integer in [", min_value, ", ", max_value, "]");
  return static_cast<int>(x);
}

// The rendezvous of the process group failed: name who is missing and where. Before the timeout (`started`
// is when this rank began to wait) the other side closed its connection: it exited, with its own message.
[[noreturn]] void fail_join(const std::string& where, int rank, int world_size, std::chrono::seconds timeout,
                            std::chrono::steady_clock::time_point started, const std::string& detail) {
  std::string missing = rank == 0 ? (world_size == 2 ? std::string("rank 1") : cat("ranks 1..", world_size - 1))
                                  : std::string("rank 0 (or another rank)");
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
  if (waited < timeout * 9 / 10)  // well before: not a timeout
    fail("distributed: rank ", rank, " of ", world_size, ": ", missing, " left ", where, " after ",
         waited.count() / 1000, " s (exited? its own error says why) (", detail, ")");
  fail("distributed: rank ", rank, " of ", world_size, ": ", missing, " did not join within ", timeout.count(),
       " s at ", where, " (", detail, ")");
}

// A rendezvous that waits for ranks still to come is silent for up to the whole timeout (an hour): a rank
// started alone, rank 0 not running, MASTER_ADDR wrong. After `after`, one line on stderr says who waits where.
class SlowJoinNotice {
 public:
  SlowJoinNotice(std::function<std::string()> message, std::chrono::seconds after)
      : waiter_([this, message = std::move(message), after] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (done_.wait_for(lock, after, [this] { return joined_; })) return;
          lock.unlock();  // the message may resolve a host name: the join need not wait for it
          std::cerr << message() << std::endl;
        }) {}
  ~SlowJoinNotice() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      joined_ = true;
    }
    done_.notify_one();
    waiter_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  bool joined_ = false;
  std::thread waiter_;  // last: starts once the members above exist
};

// Whether `host` resolves now (a wrong MASTER_ADDR is worth naming; a cluster's name may still appear later).
bool resolves(const std::string& host) {
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, nullptr, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  return rc == 0;
}

std::string first_line(const std::string& s) {
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace

DistEnv read_env() {
  DistEnv env;
  // Who launched us: torchrun / kestrel's launcher (WORLD_SIZE), else Open MPI's mpirun, MPICH/Intel
  // MPI's (PMI_*), or SLURM's srun. Only the names of rank, size and local rank differ. SLURM's size is the
  // step's (SLURM_STEP_NUM_TASKS, set by srun), not the allocation's SLURM_NTASKS: a batch script or an
  // salloc shell of --ntasks 4 has SLURM_NTASKS=4 and SLURM_PROCID=0 too, and a plain `kestrel train` run
  // there is one process (it would wait for 3 ranks that never come).
  struct Names {
    const char *size, *rank, *local_rank, *local_size;
  };
  Names n{"WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
  if (env_or_null("WORLD_SIZE") == nullptr) {
    if (env_or_null("OMPI_COMM_WORLD_SIZE") != nullptr)
      n = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
    else if (env_or_null("PMI_SIZE") != nullptr && env_or_null("PMI_RANK") != nullptr)
      n = {"PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"};
    else if (env_or_null("SLURM_STEP_NUM_TASKS") != nullptr && env_or_null("SLURM_PROCID") != nullptr)
      n = {"SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"};
  }
  env.world_size = env_int(n.size, 1, 1, 1 << 20);
  env.rank = env_int(n.rank, 0, 0, env.world_size - 1);
  env.local_rank = env_int(n.local_rank, env.rank, 0, env.world_size - 1);
  // Only core binding uses it: unknown or unreadable means every rank on this node (the smaller share).
  env.local_world_size = env.world_size;
  if (const char* v = env_or_null(n.local_size)) {
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (end != v && *end == '\0' && x > env.local_rank && x <= env.world_size) env.local_world_size = static_cast<int>(x);
  }
  if (env.world_size == 1) return env;
  if (env_or_null(n.rank) == nullptr) fail("environment variable ", n.size, "=", env.world_size, " but ", n.rank, " is not set");
  const char* addr = env_or_null("MASTER_ADDR");
  if (addr == nullptr)
    fail("environment variable MASTER_ADDR is not set (", n.size, "=", env.world_size,
         "; export the address of the node of rank 0, and MASTER_PORT, before launching)");
  env.master_addr = addr;
  if (env_or_null("MASTER_PORT") == nullptr) fail("environment variable MASTER_PORT is not set (WORLD_SIZE=", env.world_size, ")");
  env.master_port = env_int("MASTER_PORT", 0, 1, 65535);
  const char* agent = env_or_null("TORCHELASTIC_USE_AGENT_STORE");
  env.agent_store = agent != nullptr && std::string(agent) == "True";
  env.restart_count = env_int("TORCHELASTIC_RESTART_COUNT", 0, 0, std::numeric_limits<int>::max());
  return env;
}

bool backend_available(const c10::Device& device) {
  if (device.is_cuda()) {
#ifdef KESTREL_HAVE_NCCL
    return true;
#else
    return false;
#endif
  }
#ifdef KESTREL_HAVE_GLOO
  return device.is_cpu();
#else
  return false;
#endif
}

DistContext init_with_store(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size, int local_rank,
                            const c10::Device& device, std::chrono::seconds timeout) {
  DistContext ctx;
  ctx.rank = rank;
  ctx.world_size = world_size;
  ctx.local_rank = local_rank;
  ctx.enabled = world_size > 1;
  if (!ctx.enabled) return ctx;
  if (rank < 0 || rank >= world_size) fail("distributed: rank ", rank, " outside world size ", world_size);
  store->setTimeout(timeout);
  const auto op_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  if (device.is_cuda()) {
#ifdef KESTREL_HAVE_NCCL
    ctx.device = c10::Device(c10::kCUDA, device.has_index() ? device.index() : static_cast<c10::DeviceIndex>(local_rank));
    c10::cuda::set_device(ctx.device.index());
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = op_timeout;
    auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
    // Bound to this rank's GPU and connected now, as init_process_group(device_id=...) does: NCCL's own
    // failures (two ranks on one GPU, a peer that cannot be reached) are reported here with the rank,
    // instead of surfacing unnamed from the first broadcast. Every rank is here at the same point.
    group->setBoundDeviceId(ctx.device);
    try {
      group->eagerConnectSingleDevice(ctx.device);
    } catch (const std::exception& e) {
      fail("distributed: rank ", rank, " of ", world_size, " could not connect NCCL on ", ctx.device.str(), ": ", e.what());
    }
    ctx.group = group;
    return ctx;
#else
    fail("distributed: device ", device.str(), " needs NCCL, but this kestrel build has no NCCL support "
         "(configure with KESTREL_WITH_CUDA=ON and NCCL headers)");
#endif
  }
  if (!device.is_cpu()) fail("distributed: no process-group backend for device ", device.str());
#ifdef KESTREL_HAVE_GLOO
  auto options = c10d::ProcessGroupGloo::Options::create(op_timeout);
  const char* ifname = env_or_null("GLOO_SOCKET_IFNAME");
  const char* addr = env_or_null("MASTER_ADDR");
  const bool loopback = addr == nullptr || std::string(addr) == "127.0.0.1" || std::string(addr) == "localhost";
  try {
    if (ifname != nullptr) options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    else if (loopback) options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    else options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  } catch (const std::exception& e) {
    fail("distributed: cannot open a Gloo network device", ifname ? cat(" on interface GLOO_SOCKET_IFNAME=", ifname) : "",
         ": ", first_line(e.what()));
  }
  options->threads = 2;
  const auto started = std::chrono::steady_clock::now();
  try {
    // The constructor connects to every other rank through the store (full mesh); it throws after
    // `timeout` when a rank never publishes its address.
    ctx.group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
  } catch (const std::exception& e) {
    fail_join("the Gloo rendezvous", rank, world_size, timeout, started, first_line(e.what()));
  }
  return ctx;
#else
  fail("distributed: CPU training on several processes needs Gloo, and this kestrel build has no Gloo headers "
       "(install libgloo-dev and rebuild)");
#endif
}

DistContext init(const DistEnv& env, const c10::Device& device, std::chrono::seconds timeout) {
  if (env.world_size <= 1) {
    DistContext ctx;
    ctx.local_rank = env.local_rank;
    return ctx;
  }
  if (!backend_available(device))
    fail("distributed: WORLD_SIZE=", env.world_size, " on device ", device.str(), ", but this kestrel build has no ",
         device.is_cuda() ? "NCCL support (configure with KESTREL_WITH_CUDA=ON and NCCL headers)"
                          : "Gloo support (install libgloo-dev and rebuild)");
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(env.master_port);
  o.isServer = env.rank == 0 && !env.agent_store;
  o.numWorkers = env.world_size;
  o.waitWorkers = !env.agent_store;
  o.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  o.multiTenant = true;
  const std::string where = cat("MASTER_ADDR:MASTER_PORT=", env.master_addr, ":", env.master_port);
  c10::intrusive_ptr<c10d::Store> store;
  const auto started = std::chrono::steady_clock::now();
  const std::string waiting_for = env.rank == 0 ? "the other ranks" : "rank 0 and the others";
  SlowJoinNotice notice(
      [&] {
        return cat("distributed: rank ", env.rank, " of ", env.world_size, " still waiting for ", waiting_for, " at ", where,
                   " (up to ", timeout.count(), " s)",
                   resolves(env.master_addr) ? std::string() : cat("; MASTER_ADDR ", env.master_addr, " does not resolve"));
      },
      std::chrono::seconds(15));
  try {
    store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
  } catch (const std::exception& e) {
    const std::string what = first_line(e.what());
    if (o.isServer && (what.find("in use") != std::string::npos || what.find("bind") != std::string::npos))
      fail("distributed: rank 0 cannot host the store at ", where, ": ", what,
           " (another job on this port? under torchrun set TORCHELASTIC_USE_AGENT_STORE=True)");
    if (o.isServer) fail_join(cat("the TCP store ", where), env.rank, env.world_size, timeout, started, what);
    fail("distributed: rank ", env.rank, " of ", env.world_size, " could not reach the store at ", where,
         " within ", timeout.count(), " s (is rank 0 running, MASTER_ADDR reachable?): ", what);
  }
  if (env.agent_store) store = c10::make_intrusive<c10d::PrefixStore>(cat("/worker/attempt_", env.restart_count), store);
  return init_with_store(store, env.rank, env.world_size, env.local_rank, device, timeout);
}

DistContext init_from_env(const c10::Device& device, std::chrono::seconds timeout) {
  return init(read_env(), device, timeout);
}

void broadcast_tensors(const std::vector<at::Tensor>& tensors, const DistContext& ctx, int root) {
  if (!ctx.enabled || tensors.empty()) return;
  torch::NoGradGuard no_grad;
  // Gloo and NCCL broadcast one tensor per call here; group by dtype into flat buffers to keep the
  // number of collectives small.
  std::vector<std::vector<size_t>> groups;
  std::vector<at::ScalarType> dtypes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined() || tensors[i].numel() == 0) continue;
    const auto dt = tensors[i].scalar_type();
    size_t g = 0;
    while (g < dtypes.size() && (dtypes[g] != dt || tensors[groups[g][0]].device() != tensors[i].device())) ++g;
    if (g == dtypes.size()) {
      dtypes.push_back(dt);
      groups.emplace_back();
    }
    groups[g].push_back(i);
  }
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  for (const auto& g : groups) {
    std::vector<at::Tensor> flat_parts;
    flat_parts.reserve(g.size());
    for (size_t i : g) flat_parts.push_back(tensors[i].reshape(-1));
    std::vector<at::Tensor> buf{at::cat(flat_parts)};
    ctx.group->broadcast(buf, opts)->wait();
    int64_t off = 0;
    for (size_t i : g) {
      const int64_t n = tensors[i].numel();
      tensors[i].copy_(buf[0].narrow(0, off, n).view(tensors[i].sizes()));
      off += n;
    }
  }
}

void broadcast_module(torch::nn::Module& module, const DistContext& ctx) {
  if (!ctx.enabled) return;
  std::vector<at::Tensor> all;
  for (const auto& p : module.parameters()) all.push_back(p);
  for (const auto& b : module.buffers()) all.push_back(b);
  broadcast_tensors(all, ctx, 0);
}

bool any_rank(bool flag, const DistContext& ctx) {
  if (!ctx.enabled) return flag;
  // A one-element tensor on the group's device type (NCCL needs CUDA tensors).
  const bool cuda = ctx.group->getBackendName() == "nccl";
  at::Tensor t = at::full({1}, flag ? 1.0f : 0.0f,
                          at::TensorOptions().dtype(at::kFloat).device(cuda ? ctx.device : at::Device(at::kCPU)));
  std::vector<at::Tensor> v{t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MAX;
  ctx.group->allreduce(v, opts)->wait();
  return v[0].item<float>() > 0.5f;
}

DeferredAnyRank::DeferredAnyRank(DistContext ctx) : ctx_(std::move(ctx)) {
  if (!ctx_.enabled) return;
  const bool cuda = ctx_.group->getBackendName() == "nccl";  // NCCL reduces CUDA tensors only
  device_flag_ = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(cuda ? ctx_.device : at::Device(at::kCPU)));
}

bool DeferredAnyRank::vote(bool flag) {
  if (!ctx_.enabled) return flag;
  // The previous vote's result, copied behind its all-reduce one vote ago: a host read.
  const bool previous = result_.started() && result_.wait()[0].item<float>() > 0.5f;
  device_flag_.fill_(flag ? 1.0f : 0.0f);
  std::vector<at::Tensor> v{device_flag_};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MAX;
  ctx_.group->allreduce(v, opts)->wait();  // NCCL: the current stream waits; Gloo: done
  result_.start(device_flag_);
  return previous;
}

void barrier(const DistContext& ctx) {
  if (!ctx.enabled) return;
  ctx.group->barrier()->wait();
}

void shutdown(const DistContext& ctx) {
  if (ctx.enabled && ctx.group) ctx.group->shutdown();
}

// Runs on the autograd engine's thread right after `param`'s .grad received this backward's gradient.
struct GradientReducer::Hook : torch::autograd::PostAccumulateGradHook {
  Hook(GradientReducer* r, size_t i) : reducer(r), index(i) {}
  void operator()(const torch::autograd::Variable& /*param*/) override { reducer->on_gradient_ready(index); }
  GradientReducer* reducer;
  size_t index;
};

GradientReducer::GradientReducer(std::vector<at::Tensor> params, DistContext ctx, double bucket_mb)
    : params_(std::move(params)), ctx_(std::move(ctx)) {
  if (!ctx_.enabled) return;
  const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1024.0 * 1024.0));
  bucket_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  ready_.assign(params_.size(), false);
  Bucket cur;
  int64_t cur_bytes = 0, cur_numel = 0;
  auto close = [&]() {
    if (cur.params.empty()) return;
    const auto& p0 = params_[cur.params[0]];
    cur.flat = at::zeros({cur_numel}, p0.options().requires_grad(false));
    buckets_.push_back(std::move(cur));
    cur = Bucket();
    cur_bytes = cur_numel = 0;
  };
  // Reverse order: the head's gradients come first in backward, so the first bucket fills first.
  for (size_t k = params_.size(); k-- > 0;) {
    const auto& p = params_[k];
    if (!cur.params.empty()) {
      const auto& p0 = params_[cur.params[0]];
      if (p0.scalar_type() != p.scalar_type() || p0.device() != p.device() ||
          cur_bytes + static_cast<int64_t>(p.nbytes()) > cap)
        close();
    }
    bucket_of_[k] = buckets_.size();
    slot_of_[k] = cur.params.size();
    cur.params.push_back(k);
    cur.offsets.push_back(cur_numel);
    cur_numel += p.numel();
    cur_bytes += static_cast<int64_t>(p.nbytes());
  }
  close();
  for (size_t k = 0; k < params_.size(); ++k)
    torch::autograd::impl::set_post_acc_grad_hooks(params_[k], std::make_unique<Hook>(this, k));
}

GradientReducer::~GradientReducer() {
  if (!ctx_.enabled) return;
  for (const auto& p : params_) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

void GradientReducer::prepare_backward(bool sync) {
  if (!ctx_.enabled) return;
  armed_ = sync;
  started_in_backward_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& b : buckets_) b.pending = b.params.size();
}

void GradientReducer::copy_in(const Bucket& bucket, size_t j) const {
  const at::Tensor& p = params_[bucket.params[j]];
  at::Tensor slot = bucket.flat.narrow(0, bucket.offsets[j], p.numel()).view(p.sizes());
  const at::Tensor& g = p.grad();
  if (g.defined()) slot.copy_(g);  // copy_ handles channels-last / strided gradients
  else slot.zero_();
}

void GradientReducer::start(size_t b) {
  Bucket& bk = buckets_[b];
  bk.buffer = {bk.flat};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::SUM;
  bk.work = ctx_.group->allreduce(bk.buffer, opts);
}

void GradientReducer::on_gradient_ready(size_t param) {
  if (!armed_ || ready_[param]) return;
  torch::NoGradGuard no_grad;
  ready_[param] = true;
  Bucket& bk = buckets_[bucket_of_[param]];
  copy_in(bk, slot_of_[param]);
  if (--bk.pending == 0) {
    start(bucket_of_[param]);
    ++started_in_backward_;
  }
}

void GradientReducer::reduce() {
  if (!ctx_.enabled) return;
  torch::NoGradGuard no_grad;
  // Buckets are started in index order on every rank (collectives must match across ranks): backward
  // completes them in the same order everywhere, and what it left is started here, in order.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bk = buckets_[b];
    if (bk.work) continue;
    for (size_t j = 0; j < bk.params.size(); ++j)
      if (!armed_ || !ready_[bk.params[j]]) copy_in(bk, j);
    start(b);
  }
  armed_ = false;
  const double inv = 1.0 / ctx_.world_size;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bk = buckets_[b];
    try {
      bk.work->wait();
    } catch (const std::exception& e) {
      fail("distributed: rank ", ctx_.rank, " of ", ctx_.world_size, ": gradient all-reduce of bucket ", b + 1, "/",
           buckets_.size(), " failed (another rank stopped, died or timed out): ", first_line(e.what()));
    }
    bk.work.reset();
    bk.buffer.clear();
    bk.flat.mul_(inv);
    for (size_t j = 0; j < bk.params.size(); ++j) {
      at::Tensor& p = params_[bk.params[j]];
      at::Tensor slot = bk.flat.narrow(0, bk.offsets[j], p.numel()).view(p.sizes());
      if (p.grad().defined()) p.mutable_grad().copy_(slot);
      else p.mutable_grad() = slot.clone(p.suggest_memory_format());
    }
  }
}

}  // namespace kestrel::dist
