#include "kestrel/train/step_bench.h"

#include <sys/resource.h>

#include <chrono>

#include <ATen/ATen.h>
#include <ATen/DeviceAccelerator.h>

#include "kestrel/core/device.h"
#include "kestrel/core/error.h"
#include "kestrel/models/model_config.h"
#include "kestrel/train/param_groups.h"
#include "kestrel/train/train_step.h"

namespace kestrel::train {
namespace {

double peak_memory_gb(const c10::Device& device) {
  if (device.is_cpu()) {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_maxrss) * 1024 / 1e9;  // ru_maxrss is in KiB on Linux
  }
  const auto stats = at::accelerator::getDeviceStats(device.index());
  return static_cast<double>(stats.reserved_bytes[0].peak) / 1e9;
}

std::string label_of(const StepBenchOptions& o) {
  std::string label = o.precision;
  if (o.channels_last) label += " + channels-last";
  if (o.ota) label += " + OTA";
  return label;
}

}  // namespace

StepBenchResult bench_train_step(const StepBenchOptions& o) {
  if (o.precision != "fp32" && o.precision != "fp16" && o.precision != "bf16")
    fail("--precision ", o.precision, ": expected fp32, fp16 or bf16");
  if (o.batch_size < 1 || o.steps < 1 || o.warmup < 0 || o.targets_per_image < 0)
    fail("bench train: batch size and steps must be >= 1, warm-up and targets >= 0");
  const c10::Device device = parse_device(o.device);
  torch::manual_seed(o.seed);
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path(o.cfg)));
  if (o.img_size % model->max_stride() != 0)
    fail("--img ", o.img_size, " must be a multiple of the model's stride ", model->max_stride());
  model->to(device);
  if (o.channels_last) to_channels_last(*model);
  model->train();
  auto average = models::build_model(models::load_model_config(models::resolve_model_config_path(o.cfg)));
  average->to(device);
  ModelEma ema(average, *model);

  const LossFn loss_fn = make_loss_fn(model->head(), loss::LossOptions{}, o.img_size, o.ota);
  OptimizerOptions opt_options;
  opt_options.kind = parse_optimizer_kind(o.optimizer);
  Optimizer optimizer(split_parameters(*model), opt_options);
  GradScalerOptions scaler_options;
  scaler_options.enabled = o.precision == "fp16";
  GradScaler scaler(scaler_options, device);
  StepOptions step_options;
  step_options.autocast = o.precision != "fp32";
  step_options.autocast_dtype = o.precision == "bf16" ? at::kBFloat16 : at::kHalf;
  step_options.channels_last = o.channels_last;
  TrainStep step(*model, loss_fn, optimizer, scaler, &ema, step_options);

  // Synthetic batch: images uniform in 0..1; boxes with centres anywhere and sides of 2-40 % of the image.
  at::Generator gen = at::detail::createCPUGenerator(o.seed);
  const int64_t b = o.batch_size, m = std::max(o.targets_per_image, 1);
  const at::Tensor images = at::rand({b, 3, o.img_size, o.img_size}, gen).to(device);
  const at::Tensor cls = at::randint(0, model->head().nc(), {b, m, 1}, gen, at::kFloat);
  const at::Tensor xy = at::rand({b, m, 2}, gen);
  const at::Tensor wh = at::rand({b, m, 2}, gen) * 0.38 + 0.02;
  const at::Tensor targets = at::cat({cls, xy, wh}, 2).to(device);
  const at::Tensor mask = at::full({b, m}, o.targets_per_image > 0, at::kBool).to(device);
  const StepSettings settings{{0.01, 0.01, 0.01}, 0.937, 1};

  StepBenchResult r;
  r.label = label_of(o);
  std::vector<at::Tensor> totals;
  using Clock = std::chrono::steady_clock;
  Clock::time_point start;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    if (i == o.warmup) {
      synchronize(device);
      start = Clock::now();
    }
    totals.push_back(step.forward_backward(images, targets, mask).total.detach());
    step.optimizer_step(settings);
  }
  synchronize(device);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.ms_per_step = seconds * 1000 / o.steps;
  r.images_per_second = static_cast<double>(b) * o.steps / seconds;
  r.peak_memory_gb = peak_memory_gb(device);
  for (const auto& t : totals) r.losses.push_back(t.item<double>());  // after timing: no sync inside the loop
  return r;
}

std::vector<StepBenchResult> bench_train_ablation(const StepBenchOptions& options) {
  const c10::Device device = parse_device(options.device);
  StepBenchOptions o = options;
  o.channels_last = false;
  o.precision = "fp32";
  std::vector<StepBenchResult> rows{bench_train_step(o)};
  o.precision = device.is_cuda() ? "fp16" : "bf16";  // CPU autocast has bf16 kernels, not fp16 ones
  rows.push_back(bench_train_step(o));
  o.channels_last = true;
  rows.push_back(bench_train_step(o));
  return rows;
}

}  // namespace kestrel::train
