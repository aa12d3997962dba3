#include "kestrel/models/batch_norm.h"

#include <ATen/ATen.h>
#include <torch/nn/options/batchnorm.h>

#include "kestrel/models/checkpoint.h"
#include "kestrel/models/parameter_budget.h"

namespace kestrel::models {

at::Tensor BatchNorm2dImpl::forward(const at::Tensor& x) {
  if (sync_ && is_training()) return sync_->forward(*this, x);
  // Recomputing a checkpointed layer: the same batch statistics, running statistics left as they are
  // (no running tensors given: nothing to update).
  if (recomputing() && is_training())
    return at::batch_norm(x, weight, bias, at::Tensor(), at::Tensor(), /*training=*/true, /*momentum=*/0.0,
                          options.eps(), at::globalContext().userEnabledCuDNN());
  return torch::nn::BatchNorm2dImpl::forward(x);
}

BatchNorm2d make_batch_norm(int64_t channels) {
  charge_parameters("batch norm", {4, channels});  // weight, bias, running mean and variance
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
