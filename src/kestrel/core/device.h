// The device seam: parsing upstream-style device strings and describing what this machine has.
// Everything device-specific (CUDA today, other LibTorch backends later) is asked here, not inline.
#pragma once
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace kestrel {

// Upstream spellings: "" (first CUDA device if any, else CPU), "cpu", "0", "cuda:0", "cuda".
c10::Device parse_device(const std::string& spec);

// Makes a CUDA `device` this thread's current device (a no-op for the CPU). Upstream's select_device
// narrows CUDA_VISIBLE_DEVICES so that the chosen GPU is device 0; here anything that asks for the current
// device (a stream or library call without an index) gets the chosen one, and --device 1 makes no context
// on GPU 0. Called by each command once it has parsed --device.
void make_current(const c10::Device& device);

// Data parallel: this rank's entry of a device list ("0,1" -> "1" for local rank 1, as upstream's
// --device 0,1 under torch.distributed.run). A single GPU ("1", "cuda:1") is a list of one: local rank 0's,
// an error for the others. "", "cuda" and "cpu" are returned as they are (the caller picks cuda:LOCAL_RANK).
std::string device_of_rank(const std::string& spec, int local_rank);

// Whether `spec` names one GPU ("1", "cuda:1"): "", "cuda" and "cpu" do not, nor does a list.
bool names_one_gpu(const std::string& spec);

struct AcceleratorInfo {
  bool cuda_available = false;
  int cuda_device_count = 0;
  std::vector<std::string> cuda_device_names;  // "NVIDIA H200 (139.8 GiB, sm_90)"
  bool cudnn_available = false;
  long cudnn_version = 0;                       // e.g. 91900 (0 when unknown)
  int cuda_runtime_version = 0;                 // the CUDA runtime kestrel was linked with, e.g. 13000
  int cuda_driver_version = 0;                  // 0 when no driver is installed
};
AcceleratorInfo query_accelerators();

// While alive, on a CUDA build: any CUDA call that makes the host wait for the device (a copy to the host
// or from pageable memory, a stream synchronisation: what .item(), nonzero and boolean-mask indexing do)
// throws, as torch.cuda.set_sync_debug_mode("error"). For tests of the rule that the step never waits.
class CudaSyncErrors {
 public:
  CudaSyncErrors();
  ~CudaSyncErrors();
  CudaSyncErrors(const CudaSyncErrors&) = delete;
  CudaSyncErrors& operator=(const CudaSyncErrors&) = delete;

 private:
  int previous_ = 0;
};

// Waits for the device's queued work (a no-op on the CPU): for timings only, never inside a step.
void synchronize(const c10::Device& device);

// cuDNN autotuning (torch.backends.cudnn.benchmark): each new convolution shape is timed once and the
// fastest algorithm kept. LibTorch leaves it off, Python's reference runs turn it on; kestrel turns it on
// for training and benches on CUDA, where shapes repeat. Harmless without CUDA.
void set_cudnn_benchmark(bool enabled);
bool cudnn_benchmark();

// Memory the caching allocator has reserved on `device`, in GB (0 on the CPU): upstream's GPU_mem column.
double reserved_memory_gb(const c10::Device& device);

// Mixed precision for a scope (Python's torch.autocast): ops on `device_type` run in `dtype` where
// autocast's lists say so. Disabled guards do nothing. Not copyable.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device_type, c10::ScalarType dtype, bool enabled);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_type_;
  bool enabled_, previous_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Float;
};

}  // namespace kestrel
