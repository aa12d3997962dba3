// kestrel bench data | train | e2e: loader throughput with the training augmentations, the training
// step alone on synthetic data, and the whole pipeline on a real dataset.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "kestrel/core/error.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/data/image_files.h"
#include "kestrel/data/loader.h"
#include "kestrel/train/hyperparameters.h"
#include "kestrel/train/step_bench.h"

namespace kestrel::app {
namespace {

struct BenchDataOptions {
  std::string data, hyp, cache;
  int img = 640, batch = 64, workers = 8, epochs = 3, repeat = 1;
  bool json = false, bind = false;
};

// While alive, what goes to stdout goes to stderr: with --json, stdout holds the JSON alone (dataset reports,
// cache notes and warnings printed on the way go to stderr).
class StdoutToStderr {
 public:
  explicit StdoutToStderr(bool active) : saved_(active ? std::cout.rdbuf(std::cerr.rdbuf()) : nullptr) {}
  ~StdoutToStderr() {
    if (saved_) std::cout.rdbuf(saved_);
  }
  StdoutToStderr(const StdoutToStderr&) = delete;
  StdoutToStderr& operator=(const StdoutToStderr&) = delete;

 private:
  std::streambuf* saved_;
};

void run_bench_data(const BenchDataOptions& o) {
  const data::DatasetConfig cfg = data::load_dataset_config(o.data);
  auto index = data::index_split(data::list_images(cfg.train, cfg.source), data::IndexOptions{cfg.nc, o.workers, true});
  if (!index.skipped.empty()) (o.json ? std::cerr : std::cout) << data::describe(index, "train", 20);  // stdout: the JSON
  data::require_usable(index, cfg.source, "train", cfg.train);
  // --repeat N: the split N times over (as upstream's benchmark replicates coco128 16x), without copying files.
  const auto records = index.records;
  for (int r = 1; r < o.repeat; ++r) index.records.insert(index.records.end(), records.begin(), records.end());
  data::DatasetOptions d;
  d.img_size = o.img;
  d.cache_ram = o.cache == "ram";  // checked by the command line: ram, disk or none
  d.cache_disk = o.cache == "disk";
  bool v7_hyp = false;  // a YOLOv7 hyp file brings YOLOv7's augmentations (mosaic-9, its zoom range), as in training
  if (!o.hyp.empty()) d.hyp = train::load_augmentations(o.hyp, std::cerr, &v7_hyp);  // warnings: stdout is --json's
  d.dialect = v7_hyp ? data::Dialect::yolov7 : data::Dialect::yolov5;
  auto dataset = std::make_shared<const data::YoloDataset>(std::move(index), d);
  data::LoaderOptions l;
  l.batch_size = o.batch;
  l.workers = o.workers;
  l.drop_last = true;
  if (o.bind) {  // the cores this process may use (a container's or taskset's set), not 0 .. N-1
    l.cpu_cores = data::allowed_cpu_cores();
    if (l.cpu_cores.empty()) fail("bench data --bind: the allowed CPU cores could not be read (sched_getaffinity)");
  }
  data::DataLoader loader(dataset, l);
  if (loader.num_batches() == 0)  // drop_last: whole batches only
    fail("bench data: ", o.data, ": ", dataset->size(), " images make no whole batch of ", o.batch,
         " (use a smaller --batch-size or --repeat N)");
  nlohmann::json result = {{"what", "loader"}, {"augment", v7_hyp ? "yolov7" : "yolov5"}, {"img", o.img}, {"batch", o.batch}, {"workers", o.workers},
                           {"prefetch", loader.prefetch()}, {"cache", o.cache.empty() ? "none" : o.cache},
                           {"images_per_epoch", loader.num_batches() * o.batch}};
  if (!o.json)
    std::printf("loader: %d workers, up to %d batches of %d built ahead, %lld images an epoch, %s augmentations\n", o.workers,
                loader.prefetch(), o.batch, static_cast<long long>(loader.num_batches() * o.batch), v7_hyp ? "YOLOv7's" : "YOLOv5's");
  std::vector<double> rates;
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    loader.start_epoch(epoch);
    int64_t images = 0;
    while (auto batch = loader.next()) images += batch->images.size(0);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(images / seconds);
    if (!o.json) std::printf("epoch %d: %lld images in %.2f s = %.1f images/s\n", epoch, static_cast<long long>(images), seconds, rates.back());
  }
  result["images_per_second"] = rates;
  if (o.json) std::cout << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

// "; 3 CUDA graphs captured (1 during the timed steps), 40 replays" when graphs were used.
std::string graph_note(const train::StepBenchResult& r) {
  if (r.graphs_captured == 0 && r.graph_replays == 0) return "";
  return cat("; ", r.graphs_captured, " CUDA graphs captured (", r.graphs_captured_timed, " during the timed steps), ",
             r.graph_replays, " replays");
}

nlohmann::json step_json(const train::StepBenchResult& r, const train::StepBenchOptions& o) {
  return {{"what", "train_step"}, {"cfg", o.cfg}, {"batch", o.batch_size}, {"img", o.img_size}, {"config", r.label},
          {"images_per_second", r.images_per_second}, {"ms_per_step", r.ms_per_step}, {"peak_memory_gb", r.peak_memory_gb},
          {"peak_allocated_gb", r.peak_allocated_gb}, {"steady_memory_gb", r.steady_memory_gb}, {"steps", o.steps},
          {"warmup", o.warmup}, {"targets_per_image", o.targets_per_image},
          {"graphs_captured", r.graphs_captured}, {"graphs_captured_timed", r.graphs_captured_timed},
          {"graph_replays", r.graph_replays}, {"error", r.error}};
}

// The table's rows as they are measured (flushed: a later row's failure or a timeout keeps them).
class StepTable {
 public:
  StepTable(const train::StepBenchOptions& o, bool json) : o_(o), json_(json) {}
  void add(const train::StepBenchResult& r) {
    if (!json_ && rows_ == 0) {  // the header with the first row: an option error comes alone
      std::printf("%s training step, batch %d, %d px, %d timed steps after %d warm-up\n", o_.cfg.c_str(), o_.batch_size,
                  o_.img_size, o_.steps, o_.warmup);
      std::printf("%-66s %12s %10s %9s %12s %12s\n", "configuration", "images/s", "ms/step", "speed-up", "reserved GB",
                  "allocated GB");
    }
    add_row(r);
  }

