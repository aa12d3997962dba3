#include "kestrel/core/device.h"

#include <algorithm>

#include <ATen/Context.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/autocast_mode.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/cuda.h>

#ifdef KESTREL_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "kestrel/core/ascii_lower.h"
#include "kestrel/core/cuda_runtime_info.h"
#include "kestrel/core/error.h"

namespace kestrel {

namespace {

// upstream's --device spellings in c10's: lower case, a bare index "0" -> "cuda:0".
std::string canonical_device(const std::string& spec) {
  std::string s = ascii_lower(spec);
  if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos) s = "cuda:" + s;
  return s;
}

}  // namespace

c10::Device parse_device(const std::string& spec) {
  std::string s = canonical_device(spec);
  if (s.empty()) return torch::cuda::is_available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  if (s == "cpu") return c10::Device(c10::kCPU);
  if (s.find(',') != std::string::npos)
    fail("--device ", spec, ": several devices train with one process each: kestrel train --nproc-per-node N --device ", spec,
         " ... (or torchrun --no-python; docs/distributed.md); val, detect and export run on one device");
  c10::Device device(c10::kCPU);
  try {
    device = c10::Device(s);
  } catch (const std::exception&) {
    fail("--device ", spec, ": not a device (use cpu, 0, cuda:0 ...)");
  }
  // mps, xpu, meta ...: devices LibTorch names but kestrel does not train on (their errors come much later).
  if (!device.is_cuda() && !device.is_cpu()) fail("--device ", spec, ": kestrel runs on cpu or CUDA devices (0, cuda:0 ...)");
  if (device.is_cuda()) {
    int count = static_cast<int>(torch::cuda::device_count());
    if (count == 0) fail("--device ", spec, ": no CUDA device is available on this machine (use --device cpu)");
    if (device.has_index() && device.index() >= count)
      fail("--device ", spec, ": only ", count, " CUDA device(s) present");
    if (!device.has_index()) device = c10::Device(c10::kCUDA, 0);
  }
  return device;
}

void make_current(const c10::Device& device) {
  if (device.is_cuda()) c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).setDevice(device);
}

#ifdef KESTREL_WITH_CUDA
CudaSyncErrors::CudaSyncErrors() : previous_(static_cast<int>(c10::cuda::warning_state().get_sync_debug_mode())) {
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
}
CudaSyncErrors::~CudaSyncErrors() {
  c10::cuda::warning_state().set_sync_debug_mode(static_cast<c10::cuda::SyncDebugMode>(previous_));
}
#else
CudaSyncErrors::CudaSyncErrors() = default;
CudaSyncErrors::~CudaSyncErrors() = default;
#endif

bool names_one_gpu(const std::string& spec) { return canonical_device(spec).rfind("cuda:", 0) == 0; }

std::string device_of_rank(const std::string& spec, int local_rank) {
  if (spec.find(',') == std::string::npos) {
    // One named GPU is a list of one, as upstream's CUDA_VISIBLE_DEVICES=<--device> with cuda:LOCAL_RANK
    // among the visible: local rank 0 trains on it, a second process on the node has none (train.py:
    // "insufficient CUDA devices for DDP command"). "", "cuda" and "cpu" name no single GPU: each rank
    // takes cuda:LOCAL_RANK (the caller), or the CPU.
    if (names_one_gpu(spec) && local_rank > 0)
      fail("--device ", spec, " names one GPU for the processes of this node, local rank ", local_rank,
           " has none: name one device per process (--device 0,1,...), or leave --device out (rank r on cuda:r)");
    return spec;
  }
  std::vector<std::string> entries;
  std::string entry;
  for (char ch : spec + ",") {
    if (ch != ',') {
      if (ch != ' ') entry += ch;
      continue;
    }
    if (entry.empty()) fail("--device ", spec, ": an empty entry in the device list");
    entries.push_back(entry);
    entry.clear();
  }
  // One GPU per process: NCCL refuses two ranks on one device ("Duplicate GPU detected") at the first
  // collective, so a repeated entry is named here. CPU entries may repeat (Gloo ranks share the CPU).
  std::vector<std::string> seen;
  for (const std::string& e : entries) {
    std::string key = canonical_device(e);
    if (key == "cuda") key = "cuda:0";
    if (key == "cpu") continue;
    if (std::find(seen.begin(), seen.end(), key) != seen.end())
      fail("--device ", spec, ": ", key, " is listed twice (one GPU per process: NCCL does not run two ranks on one device)");
    seen.push_back(key);
  }
  if (local_rank < 0 || local_rank >= static_cast<int>(entries.size()))
    fail("--device ", spec, ": ", entries.size(), " devices listed for local rank ", local_rank,
         " (one device per process on this node)");
  return entries[static_cast<size_t>(local_rank)];
}

AcceleratorInfo query_accelerators() {
  AcceleratorInfo info;
  info.cuda_available = torch::cuda::is_available();
  info.cuda_device_count = info.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
#ifdef KESTREL_WITH_CUDA
  info.cuda_runtime_version = cuda::runtime_version();
  info.cuda_driver_version = cuda::driver_version();
  for (int i = 0; i < info.cuda_device_count; ++i) info.cuda_device_names.push_back(cuda::device_description(i));
#endif
  info.cudnn_available = torch::cuda::cudnn_is_available();
  // The cuDNN version LibTorch was built against; it needs no device.
  try {
    if (at::globalContext().hasCuDNN()) info.cudnn_version = at::globalContext().versionCuDNN();
  } catch (const c10::Error&) {
    info.cudnn_version = 0;  // unknown
  }
  return info;
}

void synchronize(const c10::Device& device) {
  if (device.is_cpu()) return;
  at::accelerator::synchronizeDevice(device.index());
}

void set_cudnn_benchmark(bool enabled) { at::globalContext().setBenchmarkCuDNN(enabled); }
bool cudnn_benchmark() { return at::globalContext().benchmarkCuDNN(); }

double reserved_memory_gb(const c10::Device& device) {
  if (device.is_cpu()) return 0.0;
  const auto stats = at::accelerator::getDeviceStats(device.index());
  constexpr size_t kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return static_cast<double>(stats.reserved_bytes[kAll].current) / 1e9;
}

AutocastGuard::AutocastGuard(c10::DeviceType device_type, c10::ScalarType dtype, bool enabled)
    : device_type_(device_type), enabled_(enabled) {
  if (!enabled_) return;
  previous_enabled_ = at::autocast::is_autocast_enabled(device_type_);
  previous_dtype_ = at::autocast::get_autocast_dtype(device_type_);
  at::autocast::set_autocast_dtype(device_type_, dtype);
  at::autocast::set_autocast_enabled(device_type_, true);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  // Leaving the outermost region drops the casted-weight cache, as torch.autocast.__exit__.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, previous_enabled_);
  at::autocast::set_autocast_dtype(device_type_, previous_dtype_);
}

}  // namespace kestrel
