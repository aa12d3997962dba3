#include "kestrel/core/cuda_runtime_info.h"

#include <cstdio>

#include <cuda_runtime.h>

namespace kestrel::cuda {

int runtime_version() {
  int version = 0;
  return cudaRuntimeGetVersion(&version) == cudaSuccess ? version : 0;
}

int driver_version() {
  int version = 0;
  return cudaDriverGetVersion(&version) == cudaSuccess ? version : 0;
}

std::string device_description(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return {};
  char text[384];
  std::snprintf(text, sizeof text, "%s (%.1f GiB, sm_%d%d, %d SMs)", prop.name,
                prop.totalGlobalMem / 1073741824.0, prop.major, prop.minor, prop.multiProcessorCount);
  return text;
}

}  // namespace kestrel::cuda
