// The optimisers of YOLOv5/YOLOv7 train.py over the three parameter groups (biases, decayed weights,
// norm weights), as thin classes over LibTorch's fused kernels (`_fused_sgd_`, `_fused_adam_`,
// `_fused_adamw_`): one kernel call per group and step instead of several per parameter, on CPU and CUDA.
//
// Upstream semantics kept:
//  - SGD: momentum, Nesterov, no dampening; weight decay (L2, added to the gradient) only in the
//    decayed-weights group. Momentum buffers start at zero, which equals torch's "first step copies the
//    gradient" without dampening.
//  - Adam: betas (momentum, 0.999), eps 1e-8, L2 weight decay in the decayed group (torch.optim.Adam);
//    AdamW: decoupled decay in that group (torch.optim.AdamW).
//  - With a GradScaler, the scaled gradients are unscaled inside the kernel and the whole update is
//    skipped when `found_inf` is set, without a host synchronisation on CUDA. Adam's step counters are
//    device tensors that do not advance on skipped steps (as torch.optim.Adam with fused=True).
//  - The learning rates are device tensors that the kernels read, set before the step: so the update has
//    no host input but the momentum, and a CUDA graph can capture it once and replay it for every batch
//    of the epochs that follow the warm-up (the momentum is constant there, the lr changes per epoch).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kestrel/train/param_groups.h"

namespace kestrel::train {

enum class OptimizerKind { sgd, adam, adamw };

// "SGD", "Adam", "AdamW" (upstream --optimizer spellings, case-insensitive).
OptimizerKind parse_optimizer_kind(const std::string& name);
std::string optimizer_name(OptimizerKind kind);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::sgd;
  double weight_decay = 5e-4;  // for the decayed-weights group, already scaled to the effective batch
  double beta2 = 0.999;        // Adam/AdamW
  double eps = 1e-8;           // Adam/AdamW
  // true: LibTorch's fused kernels, as above. false: torch.optim's multi-tensor ("foreach") algorithm,
  // PyTorch's default on CUDA and so what upstream trains with: several kernels per group, the learning
  // rate as a host number, and with a loss scaler a host read of found_inf to decide whether to step
  // (as GradScaler.step). It is the baseline row of `kestrel bench train --ablation`; a CUDA graph
  // cannot capture it.
  bool fused = true;
};

class Optimizer {
 public:
  // Groups are (0) biases, (1) decayed weights, (2) norm weights. Parameters without requires_grad
  // (frozen layers) are left out of every update.
  Optimizer(const ParamGroups& groups, OptimizerOptions options);

  // One update with the given per-group learning rates and momentum (SGD momentum / Adam beta1):
  // set_learning_rates(lr), then step(momentum, ...).
  void step(const std::array<double, 3>& lr, double momentum, const at::Tensor& grad_scale = {},
            const at::Tensor& found_inf = {});

  // Writes the per-group learning rates into their device tensors (outside any captured graph).
  void set_learning_rates(const std::array<double, 3>& lr);
  // One update with the learning rates last set. Parameters whose gradient is undefined are skipped
  // (as torch.optim). grad_scale / found_inf: from a GradScaler (0-dim float tensors on the
  // parameters' device), or undefined for plain fp32.
  void step(double momentum, const at::Tensor& grad_scale = {}, const at::Tensor& found_inf = {});

  // set_to_none: every gradient becomes undefined (upstream's zero_grad in recent PyTorch); otherwise
  // they are zeroed in place and keep their memory (what a captured graph needs).
  void zero_grad(bool set_to_none = true);

  // State for checkpoints: momentum buffers or Adam moments and step counters, named
  // "group<g>.<i>.<what>", on the parameters' device.
  std::vector<std::pair<std::string, at::Tensor>> state() const;
  // Restores state() output; a missing or mis-shaped entry is an error naming `source`.
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& state, const std::string& source);

  const OptimizerOptions& options() const { return options_; }

 private:
  struct Group {
    std::vector<at::Tensor> params;
    double weight_decay = 0;
    std::vector<at::Tensor> momentum;          // SGD
    std::vector<at::Tensor> exp_avg, exp_avg_sq, step;  // Adam/AdamW (step: 0-dim float32)
    at::Tensor lr;                             // 0-dim float32 on the parameters' device
    double lr_value = 0;                       // the same, on the host (foreach algorithm)
    std::vector<double> step_value;            // Adam's step counts on the host (foreach algorithm, as torch.optim's)
  };
  OptimizerOptions options_;
  std::array<Group, 3> groups_;
};

}  // namespace kestrel::train
