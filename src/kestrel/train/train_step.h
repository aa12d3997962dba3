// One training step of YOLOv5/YOLOv7 train.py, shared by `kestrel train` and `kestrel bench train`:
// forward and loss under autocast, backward of the scaled loss, and (every `accumulate` batches) the
// optimiser step: unscale + clip, fused update that skips inf/NaN steps, loss-scale update, EMA.
// Nothing here reads a device value back to the host, except the foreach optimiser under a loss scaler
// (bench's PyTorch-eager baseline, `--foreach-optimizer`), which reads found_inf once per update as
// torch.optim does; `kestrel train` always takes the fused update.
#pragma once
#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "kestrel/loss/yolo_loss.h"
#include "kestrel/models/yolo_model.h"
#include "kestrel/train/ema.h"
#include "kestrel/train/grad_scaler.h"
#include "kestrel/train/optimizer.h"
#include "kestrel/train/schedule.h"

namespace kestrel::train {

// levels, targets [B, M, 5], mask [B, M] -> total (with grad) and items [3].
using LossFn = std::function<loss::YoloLoss::Result(const std::vector<at::Tensor>&, const at::Tensor&, const at::Tensor&)>;

// The training loss of a recipe: YOLOv7's OTA assignment when `ota` (hyp loss_ota: 1), its auxiliary variant for an
// IAuxDetect head (always), else YOLOv5's.
LossFn make_loss_fn(const models::Detect& head, const loss::LossOptions& options, int64_t img_size, bool ota);

// The autocast type of a precision name, as `--amp` (off, fp16, bf16) and `bench --precision` (fp32, fp16,
// bf16) spell them: none for off and fp32. Anything else is an error naming `flag`.
std::optional<at::ScalarType> autocast_type(const std::string& precision, const std::string& flag);

struct StepOptions {
  bool autocast = false;
  at::ScalarType autocast_dtype = at::kHalf;
  void set_precision(std::optional<at::ScalarType> type) {  // autocast_type's result
    autocast = type.has_value();
    autocast_dtype = type.value_or(at::kHalf);
  }
  double max_grad_norm = 10.0;  // <= 0: no clipping
  bool channels_last = false;   // images enter in channels-last memory
};

class TrainStep {
 public:
  TrainStep(models::YoloModel& model, LossFn loss, Optimizer& optimizer, GradScaler& scaler, ModelEma* ema,
            StepOptions options);

  // images [B, 3, H, W] float 0..1 on the model's device. Gradients accumulate until optimizer_step().
  loss::YoloLoss::Result forward_backward(const at::Tensor& images, const at::Tensor& targets, const at::Tensor& mask);
  // set_learning_rates(settings.lr), then apply_update(settings.momentum).
  void optimizer_step(const StepSettings& settings);
  // Writes the learning rates into the optimiser's device tensors (outside any captured graph).
  void set_learning_rates(const std::array<double, 3>& lr);
  // The device part of optimizer_step(), with the learning rates already set: unscale, clip, update,
  // scale update, zero gradients, EMA. This is what a CUDA graph captures.
  void apply_update(double momentum);

  // From now on gradients keep their memory: allocated (zero) now, accumulated into in place by
  // backward, zeroed in place after each update — so a captured graph always finds them where it left them.
  void keep_gradient_memory();
  // Gradients to zero between steps (an epoch's start): set to none, or zeroed in place once they keep
  // their memory (a captured graph writes into them; freeing them would leave it writing freed memory).
  void zero_grad();
  // The parameters the step trains (requires_grad).
  const std::vector<at::Tensor>& trainable() const { return trainable_; }

  const StepOptions& options() const { return options_; }

 private:
  models::YoloModel& model_;
  LossFn loss_;
  Optimizer& optimizer_;
  GradScaler& scaler_;
  ModelEma* ema_;
  StepOptions options_;
  bool keep_gradient_memory_ = false;
  std::vector<at::Tensor> trainable_;  // parameters with requires_grad
};

// Gradient clipping over the given parameters' gradients on the device (torch.nn.utils.clip_grad_norm_).
void clip_gradients(const std::vector<at::Tensor>& params, double max_norm);

// Parameters and buffers of 4-d tensors (convolution weights) in channels-last memory.
void to_channels_last(models::YoloModel& model);

}  // namespace kestrel::train
