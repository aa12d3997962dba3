// BatchNorm2d of every YOLO model: torch's BatchNorm2d plus a hook that lets data-parallel training
// compute the batch statistics over all ranks (upstream's --sync-bn, PyTorch's SyncBatchNorm). The
// hook is an interface here because the models layer knows nothing about process groups; dist/
// implements it (dist/sync_batch_norm).
#pragma once
#include <memory>

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/batchnorm.h>

namespace kestrel::models {

// Upstream's initialize_weights(): every BatchNorm2d gets eps 1e-3 and momentum 0.03.
constexpr double kBatchNormEps = 1e-3;
constexpr double kBatchNormMomentum = 0.03;

class BatchNorm2dImpl;

// Training-mode batch norm whose mean and variance cover a batch larger than this process's.
class BatchNormSync {
 public:
  virtual ~BatchNormSync() = default;
  // x [N, C, H, W] -> BN(x) with the statistics of the global batch; updates bn's running statistics
  // (not while models::recomputing(): a checkpointed layer's second pass).
  virtual at::Tensor forward(BatchNorm2dImpl& bn, const at::Tensor& x) const = 0;
};

// Same parameters, buffers and state-dict keys as torch::nn::BatchNorm2d (code that looks for
// torch::nn::BatchNorm2dImpl, such as the optimiser's parameter groups, finds these too).
class BatchNorm2dImpl : public torch::nn::BatchNorm2dImpl {
 public:
  using torch::nn::BatchNorm2dImpl::BatchNorm2dImpl;

  // Synchronised in training mode when a sync is set; eval mode always uses the running statistics.
  at::Tensor forward(const at::Tensor& x);

  void set_sync(std::shared_ptr<const BatchNormSync> sync) { sync_ = std::move(sync); }
  bool synchronised() const { return sync_ != nullptr; }

 private:
  std::shared_ptr<const BatchNormSync> sync_;
};
TORCH_MODULE(BatchNorm2d);

BatchNorm2d make_batch_norm(int64_t channels);  // eps 1e-3, momentum 0.03

// Sets `sync` (nullptr: clears it) on every BatchNorm2d inside `module`; returns how many.
int set_batch_norm_sync(torch::nn::Module& module, const std::shared_ptr<const BatchNormSync>& sync);

}  // namespace kestrel::models
