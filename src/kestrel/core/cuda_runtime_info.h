// Versions read straight from the CUDA runtime (compiled by nvcc when KESTREL_WITH_CUDA is on; without
// CUDA, cuda_runtime_info_cpu.cpp answers 0 and empty).
#pragma once
#include <string>

namespace kestrel::cuda {

int runtime_version();  // cudaRuntimeGetVersion, 0 if the build has no CUDA
int driver_version();   // cudaDriverGetVersion, 0 when no driver is present
// "name (memory GiB, sm_XY)" of device `index`; empty if it cannot be queried.
std::string device_description(int index);

}  // namespace kestrel::cuda
