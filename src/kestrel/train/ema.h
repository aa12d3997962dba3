// Exponential moving average of the model's weights (YOLOv5/YOLOv7 ModelEMA): after every optimiser
// step, each floating-point parameter and buffer v_ema = d v_ema + (1 - d) v with
// d = decay (1 - exp(-updates / tau)), so early averages follow the model closely. Validation and the
// saved weights use the average. The update count lives on the device and d is computed there, so an
// update has no host input and can be captured in a CUDA graph with the rest of the step.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kestrel/models/yolo_model.h"

namespace kestrel::train {

struct EmaOptions {
  double decay = 0.9999;
  double tau = 2000;
};

class ModelEma {
 public:
  // `average` is a second model of the same architecture (it is overwritten with `model`'s state and put
  // in eval mode); `model` is the one being trained. updates: the count to continue from (resume).
  ModelEma(std::shared_ptr<models::YoloModel> average, const models::YoloModel& model, EmaOptions options = {},
           int64_t updates = 0);

  // One averaging step, on the device, no host synchronisation.
  void update();
  double decay_at(int64_t updates) const;

  models::YoloModel& model() { return *average_; }
  int64_t updates() const;  // reads the device counter: for checkpoints, not inside the step

 private:
  std::shared_ptr<models::YoloModel> average_;
  EmaOptions options_;
  at::Tensor updates_;  // 0-dim float64 on the models' device
  std::vector<at::Tensor> average_floats_, model_floats_;  // aligned: floating-point state of both models
};

}  // namespace kestrel::train
