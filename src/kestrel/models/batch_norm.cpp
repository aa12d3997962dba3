#include "kestrel/models/batch_norm.h"

#include <torch/nn/options/batchnorm.h>

namespace kestrel::models {

at::Tensor BatchNorm2dImpl::forward(const at::Tensor& x) {
  if (sync_ && is_training()) return sync_->forward(*this, x);
  return torch::nn::BatchNorm2dImpl::forward(x);
}

BatchNorm2d make_batch_norm(int64_t channels) {
  return BatchNorm2d(torch::nn::BatchNorm2dOptions(channels).eps(kBatchNormEps).momentum(kBatchNormMomentum));
}

int set_batch_norm_sync(torch::nn::Module& module, const std::shared_ptr<const BatchNormSync>& sync) {
  int n = 0;
  for (const auto& m : module.modules(/*include_self=*/true))
    if (auto* bn = dynamic_cast<BatchNorm2dImpl*>(m.get())) {
      bn->set_sync(sync);
      ++n;
    }
  return n;
}

}  // namespace kestrel::models
