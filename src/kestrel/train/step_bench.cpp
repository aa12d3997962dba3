#include "kestrel/train/step_bench.h"

#include <sys/resource.h>

#include <chrono>
#include <limits>
#include <numeric>
#include <memory>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/DeviceAccelerator.h>

#include "kestrel/core/device.h"
#include "kestrel/core/error.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/data/device_prefetcher.h"
#include "kestrel/models/common.h"
#include "kestrel/models/model_config.h"
#include "kestrel/train/cuda_graph_step.h"
#include "kestrel/train/hyperparameters.h"
#include "kestrel/train/param_groups.h"
#include "kestrel/train/split_loader.h"
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

// Cached blocks back to the device and the peak restarted from what is in use now.
void reset_peak_memory(const c10::Device& device) {
  if (!device.is_cuda()) return;
  at::accelerator::emptyCache();
  at::accelerator::resetPeakStats(device.index());
}

std::string label_of(const StepBenchOptions& o) {
  std::string label = o.precision;
  if (o.channels_last) label += " + channels-last";
  if (o.fused_optimizer) label += " + fused optimiser";
  if (o.fused_bn_silu) label += " + fused BN-SiLU";
  if (o.cuda_graph) label += " + CUDA graph";
  if (o.checkpoint_layers != 0)
    label += o.checkpoint_layers < 0 ? std::string(" + checkpointing") : " + checkpointing " + std::to_string(o.checkpoint_layers) + " layers";
  if (o.ota) label += " + OTA";
  return label;
}

// The model, EMA, loss, optimiser, scaler and step of one benchmark configuration.
struct BenchStep {
  std::shared_ptr<models::YoloModel> model, average;
  std::unique_ptr<ModelEma> ema;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<GradScaler> scaler;
  std::unique_ptr<TrainStep> step;
  std::unique_ptr<CudaGraphStep> graph;  // with --cuda-graph
  c10::Device device{c10::kCPU};

  void count_graphs(StepBenchResult& r, int captured_before_timing) const {
    if (!graph) return;
    r.graphs_captured = graph->graphs_captured();
    r.graphs_captured_timed = r.graphs_captured - captured_before_timing;
    r.graph_replays = graph->replays();
  }

  // One batch with an optimiser step, through the graph when there is one.
  at::Tensor run(const at::Tensor& images, const at::Tensor& targets, const at::Tensor& mask, const StepSettings& s) {
    if (graph) return graph->run(images, targets, mask, s, /*update=*/true).total;
    const at::Tensor total = step->forward_backward(images, targets, mask).total.detach();
    step->optimizer_step(s);
    return total;
  }
};

std::unique_ptr<BenchStep> make_bench_step(const StepBenchOptions& o, const loss::LossOptions& loss_options, int nc) {
  if (o.precision != "fp32" && o.precision != "fp16" && o.precision != "bf16")
    fail("--precision ", o.precision, ": expected fp32, fp16 or bf16");
  if (o.cuda_graph && !o.fused_optimizer)
    fail("--cuda-graph needs the fused optimiser: the foreach algorithm reads the loss scaler's flag on the host");
  auto b = std::make_unique<BenchStep>();
  b->device = parse_device(o.device);
  if (b->device.is_cuda()) set_cudnn_benchmark(true);  // as the PyTorch reference figures (docs/benchmarks.md)
  reset_peak_memory(b->device);  // each configuration's peak from its own start (earlier rows' blocks returned)
  torch::manual_seed(o.seed);
  const auto config = models::load_model_config(models::resolve_model_config_path(o.cfg));
  b->model = models::build_model(config, nc);
  if (o.img_size % b->model->max_stride() != 0)
    fail("--img ", o.img_size, " must be a multiple of the model's stride ", b->model->max_stride());
  b->model->to(b->device);
  if (o.channels_last) to_channels_last(*b->model);
  if (o.fused_bn_silu) models::set_fused_batch_norm_silu(*b->model, true);
  if (o.checkpoint_layers != 0) {
    const int body = static_cast<int>(config.layers.size()) - 1;  // the last layer is the head
    const int n = o.checkpoint_layers < 0 ? body : std::min(o.checkpoint_layers, body);
    std::vector<int> layers(static_cast<size_t>(n));
    std::iota(layers.begin(), layers.end(), 0);
    b->model->set_checkpointed_layers(layers);
  }
  b->model->train();
  b->average = models::build_model(config, nc);
  b->average->to(b->device);
  if (o.channels_last) to_channels_last(*b->average);  // one layout for the EMA's multi-tensor update
  b->ema = std::make_unique<ModelEma>(b->average, *b->model);
  OptimizerOptions opt_options;
  opt_options.kind = parse_optimizer_kind(o.optimizer);
  opt_options.fused = o.fused_optimizer;
  b->optimizer = std::make_unique<Optimizer>(split_parameters(*b->model), opt_options);
  GradScalerOptions scaler_options;
  scaler_options.enabled = o.precision == "fp16";
  b->scaler = std::make_unique<GradScaler>(scaler_options, b->device);
  StepOptions step_options;
  step_options.autocast = o.precision != "fp32";
  step_options.autocast_dtype = o.precision == "bf16" ? at::kBFloat16 : at::kHalf;
  step_options.channels_last = o.channels_last;
  const LossFn loss_fn = make_loss_fn(b->model->head(), loss_options, o.img_size, o.ota);
  b->step = std::make_unique<TrainStep>(*b->model, loss_fn, *b->optimizer, *b->scaler, b->ema.get(), step_options);
  if (o.cuda_graph) b->graph = std::make_unique<CudaGraphStep>(*b->step, b->device);
  return b;
}

