#include "kestrel/train/optimizer.h"

#include <cmath>
#include <cctype>
#include <map>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "kestrel/core/ascii_lower.h"
#include "kestrel/core/error.h"

namespace kestrel::train {
namespace {

using TensorList = std::vector<at::Tensor>;

// torch.optim.SGD's multi-tensor update (no dampening, Nesterov): g += wd p; buf = momentum buf + g;
// p -= lr (g + momentum buf). Zero-initialised buffers equal torch's first-step copy of the gradient.
void sgd_foreach(const TensorList& params, const TensorList& grads, const TensorList& bufs, double weight_decay,
                 double momentum, double lr) {
  const TensorList g = weight_decay != 0 ? at::_foreach_add(grads, params, weight_decay) : grads;
  if (momentum == 0) {  // torch: a plain step, the buffers neither made nor updated
    at::_foreach_add_(params, g, -lr);
    return;
  }
  at::_foreach_mul_(bufs, momentum);
  at::_foreach_add_(bufs, g);
  at::_foreach_add_(params, at::_foreach_add(g, bufs, momentum), -lr);
}

// torch.optim.Adam / AdamW's multi-tensor update with host step counts t (already advanced), as its
// default (not capturable) path: m = lerp(m, g, 1 - b1); v = b2 v + (1 - b2) g²;
// p -= lr / (1 - b1^t) m / (sqrt(v) / sqrt(1 - b2^t) + eps). Per-tensor scalars keep the fast kernels.
void adam_foreach(const TensorList& params, const TensorList& grads, const TensorList& avg, const TensorList& avg_sq,
                  const std::vector<double>& steps, double lr, double beta1, double beta2, double weight_decay,
                  double eps, bool decoupled) {
  TensorList g = grads;
  if (decoupled) at::_foreach_mul_(params, 1 - lr * weight_decay);        // AdamW
  else if (weight_decay != 0) g = at::_foreach_add(grads, params, weight_decay);  // Adam: L2 in the gradient
  at::_foreach_lerp_(avg, g, 1 - beta1);
  at::_foreach_mul_(avg_sq, beta2);
  at::_foreach_addcmul_(avg_sq, g, g, 1 - beta2);
  std::vector<at::Scalar> step_size, correction2_sqrt;
  for (double t : steps) {
    step_size.emplace_back(-lr / (1 - std::pow(beta1, t)));
    correction2_sqrt.emplace_back(std::sqrt(1 - std::pow(beta2, t)));
  }
  TensorList denom = at::_foreach_sqrt(avg_sq);
  at::_foreach_div_(denom, correction2_sqrt);
  at::_foreach_add_(denom, eps);
  at::_foreach_addcdiv_(params, avg, denom, step_size);
}

}  // namespace

OptimizerKind parse_optimizer_kind(const std::string& name) {
  const std::string lower = ascii_lower(name);
  if (lower == "sgd") return OptimizerKind::sgd;
  if (lower == "adam") return OptimizerKind::adam;
  if (lower == "adamw") return OptimizerKind::adamw;
  fail("--optimizer ", name, ": expected SGD, Adam or AdamW");
}

std::string optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::sgd: return "SGD";
    case OptimizerKind::adam: return "Adam";
    case OptimizerKind::adamw: return "AdamW";
  }
  return "?";
}

Optimizer::Optimizer(const ParamGroups& groups, OptimizerOptions options) : options_(options) {
  const std::array<const std::vector<at::Tensor>*, 3> sources = {&groups.biases, &groups.weights, &groups.norm_weights};
  for (size_t g = 0; g < 3; ++g) {
    Group& group = groups_[g];
    group.weight_decay = g == 1 ? options_.weight_decay : 0.0;
    for (const at::Tensor& p : *sources[g]) {
      if (!p.requires_grad()) continue;  // frozen
      group.params.push_back(p);
      // Zero buffers rather than torch's "first step copies the gradient": identical without dampening
      // (buf = momentum * 0 + grad), and still right when the first step is skipped for inf/NaN.
      if (options_.kind == OptimizerKind::sgd) {
        group.momentum.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
      } else {
        group.exp_avg.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
        group.exp_avg_sq.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
        group.step.push_back(at::zeros({}, p.options().dtype(at::kFloat)));
        group.step_value.push_back(0);
      }
    }
    const c10::Device device = group.params.empty() ? c10::Device(c10::kCPU) : group.params.front().device();
    group.lr = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
  }
}

void Optimizer::step(const std::array<double, 3>& lr, double momentum, const at::Tensor& grad_scale,
                     const at::Tensor& found_inf) {
  set_learning_rates(lr);
  step(momentum, grad_scale, found_inf);
}

void Optimizer::set_learning_rates(const std::array<double, 3>& lr) {
  for (size_t g = 0; g < 3; ++g) {
    groups_[g].lr.fill_(lr[g]);
    groups_[g].lr_value = lr[g];
  }
}

