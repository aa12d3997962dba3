#include "kestrel/train/grad_scaler.h"

#include <map>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "kestrel/core/error.h"

namespace kestrel::train {

GradScaler::GradScaler(GradScalerOptions options, const at::Device& device) : options_(options) {
  if (options_.init_scale <= 0) fail("loss scale: the initial scale must be > 0, not ", options_.init_scale);
  const auto f = at::TensorOptions().dtype(at::kFloat).device(device);
  scale_ = at::full({}, options_.init_scale, f);
  growth_tracker_ = at::zeros({}, f.dtype(at::kInt));
  found_inf_ = at::zeros({1}, f);
  skipped_ = at::zeros({}, f);
}

at::Tensor GradScaler::scale(const at::Tensor& loss) const { return options_.enabled ? loss * scale_ : loss; }

void GradScaler::begin_step() {
  if (!options_.enabled) return;
  found_inf_.zero_();
  unscaled_ = false;
}

namespace {

// The fused check-and-multiply over grads grouped by device and dtype (the kernel wants one of each per call).
void check_and_scale(const std::vector<at::Tensor>& grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  std::map<std::pair<int, int>, std::vector<at::Tensor>> by_kind;
  for (const at::Tensor& g : grads)
    if (g.defined()) by_kind[{static_cast<int>(g.device().index()), static_cast<int>(g.scalar_type())}].push_back(g);
  for (auto& [kind, list] : by_kind) at::_amp_foreach_non_finite_check_and_unscale_(list, found_inf, inv_scale);
}

}  // namespace

void GradScaler::unscale(const std::vector<at::Tensor>& grads) {
  if (!options_.enabled || unscaled_) return;
  torch::NoGradGuard no_grad;
  // inv_scale computed in double then rounded, as torch.amp.GradScaler.
  check_and_scale(grads, found_inf_, scale_.to(at::kDouble).reciprocal().to(at::kFloat));
  unscaled_ = true;
}

void GradScaler::check(const std::vector<at::Tensor>& grads) {
  if (!options_.enabled || unscaled_) return;
  torch::NoGradGuard no_grad;
  check_and_scale(grads, found_inf_, at::ones({}, scale_.options()));  // x 1: a pure check
}

at::Tensor GradScaler::grad_scale() const { return options_.enabled && !unscaled_ ? scale_ : at::Tensor(); }
at::Tensor GradScaler::found_inf() const { return options_.enabled ? found_inf_ : at::Tensor(); }

void GradScaler::update() {
  if (!options_.enabled) return;
  torch::NoGradGuard no_grad;
  skipped_.add_(found_inf_.squeeze());
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor, options_.backoff_factor,
                         options_.growth_interval);
}

double GradScaler::current_scale() const { return options_.enabled ? scale_.item<double>() : 1.0; }
int64_t GradScaler::skipped_steps() const { return options_.enabled ? static_cast<int64_t>(skipped_.item<float>()) : 0; }

std::vector<std::pair<std::string, at::Tensor>> GradScaler::state() const {
  return {{"scale", scale_}, {"growth_tracker", growth_tracker_}, {"skipped_steps", skipped_}};
}

void GradScaler::load_state(const std::vector<std::pair<std::string, at::Tensor>>& state, const std::string& source) {
  std::map<std::string, at::Tensor> by_name(state.begin(), state.end());
  torch::NoGradGuard no_grad;
  for (auto& [name, target] : this->state()) {
    const auto it = by_name.find(name);
    if (it == by_name.end()) fail(source, ": loss-scaler state '", name, "' is missing");
    if (it->second.numel() != 1) fail(source, ": loss-scaler state '", name, "' must hold one value");
    target.copy_(it->second.reshape({}));
  }
}

}  // namespace kestrel::train
