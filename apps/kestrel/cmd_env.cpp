// kestrel env: what this build and this machine offer.
#include <thread>

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/version.h>

#include "commands.h"
#include "kestrel/core/device.h"
#include "kestrel/dist/process_group.h"

namespace kestrel::app {
namespace {

std::string cuda_version_text(int v) { return v ? std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) : "none"; }

void run_env() {
  const AcceleratorInfo acc = query_accelerators();
  std::printf("kestrel      %s\n", KESTREL_VERSION);
  std::printf("libtorch     %s\n", TORCH_VERSION);
#ifdef KESTREL_WITH_CUDA
  // TORCH_CUDA_ARCH_LIST's spelling: "8.0 9.0+PTX" is sm_80 and sm_90 machine code plus PTX for newer GPUs.
  std::printf("cuda build   yes (runtime %s, driver %s, kestrel's kernels for %s)\n",
              cuda_version_text(acc.cuda_runtime_version).c_str(),
              acc.cuda_driver_version ? cuda_version_text(acc.cuda_driver_version).c_str() : "not installed",
              KESTREL_CUDA_ARCH_LIST);
#else
  std::printf("cuda build   no\n");
#endif
  std::printf("cuda         %s, %d device(s)\n", acc.cuda_available ? "available" : "not available", acc.cuda_device_count);
  for (size_t i = 0; i < acc.cuda_device_names.size(); ++i) std::printf("  cuda:%zu     %s\n", i, acc.cuda_device_names[i].c_str());
  std::printf("cudnn        %s", acc.cudnn_available ? "available" : "not available");
  if (acc.cudnn_version) std::printf(" (%ld)", acc.cudnn_version);
  std::printf("\n");
  // The data-parallel backends this build has (docs/distributed.md): Gloo between CPU processes, NCCL between GPUs.
  std::printf("distributed  gloo %s, nccl %s\n", dist::backend_available(c10::Device(c10::kCPU)) ? "yes" : "no",
              dist::backend_available(c10::Device(c10::kCUDA, 0)) ? "yes" : "no");
  std::printf("cpu threads  %d (hardware %u)\n", at::get_num_threads(), std::thread::hardware_concurrency());
  std::printf("parallel     %s", at::get_parallel_info().c_str());
}

}  // namespace

void add_env_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("env", "kestrel and LibTorch versions, CUDA/cuDNN, devices, distributed backends, CPU threads");
  cmd->callback(run_env);
}

}  // namespace kestrel::app
