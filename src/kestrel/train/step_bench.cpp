#include "kestrel/train/step_bench.h"

#include "kestrel/models/model_builder.h"

#include <sys/resource.h>

#include <chrono>
#include <iostream>
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

// Peaks since the last reset, in GB: reserved by the caching allocator (what the process holds) and
// allocated to tensors (torch.cuda.max_memory_allocated). CPU: the process's peak RSS for both.
struct MemoryPeaks {
  double reserved = 0, allocated = 0;
};

MemoryPeaks memory_peaks(const c10::Device& device) {
  if (device.is_cpu()) {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const double rss = static_cast<double>(usage.ru_maxrss) * 1024 / 1e9;  // ru_maxrss is in KiB on Linux
    return {rss, rss};
  }
  const auto stats = at::accelerator::getDeviceStats(device.index());
  return {static_cast<double>(stats.reserved_bytes[0].peak) / 1e9, static_cast<double>(stats.allocated_bytes[0].peak) / 1e9};
}

// Cached blocks back to the device and the peak restarted from what is in use now (a row's start).
void reset_peak_memory(const c10::Device& device) {
  if (!device.is_cuda()) return;
  at::accelerator::emptyCache();
  at::accelerator::resetPeakStats(device.index());
}

// The row's figures: the whole run's peaks (warm-up, autotuning and graph capture included: what the
// configuration needs to fit) and the timed steps' reserved peak.
void set_memory(StepBenchResult& r, const MemoryPeaks& before_timing, const c10::Device& device) {
  const MemoryPeaks timed = memory_peaks(device);
  r.peak_memory_gb = std::max(before_timing.reserved, timed.reserved);
  r.peak_allocated_gb = std::max(before_timing.allocated, timed.allocated);
  r.steady_memory_gb = timed.reserved;
}

std::string label_of(const StepBenchOptions& o) {
  std::string label = o.precision;
  if (o.channels_last) label += " + channels-last";
  if (o.fused_optimizer) label += " + fused optimiser";
  const OptimizerKind kind = parse_optimizer_kind(o.optimizer);
  if (kind != OptimizerKind::sgd) label += " (" + optimizer_name(kind) + ")";  // SGD, upstream's default, unnamed
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

  int captured_before_timing = 0;
  MemoryPeaks before_timing;  // the peaks of the run up to the timed steps

  // At the first timed step: the device idle, the graphs captured so far and the peaks so far noted, and
  // the peak counters restarted for the timed steps' own (no blocks freed: the steps keep their memory).
  std::chrono::steady_clock::time_point start_timing() {
    synchronize(device);
    captured_before_timing = graph ? graph->graphs_captured() : 0;
    before_timing = memory_peaks(device);
    if (device.is_cuda()) at::accelerator::resetPeakStats(device.index());
    return std::chrono::steady_clock::now();
  }

  void count_graphs(StepBenchResult& r) const {
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
  const std::optional<at::ScalarType> autocast = autocast_type(o.precision, "--precision");
  if (o.fused_bn_silu && !o.channels_last && parse_device(o.device).is_cuda())
    fail("--fused-bn-silu needs --channels-last on CUDA (its kernels take channels-last activations)");
  if (o.cuda_graph && !o.fused_optimizer)
    fail("--cuda-graph needs the fused optimiser: the foreach algorithm reads the loss scaler's flag on the host");
  auto b = std::make_unique<BenchStep>();
  b->device = parse_device(o.device);
  make_current(b->device);
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
    if (o.checkpoint_layers > body)  // the table's label says N layers: N must be what runs
      fail("--checkpoint ", o.checkpoint_layers, ": ", config.name(), " has ", body, " layers before its head (-1: all)");
    const int n = o.checkpoint_layers < 0 ? body : o.checkpoint_layers;
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
  step_options.set_precision(autocast);
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
  if (!o.ota && bench->model->head().aux()) r.label += " + OTA";  // an IAuxDetect model trains with it always
  std::vector<at::Tensor> totals;
  using Clock = std::chrono::steady_clock;
  Clock::time_point start;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    if (i == o.warmup) start = bench->start_timing();
    totals.push_back(bench->run(images, targets, mask, kBenchSettings));
  }
  synchronize(device);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  bench->count_graphs(r);
  r.ms_per_step = seconds * 1000 / o.steps;
  r.images_per_second = static_cast<double>(b) * o.steps / seconds;
  set_memory(r, bench->before_timing, device);
  for (const auto& t : totals) r.losses.push_back(t.item<double>());  // after timing: no sync inside the loop
  return r;
}

