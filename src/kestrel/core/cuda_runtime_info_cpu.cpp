// cuda_runtime_info.h for builds without CUDA (KESTREL_WITH_CUDA off, e.g. against a CPU-only LibTorch):
// nothing to query. With CUDA, cuda_runtime_info.cu defines these.
#include "kestrel/core/cuda_runtime_info.h"

#ifndef KESTREL_WITH_CUDA
namespace kestrel::cuda {

int runtime_version() { return 0; }
int driver_version() { return 0; }
std::string device_description(int) { return {}; }

}  // namespace kestrel::cuda
#endif