 private:
  void add_row(const train::StepBenchResult& r) {
    // The first row is the baseline; when it failed, no row gets a speed-up (the next is no baseline).
    if (rows_++ == 0) baseline_ = r.error.empty() ? r.images_per_second : 0;
    if (json_) {
      std::cout << step_json(r, o_).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
      return;
    }
    if (!r.error.empty()) {
      std::printf("%-66s failed: %s\n", r.label.c_str(), r.error.c_str());
      std::fflush(stdout);
      return;
    }
    char speed_up[32] = "n/a";
    if (baseline_ > 0) std::snprintf(speed_up, sizeof speed_up, "%.2fx", r.images_per_second / baseline_);
    std::printf("%-66s %12.1f %10.1f %9s %12.2f %12.2f%s\n", r.label.c_str(), r.images_per_second, r.ms_per_step,
                speed_up, r.peak_memory_gb, r.peak_allocated_gb, graph_note(r).c_str());
    std::fflush(stdout);
  }

  train::StepBenchOptions o_;
  bool json_;
  int rows_ = 0;
  double baseline_ = 0;
};

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "measure speed");
  bench->require_subcommand(1);
  auto o = std::make_shared<BenchDataOptions>();
  auto* cmd = bench->add_subcommand("data", "loader throughput with the training augmentations (images/s per epoch)");
  cmd->add_option("--data", o->data, "dataset YAML")->required();
  cmd->add_option("--hyp", o->hyp, "hyperparameter YAML (augmentation keys)");
  cmd->add_option("--img,--img-size,--imgsz", o->img, "image size")->capture_default_str()->check(CLI::Range(32, 8192));
  cmd->add_option("--batch-size", o->batch, "batch size")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--workers", o->workers, "loader threads")->capture_default_str()->check(CLI::Range(1, 1024));
  cmd->add_option("--epochs", o->epochs, "epochs to time (the first fills a RAM cache)")->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("--repeat", o->repeat, "use the split N times per epoch")->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_option("--cache", o->cache, "cache resized images: ram, disk (.npy next to each image) or none")
      ->check(CLI::IsMember({"ram", "disk", "none"}));
  cmd->add_flag("--bind", o->bind, "bind worker i to the i-th allowed CPU core");
  cmd->add_flag("--json", o->json, "print one JSON object");
  cmd->callback([o] { run_bench_data(*o); });

