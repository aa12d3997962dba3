#include "kestrel/train/schedule.h"

#include <algorithm>
#include <cmath>

#include "kestrel/core/error.h"

namespace kestrel::train {
namespace {

constexpr double kPi = 3.14159265358979323846;

// numpy.interp for two points, clamped at both ends. With x0 == x1 (no warm-up) numpy gives y1 at x0.
// Evaluated in numpy's order (slope first): the warm-up's accumulate rounds half to even, so a last bit
// decides at .5 (batch 16, 1494 warm-up iterations, ni 1245: numpy 3.4999999999999996 -> 3, where
// y0 + (x - x0) / (x1 - x0) * (y1 - y0) gives 3.5 -> 4).
double interp(double x, double x0, double x1, double y0, double y1) {
  if (x >= x1) return y1;
  if (x <= x0) return y0;
  const double slope = (y1 - y0) / (x1 - x0);
  return slope * (x - x0) + y0;
}

int round_half_even(double x) { return static_cast<int>(std::nearbyint(x)); }

}  // namespace

double lr_factor(const ScheduleOptions& o, int epoch) {
  if (o.epochs < 1) fail("--epochs must be >= 1");
  const double x = static_cast<double>(epoch);
  if (o.cos_lr) return ((1 - std::cos(x * kPi / o.epochs)) / 2) * (o.lrf - 1) + 1;
  if (o.yolov7) return o.epochs > 1 ? (1 - x / (o.epochs - 1)) * (1 - o.lrf) + o.lrf : 1.0;
  return (1 - x / o.epochs) * (1 - o.lrf) + o.lrf;
}

bool optimizer_step_due(const ScheduleOptions& o, int64_t ni, int64_t last_opt_step, int accumulate) {
  return o.yolov7 ? ni % accumulate == 0 : ni - last_opt_step >= accumulate;
}

int64_t warmup_iterations(const ScheduleOptions& o, int64_t batches_per_epoch) {
  const auto warm = static_cast<int64_t>(std::nearbyint(o.warmup_epochs * static_cast<double>(batches_per_epoch)));
  return std::max<int64_t>(warm, o.min_warmup_iterations);
}

int accumulation_steps(const ScheduleOptions& o) {
  if (o.batch_size < 1) fail("--batch-size must be >= 1");
  return std::max(round_half_even(static_cast<double>(o.nominal_batch_size) / o.batch_size), 1);
}

double scaled_weight_decay(const ScheduleOptions& o, double weight_decay) {
  // train.py's `weight_decay *= batch_size * accumulate / nbs`: the factor first, to the last bit.
  return weight_decay * (static_cast<double>(o.batch_size * accumulation_steps(o)) / o.nominal_batch_size);
}

StepSettings step_settings(const ScheduleOptions& o, int epoch, int64_t iteration, int64_t batches_per_epoch) {
  // train.py's LambdaLR is stepped at the end of each epoch (after epoch e: lr0 * lf(e)), so after the warm-up
  // an epoch trains at the previous epoch's factor; only the epoch in which the warm-up ends keeps lf(epoch),
  // the value its last warm-up iteration wrote. (Upstream's results.csv shows it: x/lr repeats at that epoch.)
  const int64_t warmup = warmup_iterations(o, batches_per_epoch);
  const bool warmup_in_epoch = static_cast<int64_t>(epoch) * batches_per_epoch <= warmup;
  const double target_lr = o.lr0 * lr_factor(o, warmup_in_epoch ? epoch : epoch - 1);
  StepSettings s{{target_lr, target_lr, target_lr}, o.momentum, accumulation_steps(o)};
  if (iteration > warmup) return s;
  const double x = static_cast<double>(iteration), end = static_cast<double>(warmup);
  s.accumulate = std::max(1, round_half_even(interp(x, 0, end, 1, static_cast<double>(o.nominal_batch_size) / o.batch_size)));
  for (size_t group = 0; group < s.lr.size(); ++group)
    s.lr[group] = interp(x, 0, end, group == 0 ? o.warmup_bias_lr : 0.0, target_lr);
  if (o.ramp_momentum) s.momentum = interp(x, 0, end, o.warmup_momentum, o.momentum);
  return s;
}

}  // namespace kestrel::train
