// Overlaps the next batch's host-to-device copy (and its conversion to float 0..1) with the current
// step: on CUDA the copy runs on a side stream and the compute stream waits for it only when the
// batch is taken; on the CPU it is to_device() in order.
#pragma once
#include <functional>
#include <memory>
#include <optional>

#include <c10/core/Device.h>

#include "kestrel/data/loader.h"

namespace kestrel::data {

class DevicePrefetcher {
 public:
  // trim_multiple > 0: trim_targets(batch, trim_multiple) before the copy (as the trainer does).
  DevicePrefetcher(DataLoader& loader, c10::Device device, bool channels_last = false, int64_t trim_multiple = 0);
  ~DevicePrefetcher();
  // The next batch, ready for use on the current stream; nullopt after the epoch's last batch.
  // Call loader.start_epoch() first; one prefetcher serves one epoch.
  std::optional<DeviceBatch> next();
  // Called with each host batch (trimmed) before its copy starts, on the caller's thread: the trainer
  // draws the first batches of a run from it (train_batch0.jpg ...). Must not keep references to it.
  void set_host_batch_hook(std::function<void(const Batch&)> hook) { host_hook_ = std::move(hook); }

 private:
  void stage();  // takes the loader's next batch and starts its copy

  DataLoader& loader_;
  c10::Device device_;
  bool channels_last_;
  int64_t trim_multiple_;
  bool started_ = false;
  std::optional<DeviceBatch> staged_;
  std::function<void(const Batch&)> host_hook_;
  struct CudaState;                   // side stream and "copy done" event (CUDA builds only)
  std::unique_ptr<CudaState> cuda_;
};

}  // namespace kestrel::data