const StepSettings kBenchSettings{{0.01, 0.01, 0.01}, 0.937, 1};

}  // namespace

StepBenchResult bench_train_step(const StepBenchOptions& o) {
  if (o.batch_size < 1 || o.steps < 1 || o.warmup < 0 || o.targets_per_image < 0)
    fail("bench train: batch size and steps must be >= 1, warm-up and targets >= 0");
  const auto bench = make_bench_step(o, loss::LossOptions{}, /*nc: the config's*/ 0);
  const c10::Device device = bench->device;

  // Synthetic batch: images uniform in 0..1; boxes with centres anywhere and sides of 2-40 % of the image.
  at::Generator gen = at::detail::createCPUGenerator(o.seed);
  const int64_t b = o.batch_size, m = std::max(o.targets_per_image, 1);
  const at::Tensor images = at::rand({b, 3, o.img_size, o.img_size}, gen).to(device);
  const at::Tensor cls = at::randint(0, bench->model->head().nc(), {b, m, 1}, gen, at::kFloat);
  const at::Tensor xy = at::rand({b, m, 2}, gen);
  const at::Tensor wh = at::rand({b, m, 2}, gen) * 0.38 + 0.02;
  const at::Tensor targets = at::cat({cls, xy, wh}, 2).to(device);
  const at::Tensor mask = at::full({b, m}, o.targets_per_image > 0, at::kBool).to(device);

  StepBenchResult r;
  r.label = label_of(o);
  std::vector<at::Tensor> totals;
  using Clock = std::chrono::steady_clock;
  Clock::time_point start;
  int captured_before_timing = 0;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    if (i == o.warmup) {
      synchronize(device);
      captured_before_timing = bench->graph ? bench->graph->graphs_captured() : 0;
      // The graphs' private pool holds the step's memory now: the warm-up's eager blocks would be
      // counted twice in the peak. Release them and measure the replays' own peak.
      if (bench->graph) reset_peak_memory(device);
      start = Clock::now();
    }
    totals.push_back(bench->run(images, targets, mask, kBenchSettings));
  }
  synchronize(device);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  bench->count_graphs(r, captured_before_timing);
  r.ms_per_step = seconds * 1000 / o.steps;
  r.images_per_second = static_cast<double>(b) * o.steps / seconds;
  r.peak_memory_gb = peak_memory_gb(device);
  for (const auto& t : totals) r.losses.push_back(t.item<double>());  // after timing: no sync inside the loop
  return r;
}

