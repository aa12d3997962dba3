// Dynamic loss scaling for fp16 training (PyTorch's GradScaler state machine, over ATen's fused
// `_amp_foreach_non_finite_check_and_unscale_` and `_amp_update_scale_`): the loss is multiplied by
// `scale` before backward; a step whose gradients contain inf/NaN is skipped and the scale halves;
// after `growth_interval` clean steps in a row the scale doubles. Everything stays on the device:
// nothing here reads a value back to the host, except skipped_steps() (for the log line).
#pragma once
#include <cstdint>
#include <limits>
#include <vector>

#include <ATen/core/Tensor.h>

namespace kestrel::train {

struct GradScalerOptions {
  bool enabled = true;
  double init_scale = 65536.0;  // 2^16, torch.amp.GradScaler's default
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// --loss-scale's range: a normal float32 number (about 1.2e-38 to 3.4e38), as the scale lives in a float32
// tensor; a smaller one rounded to 0, and a zero scale unscales every gradient to NaN.
inline bool is_valid_loss_scale(double scale) {
  return scale >= std::numeric_limits<float>::min() && scale <= std::numeric_limits<float>::max();
}

class GradScaler {
 public:
  GradScaler(GradScalerOptions options, const at::Device& device);

  // loss * scale (the loss itself when disabled).
  at::Tensor scale(const at::Tensor& loss) const;

  // Divides the gradients by the scale in place and records whether any is inf/NaN (needed before
  // gradient clipping). Call at most once per step; after it, pass grad_scale() = undefined to the optimiser.
  void unscale(const std::vector<at::Tensor>& grads);

  // Only records whether any gradient is inf/NaN, leaving them scaled: the fused optimiser kernels then
  // unscale inside the update (grad_scale()). One of unscale() or check() must run before the step:
  // the kernels read found_inf but do not compute it.
  void check(const std::vector<at::Tensor>& grads);

  // For the fused optimiser kernels: the scale to divide by (undefined when disabled or already
  // unscaled), and the found-inf flag (undefined when disabled).
  at::Tensor grad_scale() const;
  at::Tensor found_inf() const;

  // Prepares the flag of the coming step: zero, and "not yet unscaled".
  void begin_step();
  // After the optimiser step: backs off or grows the scale, counts a skipped step on the device.
  void update();

  bool enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }
  double current_scale() const;   // host read: for logs and checkpoints only
  int64_t skipped_steps() const;  // host read: for logs only

  // Checkpoint state: scale, growth tracker, skipped-step count.
  std::vector<std::pair<std::string, at::Tensor>> state() const;
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& state, const std::string& source);

 private:
  GradScalerOptions options_;
  at::Tensor scale_;           // 0-dim float32
  at::Tensor growth_tracker_;  // 0-dim int32
  at::Tensor found_inf_;       // 0-dim float32 (1 element), 1.0 when this step's gradients are not finite
  at::Tensor skipped_;         // 0-dim float32, steps skipped so far
  bool unscaled_ = false;
};

}  // namespace kestrel::train
