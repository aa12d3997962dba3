#include "kestrel/train/train_step.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "kestrel/core/device.h"
#include "kestrel/core/error.h"
#include "kestrel/loss/ota_loss.h"

namespace kestrel::train {

LossFn make_loss_fn(const models::Detect& head, const loss::LossOptions& options, int64_t img_size, bool ota) {
  // Shared ownership: the returned function outlives this call. An IAuxDetect head always trains with
  // ComputeLossAuxOTA (OtaLoss on an aux head), as upstream's train_aux.py, whatever loss_ota says.
  if (ota || head.aux()) {
    const auto loss = std::make_shared<const loss::OtaLoss>(head, options, img_size);
    return [loss](const std::vector<at::Tensor>& l, const at::Tensor& t, const at::Tensor& m) { return (*loss)(l, t, m); };
  }
  const auto loss = std::make_shared<const loss::YoloLoss>(head, options, img_size);
  return [loss](const std::vector<at::Tensor>& l, const at::Tensor& t, const at::Tensor& m) { return (*loss)(l, t, m); };
}

std::optional<at::ScalarType> autocast_type(const std::string& precision, const std::string& flag) {
  if (precision == "off" || precision == "fp32") return std::nullopt;
  if (precision == "fp16") return at::kHalf;
  if (precision == "bf16") return at::kBFloat16;
  fail(flag, " ", precision, ": expected fp16, bf16, or off (fp32)");
}

TrainStep::TrainStep(models::YoloModel& model, LossFn loss, Optimizer& optimizer, GradScaler& scaler, ModelEma* ema,
                     StepOptions options)
    : model_(model), loss_(std::move(loss)), optimizer_(optimizer), scaler_(scaler), ema_(ema), options_(options) {
  for (const auto& p : model_.parameters())
    if (p.requires_grad()) trainable_.push_back(p);
}

loss::YoloLoss::Result TrainStep::forward_backward(const at::Tensor& images, const at::Tensor& targets,
                                                   const at::Tensor& mask) {
  const at::Tensor input = options_.channels_last ? images.contiguous(at::MemoryFormat::ChannelsLast) : images;
  loss::YoloLoss::Result result;
  {
    // Forward and loss under autocast (the loss computes in float32 itself); backward outside it.
    AutocastGuard autocast(input.device().type(), options_.autocast_dtype, options_.autocast);
    result = loss_(model_.forward(input), targets, mask);
  }
  scaler_.scale(result.total).backward();
  return result;
}

void TrainStep::optimizer_step(const StepSettings& s) {
  set_learning_rates(s.lr);
  apply_update(s.momentum);
}

void TrainStep::set_learning_rates(const std::array<double, 3>& lr) { optimizer_.set_learning_rates(lr); }

void TrainStep::keep_gradient_memory() {
  torch::NoGradGuard no_grad;
  keep_gradient_memory_ = true;
  for (auto& p : trainable_)
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p, at::MemoryFormat::Preserve);
}

void TrainStep::zero_grad() { optimizer_.zero_grad(/*set_to_none=*/!keep_gradient_memory_); }

void TrainStep::apply_update(double momentum) {
  scaler_.begin_step();
  std::vector<at::Tensor> grads;
  for (const auto& p : trainable_) grads.push_back(p.grad());
  if (options_.max_grad_norm > 0) {
    scaler_.unscale(grads);  // clipping needs true gradients
    clip_gradients(trainable_, options_.max_grad_norm);
  } else {
    scaler_.check(grads);  // the fused kernel unscales
  }
  optimizer_.step(momentum, scaler_.grad_scale(), scaler_.found_inf());
  scaler_.update();
  zero_grad();
  if (ema_) ema_->update();
}

void clip_gradients(const std::vector<at::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return;
  const std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2);
  const at::Tensor total = at::stack(norms).norm();
  const at::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
  at::_foreach_mul_(grads, coef);
}

void to_channels_last(models::YoloModel& model) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters())
    if (p.dim() == 4) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
}

}  // namespace kestrel::train
