// The learning-rate, momentum and accumulation schedule of YOLOv5/YOLOv7 train.py: a linear or
// cosine one-cycle decay per epoch, and a warm-up that ramps every parameter group's learning rate,
// the momentum and the gradient accumulation over the first iterations.
//
// Parameter groups are in upstream's order: 0 biases (no decay, warm-up starts at warmup_bias_lr),
// 1 weights with decay, 2 normalisation weights (no decay).
#pragma once
#include <array>
#include <cstdint>

namespace kestrel::train {

struct ScheduleOptions {
  double lr0 = 0.01;              // hyp lr0
  double lrf = 0.01;              // hyp lrf: final lr = lr0 * lrf
  double momentum = 0.937;        // hyp momentum (SGD momentum / Adam beta1)
  double warmup_epochs = 3.0;     // hyp warmup_epochs
  double warmup_momentum = 0.8;   // hyp warmup_momentum
  double warmup_bias_lr = 0.1;    // hyp warmup_bias_lr
  // train.py's warm-up ramps a group's 'momentum', which only SGD's groups have: with Adam/AdamW (false
  // here) beta1 stays at `momentum` from the first iteration.
  bool ramp_momentum = true;
  bool cos_lr = false;            // --cos-lr (YOLOv7's default is cosine)
  // YOLOv7's train.py (its hyp files): --linear-lr's factor reaches lrf at epoch E - 1, not E (the last
  // epoch trains at lf(E - 2), see step_settings), and the optimiser steps when ni % accumulate == 0
  // (YOLOv5: ni - last_opt_step >= accumulate).
  bool yolov7 = false;
  int epochs = 100;
  int min_warmup_iterations = 100;  // YOLOv5: 100, YOLOv7: 1000
  int nominal_batch_size = 64;      // nbs
  int batch_size = 16;
};

// The per-epoch factor lf(epoch): linear (1 - e/E)(1 - lrf) + lrf (YOLOv5), (1 - e/(E-1))(1 - lrf) + lrf
// (YOLOv7's --linear-lr), or cosine ((1 - cos(pi e/E)) / 2)(lrf - 1) + 1 (both).
double lr_factor(const ScheduleOptions& o, int epoch);

// Warm-up length in iterations: max(round(warmup_epochs * batches_per_epoch), min_warmup_iterations).
int64_t warmup_iterations(const ScheduleOptions& o, int64_t batches_per_epoch);

// Optimiser steps every `accumulate` batches: round(nbs / batch_size), at least 1.
int accumulation_steps(const ScheduleOptions& o);

// Whether iteration ni (from the start of training) ends with an optimiser step; `accumulate` is the
// iteration's (it ramps up during the warm-up), last_opt_step the iteration of the previous step (-1).
bool optimizer_step_due(const ScheduleOptions& o, int64_t ni, int64_t last_opt_step, int accumulate);

// Weight decay scaled to the effective batch: weight_decay * batch_size * accumulate / nbs.
double scaled_weight_decay(const ScheduleOptions& o, double weight_decay);

struct StepSettings {
  std::array<double, 3> lr;  // per group: biases, decayed weights, norm weights
  double momentum;
  int accumulate;
};

// Settings for global iteration `iteration` (= batch index + batches_per_epoch * epoch) of `epoch`.
// Python's rounding (half to even) where upstream rounds. The warm-up ramps towards lr0 * lf(epoch); after
// it, an epoch trains at lr0 * lf(epoch - 1) (train.py steps its LambdaLR at each epoch's end), except the
// epoch in which the warm-up ends, which stays at lr0 * lf(epoch).
StepSettings step_settings(const ScheduleOptions& o, int epoch, int64_t iteration, int64_t batches_per_epoch);

}  // namespace kestrel::train
