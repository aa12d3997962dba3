#include "kestrel/core/device.h"

#include <ATen/Context.h>
#include <torch/cuda.h>

#include "kestrel/core/cuda_runtime_info.h"
#include "kestrel/core/error.h"

namespace kestrel {

c10::Device parse_device(const std::string& spec) {
  std::string s = spec;
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (s.empty()) return torch::cuda::is_available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  if (s == "cpu") return c10::Device(c10::kCPU);
  if (s.find(',') != std::string::npos)
    fail("--device ", spec, ": several devices need the multi-device launcher (one device per rank)");
  bool all_digits = s.find_first_not_of("0123456789") == std::string::npos;
  if (all_digits) s = "cuda:" + s;
  c10::Device device(c10::kCPU);
  try {
    device = c10::Device(s);
  } catch (const std::exception&) {
    fail("--device ", spec, ": not a device (use cpu, 0, cuda:0 ...)");
  }
  if (device.is_cuda()) {
    int count = static_cast<int>(torch::cuda::device_count());
    if (count == 0) fail("--device ", spec, ": no CUDA device is available on this machine (use --device cpu)");
    if (device.has_index() && device.index() >= count)
      fail("--device ", spec, ": only ", count, " CUDA device(s) present");
    if (!device.has_index()) device = c10::Device(c10::kCUDA, 0);
  }
  return device;
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
  if (at::globalContext().hasCuDNN() && info.cuda_available) info.cudnn_version = at::globalContext().versionCuDNN();
  return info;
}

}  // namespace kestrel