  auto t = std::make_shared<train::StepBenchOptions>();
  auto tjson = std::make_shared<bool>(false), ablation = std::make_shared<bool>(false);
  auto* step = bench->add_subcommand("train", "the training step alone on synthetic data (images/s, ms/step, peak memory)");
  step->add_option("--cfg", t->cfg, "model YAML or shipped name")->capture_default_str();
  step->add_option("--batch-size", t->batch_size, "batch size")->capture_default_str()->check(CLI::Range(1, 65536));
  step->add_option("--img,--img-size,--imgsz", t->img_size, "image size")->capture_default_str()->check(CLI::Range(32, 8192));
  step->add_option("--device", t->device, "cuda device (0, cuda:0) or cpu");
  step->add_option("--precision", t->precision, "fp32, fp16 (loss scaling) or bf16")->capture_default_str()
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  step->add_flag("--channels-last", t->channels_last, "channels-last weights and activations");
  step->add_flag("--cuda-graph", t->cuda_graph, "capture the step as a CUDA graph and replay it (CUDA only)");
  step->add_option("--optimizer", t->optimizer, "SGD, Adam or AdamW")->capture_default_str();
  step->add_flag_callback("--foreach-optimizer", [t] { t->fused_optimizer = false; },
                          "torch.optim's multi-tensor update (PyTorch's default) instead of the fused kernels");
  step->add_flag("--fused-bn-silu", t->fused_bn_silu, "batch norm + SiLU as one CUDA operation in the Conv blocks");
  step->add_flag("--ota", t->ota, "YOLOv7's OTA loss");
  step->add_option("--targets", t->targets_per_image, "boxes per image")->capture_default_str()->check(CLI::Range(0, 10000));
  step->add_option("--warmup", t->warmup, "untimed steps")->capture_default_str()->check(CLI::Range(0, 10000));
  step->add_option("--steps", t->steps, "timed steps")->capture_default_str()->check(CLI::Range(1, 100000));
  step->add_option("--checkpoint", t->checkpoint_layers, "activation checkpointing of the first N layers (-1: all)")
      ->capture_default_str()->check(CLI::Range(-1, 1 << 20));
  step->add_flag("--ablation", *ablation,
                 "table: fp32 (foreach optimiser), + mixed precision, + channels-last, + fused optimiser, + CUDA graph (CUDA), + checkpointing, "
                 "and (CUDA) the graph row + fused BN-SiLU");
  step->add_flag("--json", *tjson, "machine-readable output");
  step->callback([t, tjson, ablation] {
    StepTable table(*t, *tjson);  // one JSON line per row with --json
    if (*ablation) {
      const auto rows = train::bench_train_ablation(*t, [&](const train::StepBenchResult& r) { table.add(r); });
      // Rows that fail stay in the table (a GPU-only row on the CPU); none measured is a failed command.
      if (std::all_of(rows.begin(), rows.end(), [](const train::StepBenchResult& r) { return !r.error.empty(); }))
        fail("bench train --ablation: no configuration could be measured (the first failure: ",
             rows.empty() ? std::string("no rows") : rows.front().error, ")");
    } else {
      table.add(train::bench_train_step(*t));
    }
  });