E2eBenchResult bench_e2e(const E2eBenchOptions& e) {
  const StepBenchOptions& o = e.step;
  if (o.batch_size < 1 || o.steps < 1 || e.warmup_epochs < 0 || e.workers < 1)
    fail("bench e2e: batch size, steps and workers must be >= 1, warm-up epochs >= 0");
  const data::DatasetConfig data_cfg = data::load_dataset_config(e.data);
  const Hyperparameters hyp = e.hyp.empty() ? default_hyperparameters() : load_hyperparameters(e.hyp);
  const int nc = static_cast<int>(data_cfg.names.size());
  const auto bench = make_bench_step(o, hyp.loss, nc);
  const c10::Device device = bench->device;
  TrainOptions t;  // the trainer's loader for these settings
  t.img_size = o.img_size;
  t.batch_size = o.batch_size;
  t.workers = e.workers;
  t.cache = e.cache;
  t.seed = o.seed;
  t.device = device.str();
  const int stride = static_cast<int>(std::max<int64_t>(bench->model->max_stride(), 32));
  if (e.repeat < 1) fail("bench e2e: --repeat must be >= 1");
  SplitLoader split = make_train_loader(data_cfg, t, hyp, stride, nc, /*rank=*/0, /*world_size=*/1, e.repeat);

  E2eBenchResult r;
  r.batches_per_epoch = static_cast<int64_t>(split.loader->num_batches());
  r.step.label = label_of(o) + " + loader";
  using Clock = std::chrono::steady_clock;
  int epoch = 0;
  std::vector<at::Tensor> totals;  // the timed steps' losses, read after timing
  const auto run = [&](int epochs, int64_t max_steps, double* waited) {
    int64_t steps = 0, images = 0;
    for (int e_run = 0; steps < max_steps && e_run < epochs; ++e_run) {
      split.loader->start_epoch(epoch++);
      data::DevicePrefetcher prefetcher(*split.loader, device, o.channels_last, /*trim_multiple=*/32);
      while (steps < max_steps) {
        const auto wait_start = Clock::now();
        std::optional<data::DeviceBatch> batch = prefetcher.next();
        if (waited) *waited += std::chrono::duration<double>(Clock::now() - wait_start).count();
        if (!batch) break;
        const at::Tensor total = bench->run(batch->images, batch->targets, batch->target_mask, kBenchSettings);
        if (waited) totals.push_back(total);
        ++steps;
        images += batch->images.size(0);
      }
    }
    return images;
  };
  // Warm-up: fills the cache, autotunes, captures the graphs of the shapes seen (epochs, then steps).
  run(e.warmup_epochs, std::numeric_limits<int64_t>::max(), nullptr);
  run(std::numeric_limits<int>::max(), o.warmup, nullptr);
  synchronize(device);
  const int captured_before_timing = bench->graph ? bench->graph->graphs_captured() : 0;
  double waited = 0;
  const auto start = Clock::now();
  const int64_t images = run(std::numeric_limits<int>::max(), o.steps, &waited);
  synchronize(device);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  bench->count_graphs(r.step, captured_before_timing);
  r.step.ms_per_step = seconds * 1000 / o.steps;
  r.step.images_per_second = static_cast<double>(images) / seconds;
  r.step.peak_memory_gb = peak_memory_gb(device);
  r.data_wait_fraction = waited / seconds;
  for (const auto& t : totals) r.step.losses.push_back(t.item<double>());
  return r;
}

std::vector<StepBenchResult> bench_train_ablation(const StepBenchOptions& options,
                                                  const std::function<void(const StepBenchResult&)>& on_row) {
  const c10::Device device = parse_device(options.device);
  StepBenchOptions o = options;
  o.channels_last = false;
  o.precision = "fp32";
  o.fused_optimizer = false;
  std::vector<StepBenchResult> rows;
  const auto add = [&](const StepBenchOptions& row) {
    rows.push_back(bench_train_step(row));
    if (on_row) on_row(rows.back());
  };
  add(o);
  o.precision = device.is_cuda() ? "fp16" : "bf16";  // CPU autocast has bf16 kernels, not fp16 ones
  add(o);
  o.channels_last = true;
  add(o);
  o.fused_optimizer = true;
  add(o);
  if (device.is_cuda()) {  // the CPU runs the fused BN-SiLU as reference loops: no speed to show there
    o.fused_bn_silu = true;
    add(o);
    o.cuda_graph = true;
    add(o);
  }
  o.checkpoint_layers = -1;
  add(o);
  return rows;
}

}  // namespace kestrel::train
