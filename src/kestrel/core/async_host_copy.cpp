#include "kestrel/core/async_host_copy.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

namespace kestrel {

void AsyncHostCopy::start(const at::Tensor& src) {
  TORCH_CHECK(!started_ || arrived(), "AsyncHostCopy::start: the previous copy has not arrived yet");
  if (!src.is_cuda()) {  // one synchronous copy (a copy even where src is float32 already: a snapshot)
    host_ = src.to(at::kCPU, at::kFloat, /*non_blocking=*/false, /*copy=*/true);
    done_.reset();
    started_ = true;
    return;
  }
  const at::Tensor values = src.to(at::kFloat);
  if (!host_.defined() || host_.sizes() != values.sizes()) {
    host_ = at::empty(values.sizes(), at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
  }
  if (!done_) done_.emplace(c10::DeviceType::CUDA);
  // The pinned copy is ordered after everything queued on this stream; the event marks its end. The
  // caching host allocator keeps host_ alive for the copy even if it is replaced meanwhile.
  host_.copy_(values, /*non_blocking=*/true);
  done_->record(c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(values.device()));
  started_ = true;
}

bool AsyncHostCopy::arrived() const { return !done_ || done_->query(); }

const at::Tensor& AsyncHostCopy::wait() {
  TORCH_CHECK(started_, "AsyncHostCopy::wait: no copy was started");
  if (done_) done_->synchronize();
  return host_;
}

}  // namespace kestrel
