#include "kestrel/data/device_prefetcher.h"

#ifdef KESTREL_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <map>
#include <mutex>
#endif

namespace kestrel::data {

#ifdef KESTREL_WITH_CUDA
struct DevicePrefetcher::CudaState {
  c10::cuda::CUDAStream stream;
  at::cuda::CUDAEvent copied;
};

namespace {

// One copy stream per device for the whole process. The caching allocator reuses a freed block only
// for allocations on the stream that made it; a new pool stream per prefetcher (one per epoch) would
// leave every epoch's batch buffers cached for a stream no later epoch uses.
c10::cuda::CUDAStream copy_stream(c10::DeviceIndex index) {
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = streams.find(index);
  if (it == streams.end()) it = streams.emplace(index, c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index)).first;
  return it->second;
}

}  // namespace
#else
struct DevicePrefetcher::CudaState {};
#endif

DevicePrefetcher::DevicePrefetcher(DataLoader& loader, c10::Device device, bool channels_last, int64_t trim_multiple)
    : loader_(loader), device_(device), channels_last_(channels_last), trim_multiple_(trim_multiple) {
#ifdef KESTREL_WITH_CUDA
  if (device_.is_cuda())
    cuda_.reset(new CudaState{copy_stream(device_.index()), at::cuda::CUDAEvent()});
#endif
}

DevicePrefetcher::~DevicePrefetcher() = default;

void DevicePrefetcher::stage() {
  std::optional<Batch> host = loader_.next();
  if (!host) {
    staged_.reset();
    return;
  }
  if (trim_multiple_ > 0) trim_targets(*host, trim_multiple_);
  if (host_hook_) host_hook_(*host);
#ifdef KESTREL_WITH_CUDA
  if (cuda_) {
    // Copies from pinned memory are asynchronous; the caching host allocator keeps the pinned block
    // alive until the copy has finished, so `host` may go out of scope here.
    c10::cuda::CUDAStreamGuard on_side_stream(cuda_->stream);
    staged_ = to_device(*host, device_, channels_last_);
    cuda_->copied.record(cuda_->stream);
    return;
  }
#endif
  staged_ = to_device(*host, device_, channels_last_);
}

std::optional<DeviceBatch> DevicePrefetcher::next() {
  if (!started_) {
    stage();
    started_ = true;
  }
  if (!staged_) return std::nullopt;
  DeviceBatch out = std::move(*staged_);
#ifdef KESTREL_WITH_CUDA
  if (cuda_) {
    // The compute stream waits for the copy on the GPU (the host does not), and the side stream's
    // tensors are marked as used by it so the allocator does not hand their memory out early.
    const auto current = c10::cuda::getCurrentCUDAStream(device_.index());
    cuda_->copied.block(current);
    for (at::Tensor* t : {&out.images, &out.targets, &out.target_mask}) t->record_stream(current);
  }
#endif
  stage();
  return out;
}

}  // namespace kestrel::data
