#include "kestrel/train/ema.h"

#include <cmath>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "kestrel/core/error.h"
#include "kestrel/models/state_dict.h"

namespace kestrel::train {

ModelEma::ModelEma(std::shared_ptr<models::YoloModel> average, const models::YoloModel& model, EmaOptions options,
                   int64_t updates)
    : average_(std::move(average)), options_(options) {
  const models::NamedTensors source = models::state_dict(model);
  const models::NamedTensors target = models::state_dict(*average_);
  if (source.size() != target.size()) fail("EMA: the averaged model has a different architecture");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i].first != target[i].first || source[i].second.sizes() != target[i].second.sizes())
      fail("EMA: the averaged model differs at ", target[i].first);
    target[i].second.copy_(source[i].second);
    if (at::isFloatingType(target[i].second.scalar_type())) {
      average_floats_.push_back(target[i].second);
      model_floats_.push_back(source[i].second);
    }
  }
  for (const auto& p : average_->parameters()) p.set_requires_grad(false);
  average_->eval();
  const c10::Device device = average_floats_.empty() ? c10::Device(c10::kCPU) : average_floats_.front().device();
  updates_ = at::full({}, static_cast<double>(updates), at::TensorOptions().dtype(at::kDouble).device(device));
}

int64_t ModelEma::updates() const { return static_cast<int64_t>(updates_.item<double>()); }

double ModelEma::decay_at(int64_t updates) const {
  return options_.decay * (1 - std::exp(-static_cast<double>(updates) / options_.tau));
}

void ModelEma::update() {
  torch::NoGradGuard no_grad;
  // d in float64 as upstream's Python float, then rounded to the tensors' float32 as its scalar is;
  // v = v d + (m (1 - d)) in upstream's order of operations.
  updates_.add_(1);
  const at::Tensor d = options_.decay * (1 - at::exp(-updates_ / options_.tau));
  at::_foreach_mul_(average_floats_, d.to(at::kFloat));
  at::_foreach_add_(average_floats_, at::_foreach_mul(model_floats_, (1 - d).to(at::kFloat)));
}

}  // namespace kestrel::train
