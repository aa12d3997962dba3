// A device tensor's values brought to the host without draining the device: the copy into pinned memory
// is queued behind the work already on the device's current stream, and read later, once an event says
// it arrived. Used where the training loop shows or votes on values (progress losses, the Ctrl-C vote)
// and must not wait for the steps queued behind them. On the CPU the copy happens at once.
#pragma once
#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>

namespace kestrel {

class AsyncHostCopy {
 public:
  // Queues the copy of `src` (any dtype, cast to float32; any shape) behind the work queued so far on
  // its device's current stream. The host buffer is reused: start() again only after arrived().
  void start(const at::Tensor& src);
  bool started() const { return started_; }
  // The last started copy is in host memory (does not wait; true on the CPU).
  bool arrived() const;
  // Waits for the last started copy (a copy long queued is a short wait) and returns it: float32 on
  // the CPU, src's shape.
  const at::Tensor& wait();

 private:
  at::Tensor host_;                  // float32, pinned when the source is on CUDA
  std::optional<c10::Event> done_;  // recorded behind the copy (CUDA sources only)
  bool started_ = false;
};

}  // namespace kestrel