  auto e = std::make_shared<train::E2eBenchOptions>();
  e->step.steps = 30;
  auto ejson = std::make_shared<bool>(false);
  auto* e2e = bench->add_subcommand("e2e", "the whole training pipeline on a real dataset: loader, copy, step (images/s)");
  e2e->add_option("--data", e->data, "dataset YAML (its train split)")->required();
  e2e->add_option("--hyp", e->hyp, "hyperparameter YAML (augmentations and loss)");
  e2e->add_option("--cfg", e->step.cfg, "model YAML or shipped name")->capture_default_str();
  e2e->add_option("--batch-size", e->step.batch_size, "batch size")->capture_default_str()->check(CLI::Range(1, 65536));
  e2e->add_option("--img,--img-size,--imgsz", e->step.img_size, "image size")->capture_default_str()->check(CLI::Range(32, 8192));
  e2e->add_option("--device", e->step.device, "cuda device (0, cuda:0) or cpu");
  e2e->add_option("--precision", e->step.precision, "fp32, fp16 (loss scaling) or bf16")->capture_default_str()
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  e2e->add_flag("--channels-last", e->step.channels_last, "channels-last weights and activations");
  e2e->add_flag("--cuda-graph", e->step.cuda_graph, "capture the step as a CUDA graph and replay it (CUDA only)");
  e2e->add_option("--optimizer", e->step.optimizer, "SGD, Adam or AdamW")->capture_default_str();
  e2e->add_flag_callback("--foreach-optimizer", [e] { e->step.fused_optimizer = false; },
                         "torch.optim's multi-tensor update (PyTorch's default) instead of the fused kernels");
  e2e->add_flag("--fused-bn-silu", e->step.fused_bn_silu, "batch norm + SiLU as one CUDA operation in the Conv blocks");
  e2e->add_option("--workers", e->workers, "loader threads")->capture_default_str()->check(CLI::Range(1, 1024));
  e2e->add_option("--cache", e->cache, "cache resized images: ram, disk, or none")->capture_default_str()
      ->check(CLI::IsMember({"ram", "disk", "none"}));
  e2e->add_option("--warmup-epochs", e->warmup_epochs, "untimed epochs (fill the cache)")->capture_default_str()
      ->check(CLI::Range(0, 1000));
  e2e->add_option("--steps", e->step.steps, "timed steps")->capture_default_str()->check(CLI::Range(1, 100000));
  e2e->add_option("--warmup", e->step.warmup, "untimed steps after the warm-up epochs (graph capture)")->capture_default_str()
      ->check(CLI::Range(0, 10000));
  e2e->add_option("--repeat", e->repeat, "use the split N times per epoch")->capture_default_str()->check(CLI::Range(1, 100000));
  e2e->add_flag("--json", *ejson, "machine-readable output");
  e2e->callback([e, ejson] {
    train::E2eBenchOptions o = *e;
    if (o.cache == "none") o.cache.clear();
    const train::E2eBenchResult r = [&] {
      const StdoutToStderr quiet(*ejson);
      return train::bench_e2e(o);
    }();
    if (*ejson) {
      std::cout << nlohmann::json{{"what", "e2e"}, {"cfg", o.step.cfg}, {"data", o.data}, {"batch", r.batch_size},
                                  {"img", o.step.img_size}, {"workers", r.workers}, {"device", r.device},
                                  {"cache", o.cache.empty() ? "none" : o.cache}, {"repeat", o.repeat},
                                  {"steps", o.step.steps}, {"warmup", o.step.warmup}, {"warmup_epochs", o.warmup_epochs}, {"config", r.step.label},
                                  {"images_per_second", r.step.images_per_second}, {"ms_per_step", r.step.ms_per_step},
                                  {"peak_memory_gb", r.step.peak_memory_gb}, {"peak_allocated_gb", r.step.peak_allocated_gb},
                                  {"steady_memory_gb", r.step.steady_memory_gb}, {"data_wait_fraction", r.data_wait_fraction},
                                  {"graphs_captured", r.step.graphs_captured}, {"graphs_captured_timed", r.step.graphs_captured_timed},
                                  {"graph_replays", r.step.graph_replays}}
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
      return;
    }
    std::printf("%s end to end on %s: batch %d, %d px, %d workers, cache %s, %s\n", o.step.cfg.c_str(), o.data.c_str(),
                r.batch_size, o.step.img_size, r.workers, o.cache.empty() ? "none" : o.cache.c_str(), r.step.label.c_str());
    std::printf("%.1f images/s, %.1f ms/step over %d steps, peak memory %.2f GB reserved, %.2f GB allocated; the host waited "
                "for data %.0f %% of the time%s\n",
                r.step.images_per_second, r.step.ms_per_step, o.step.steps, r.step.peak_memory_gb, r.step.peak_allocated_gb,
                100 * r.data_wait_fraction,
                graph_note(r.step).c_str());
  });
}

}  // namespace kestrel::app
