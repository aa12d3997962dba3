// `kestrel bench train`: the training step alone (forward, loss, backward, fused optimiser, EMA) on
// synthetic images and targets, so that the step's speed is measured apart from the data pipeline.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kestrel::train {

struct StepBenchOptions {
  std::string cfg = "yolov5s";
  int batch_size = 64;
  int img_size = 640;
  std::string device;                 // "" = first GPU if any, else CPU
  std::string precision = "fp32";     // fp32, fp16 (with loss scaling), bf16
  bool channels_last = false;
  bool cuda_graph = false;            // capture the step once, replay it (CUDA only; see cuda_graph_step.h)
  std::string optimizer = "SGD";
  bool fused_optimizer = true;        // false: torch.optim's foreach algorithm (PyTorch's default, upstream's)
  bool fused_bn_silu = false;         // batch norm + SiLU as one operation (models/batch_norm_silu.h)
  bool ota = false;                   // YOLOv7's OTA loss instead of YOLOv5's
  int checkpoint_layers = 0;          // activation checkpointing of the first N layers (0: off, -1: all)
  int targets_per_image = 32;         // about a mosaic of four COCO images
  int warmup = 3;                     // untimed steps (allocator, cuDNN autotuning)
  int steps = 10;                     // timed steps
  uint64_t seed = 0;
};

struct StepBenchResult {
  std::string label;                  // e.g. "fp16 + channels-last"
  double images_per_second = 0;
  double ms_per_step = 0;
  // Device: peaks over the whole run (warm-up, autotuning and graph capture included), reserved by the
  // caching allocator and allocated to tensors, and the reserved peak of the timed steps alone.
  // CPU: the process's peak RSS in all three.
  double peak_memory_gb = 0, peak_allocated_gb = 0, steady_memory_gb = 0;
  std::vector<double> losses;         // total loss of every step (warm-up included), for equivalence checks
  // With --cuda-graph: graphs captured in all, of them during the timed steps (a capture there costs
  // the timing), and replays.
  int graphs_captured = 0, graphs_captured_timed = 0;
  int64_t graph_replays = 0;
  std::string error;                  // an ablation row that failed: why (its figures are 0)
};

StepBenchResult bench_train_step(const StepBenchOptions& options);

// The ablation table: the fp32 baseline as PyTorch eager trains it (foreach optimiser), + mixed precision
// (fp16 on CUDA, bf16 on CPU), + channels-last, + fused optimiser, + CUDA graph (CUDA only), + activation
// checkpointing of every layer (the memory / compute trade); on CUDA a last row, the graph row with fused
// BN-SiLU (compare it with the graph row). A row that fails is reported with its error and the table goes on.
// on_row: called with each row as soon as it is measured.
std::vector<StepBenchResult> bench_train_ablation(const StepBenchOptions& options,
                                                  const std::function<void(const StepBenchResult&)>& on_row = {});

// `kestrel bench e2e`: the whole training pipeline on a real dataset — the trainer's loader (training
// augmentations of the hyp file, RAM cache, worker threads, pinned batches), the asynchronous copy to
// the device, and the same step as `bench train` — timed after a warm-up epoch that fills the cache.
struct E2eBenchOptions {
  StepBenchOptions step;              // cfg, batch size, image size, device, precision, channels-last, ...
  std::string data;                   // dataset YAML (its train split)
  std::string hyp;                    // "" = YOLOv5's hyp.scratch-low defaults
  int workers = 8;                    // loader threads
  std::string cache = "ram";          // "", "ram" or "disk"
  int warmup_epochs = 1;              // untimed epochs (decoding into the cache), and at least step.warmup steps
  int repeat = 1;                     // the split N times per epoch (a small dataset as a large one)
};

struct E2eBenchResult {
  StepBenchResult step;               // images/s, ms/step and peak memory of the timed steps
  int64_t batches_per_epoch = 0;
  int workers = 0;                    // loader threads used (--workers capped at the cores and the batch)
  int batch_size = 0;                 // images per batch used (--batch-size capped at the split's images)
  std::string device;                 // where the steps ran ("cuda:0", "cpu")
  double data_wait_fraction = 0;      // share of the timed wall time the host waited for the loader
};

E2eBenchResult bench_e2e(const E2eBenchOptions& options);

}  // namespace kestrel::train