void Optimizer::step(double momentum, const at::Tensor& grad_scale, const at::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  const std::optional<at::Tensor> scale = grad_scale.defined() ? std::optional<at::Tensor>(grad_scale) : std::nullopt;
  const std::optional<at::Tensor> inf = found_inf.defined() ? std::optional<at::Tensor>(found_inf) : std::nullopt;
  // The foreach algorithm decides on the host, as GradScaler.step: one device-to-host read per step.
  if (!options_.fused && inf && inf->item<float>() != 0) return;
  for (size_t g = 0; g < 3; ++g) {
    Group& group = groups_[g];
    // The kernels take parallel lists: only parameters that received a gradient this step.
    std::vector<at::Tensor> params, grads, buf, avg, avg_sq, steps;
    std::vector<double> step_values;  // foreach Adam: the host counts, advanced
    for (size_t i = 0; i < group.params.size(); ++i) {
      const at::Tensor& grad = group.params[i].grad();
      if (!grad.defined()) continue;
      if (!options_.fused && options_.kind != OptimizerKind::sgd) step_values.push_back(++group.step_value[i]);
      params.push_back(group.params[i]);
      grads.push_back(grad);
      if (options_.kind == OptimizerKind::sgd) {
        buf.push_back(group.momentum[i]);
      } else {
        avg.push_back(group.exp_avg[i]);
        avg_sq.push_back(group.exp_avg_sq[i]);
        steps.push_back(group.step[i]);
      }
    }
    if (params.empty()) continue;
    if (!options_.fused) {
      if (scale) at::_foreach_div_(grads, *scale);  // GradScaler.unscale_, unless done before
      if (options_.kind == OptimizerKind::sgd) {
        sgd_foreach(params, grads, buf, group.weight_decay, momentum, group.lr_value);
      } else {
        at::_foreach_add_(steps, 1.0);  // the device counts too: state() and a later fused optimiser read them
        adam_foreach(params, grads, avg, avg_sq, step_values, group.lr_value, momentum, options_.beta2,
                     group.weight_decay, options_.eps, options_.kind == OptimizerKind::adamw);
      }
      continue;
    }
    if (options_.kind == OptimizerKind::sgd) {
      // At momentum 0 (a warm-up from warmup_momentum 0) the kernel takes no buffers, and torch's SGD leaves
      // them alone: the zero buffers then start from the next step's gradient, as torch's first buffer.
      if (momentum == 0) buf.clear();
      at::_fused_sgd_(params, grads, buf, group.weight_decay, momentum, group.lr, /*dampening=*/0.0, /*nesterov=*/true,
                      /*maximize=*/false, /*is_first_step=*/false, scale, inf);
      continue;
    }
    // Bias correction counts the step before the kernel runs; a skipped step is taken back after it.
    at::_foreach_add_(steps, 1.0);
    if (options_.kind == OptimizerKind::adam)
      at::_fused_adam_(params, grads, avg, avg_sq, /*max_exp_avg_sqs=*/{}, steps, group.lr, momentum, options_.beta2,
                       group.weight_decay, options_.eps, /*amsgrad=*/false, /*maximize=*/false, scale, inf);
    else
      at::_fused_adamw_(params, grads, avg, avg_sq, /*max_exp_avg_sqs=*/{}, steps, group.lr, momentum, options_.beta2,
                        group.weight_decay, options_.eps, /*amsgrad=*/false, /*maximize=*/false, scale, inf);
    if (inf) at::_foreach_sub_(steps, std::vector<at::Tensor>(steps.size(), inf->reshape({})));
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  std::vector<at::Tensor> grads;
  for (Group& group : groups_)
    for (at::Tensor& p : group.params) {
      if (set_to_none) p.mutable_grad() = at::Tensor();
      else if (p.grad().defined()) grads.push_back(p.grad());
    }
  if (!grads.empty()) at::_foreach_zero_(grads);
}

std::vector<std::pair<std::string, at::Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t g = 0; g < 3; ++g) {
    const Group& group = groups_[g];
    for (size_t i = 0; i < group.params.size(); ++i) {
      const std::string prefix = cat("group", g, ".", i, ".");
      if (options_.kind == OptimizerKind::sgd) {
        out.emplace_back(prefix + "momentum", group.momentum[i]);
      } else {
        out.emplace_back(prefix + "exp_avg", group.exp_avg[i]);
        out.emplace_back(prefix + "exp_avg_sq", group.exp_avg_sq[i]);
        out.emplace_back(prefix + "step", group.step[i]);
      }
    }
  }
  return out;
}

void Optimizer::load_state(const std::vector<std::pair<std::string, at::Tensor>>& state, const std::string& source) {
  std::map<std::string, at::Tensor> by_name(state.begin(), state.end());
  torch::NoGradGuard no_grad;
  size_t used = 0;
  for (auto& [name, target] : this->state()) {
    const auto it = by_name.find(name);
    if (it == by_name.end())
      fail(source, ": optimizer state '", name, "' is missing (", optimizer_name(options_.kind),
           " with a different model or frozen layers?)");
    if (it->second.sizes() != target.sizes())
      fail(source, ": optimizer state '", name, "' has shape ", it->second.sizes(), ", expected ", target.sizes());
    target.copy_(it->second);  // the state() tensors alias the buffers
    ++used;
  }
  if (used != by_name.size())
    fail(source, ": optimizer state has ", by_name.size(), " entries, this ", optimizer_name(options_.kind),
         " optimiser has ", used, " (a different optimiser or model?)");
  for (Group& group : groups_)  // the foreach algorithm's host copies of Adam's step counts
    for (size_t i = 0; i < group.step.size(); ++i) group.step_value[i] = group.step[i].item<double>();
}

}  // namespace kestrel::train