E2eBenchResult bench_e2e(const E2eBenchOptions& e) {
  const StepBenchOptions& o = e.step;
  if (o.batch_size < 1 || o.steps < 1 || e.warmup_epochs < 0 || e.workers < 1)
    fail("bench e2e: batch size, steps and workers must be >= 1, warm-up epochs >= 0");
  const data::DatasetConfig data_cfg = data::load_dataset_config(e.data);
  const Hyperparameters hyp = e.hyp.empty() ? default_hyperparameters() : load_hyperparameters(e.hyp);
  if (!e.hyp.empty()) print_hyperparameter_warnings(hyp, e.hyp, std::cerr);  // as training says them (stdout: --json)
  const int nc = static_cast<int>(data_cfg.names.size());
  // The loss training would use: OTA where the hyp file says so (YOLOv7's recipes), as training_run_setup.
  StepBenchOptions with_loss = o;
  with_loss.ota = o.ota || hyp.loss_ota;
  const auto bench = make_bench_step(with_loss, hyp.loss, nc);
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
  SplitLoader split = make_train_loader(data_cfg, t, hyp, stride, nc, device, /*rank=*/0, /*world_size=*/1, e.repeat);

  E2eBenchResult r;
  r.batches_per_epoch = static_cast<int64_t>(split.loader->num_batches());
  r.workers = split.loader->workers();
  r.batch_size = split.loader->batch_size();
  r.device = device.str();
  r.step.label = label_of(with_loss) + (!with_loss.ota && bench->model->head().aux() ? " + OTA" : "") + " + loader";
  using Clock = std::chrono::steady_clock;
  if (r.batches_per_epoch == 0) fail("bench e2e: ", e.data, ": the training split gives no batch of ", o.batch_size);
  int epoch = 0;
  // Warm-up epochs, whole: fill the cache, autotune.
  for (int w = 0; w < e.warmup_epochs; ++w) {
    split.loader->start_epoch(epoch++);
    data::DevicePrefetcher prefetcher(*split.loader, device, o.channels_last, /*trim_multiple=*/32);
    while (std::optional<data::DeviceBatch> batch = prefetcher.next())
      (void)bench->run(batch->images, batch->targets, batch->target_mask, kBenchSettings);
  }
  // Then one stream of batches, across epoch boundaries as training meets them: o.warmup untimed steps
  // (graph captures of the shapes seen), then o.steps timed ones, the clock started mid-stream.
  std::vector<at::Tensor> totals;  // the timed steps' losses, read after timing
  const int64_t total_steps = static_cast<int64_t>(o.warmup) + o.steps;
  int64_t step = 0, images = 0;
  double waited = 0;
  Clock::time_point start = Clock::now();
  while (step < total_steps) {
    split.loader->start_epoch(epoch++);
    data::DevicePrefetcher prefetcher(*split.loader, device, o.channels_last, /*trim_multiple=*/32);
    while (step < total_steps) {
      if (step == o.warmup) start = bench->start_timing();
      const bool timed = step >= o.warmup;
      const auto wait_start = Clock::now();
      std::optional<data::DeviceBatch> batch = prefetcher.next();
      if (timed) waited += std::chrono::duration<double>(Clock::now() - wait_start).count();
      if (!batch) break;
      const at::Tensor total = bench->run(batch->images, batch->targets, batch->target_mask, kBenchSettings);
      if (timed) {
        totals.push_back(total);
        images += batch->images.size(0);
      }
      ++step;
    }
  }
  synchronize(device);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  bench->count_graphs(r.step);
  r.step.ms_per_step = seconds * 1000 / o.steps;
  r.step.images_per_second = static_cast<double>(images) / seconds;
  set_memory(r.step, bench->before_timing, device);
  r.data_wait_fraction = waited / seconds;
  for (const auto& t : totals) r.step.losses.push_back(t.item<double>());
  return r;
}

std::vector<StepBenchResult> bench_train_ablation(const StepBenchOptions& options,
                                                  const std::function<void(const StepBenchResult&)>& on_row) {
  const c10::Device device = parse_device(options.device);
  // The rows set these themselves; given by the user they would change every row but say so in none.
  if (options.cuda_graph || options.fused_bn_silu || options.checkpoint_layers != 0 || options.channels_last ||
      !options.fused_optimizer || options.precision != "fp32")
    fail("--ablation sets precision, channels-last, the optimiser, CUDA graphs, fused BN-SiLU and checkpointing "
         "row by row: give none of them with it");
  StepBenchOptions o = options;
  o.channels_last = false;
  o.precision = "fp32";
  o.fused_optimizer = false;
  std::vector<StepBenchResult> rows;
  const auto add = [&](const StepBenchOptions& row) {
    try {
      rows.push_back(bench_train_step(row));
    } catch (const std::exception& e) {
      StepBenchResult failed;
      failed.label = label_of(row);
      failed.error = e.what();
      rows.push_back(failed);
    }
    if (on_row) on_row(rows.back());
  };
  add(o);
  o.precision = device.is_cuda() ? "fp16" : "bf16";  // CPU autocast has bf16 kernels, not fp16 ones
  add(o);
  o.channels_last = true;
  add(o);
  o.fused_optimizer = true;
  add(o);
  if (device.is_cuda()) {
    o.cuda_graph = true;
    add(o);
  }
  StepBenchOptions graphed = o;
  o.checkpoint_layers = -1;
  add(o);
  // Last, beside the graph row: the kernels' first runs cannot cost the rows above. (The CPU runs the
  // fused BN-SiLU as reference loops: no speed to show there.)
  if (device.is_cuda()) {
    graphed.fused_bn_silu = true;
    add(graphed);
  }
  return rows;
}

}  // namespace kestrel::train
