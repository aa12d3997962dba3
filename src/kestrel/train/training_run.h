// One `kestrel train` run, in the phases that train() (trainer.cpp) calls in order: options and ranks,
// recipe, model, data, AutoAnchor, optimiser, resume state, step, run files; then per epoch the batch
// loop and the end-of-epoch validation and checkpoint; finally the validation of best.safetensors.
// TrainingRun holds what the phases share. Each phase uses only what the earlier ones set up, and the
// order is part of the behaviour: console output, the run folder, and the seeded weight initialisation
// all follow it.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "kestrel/core/safetensors.h"
#include "kestrel/core/stop_signal.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/data/loader.h"
#include "kestrel/dist/process_group.h"
#include "kestrel/eval/validator.h"
#include "kestrel/loss/yolo_loss.h"
#include "kestrel/models/state_dict.h"
#include "kestrel/models/weights_file.h"
#include "kestrel/train/cuda_graph_step.h"
#include "kestrel/train/ema.h"
#include "kestrel/train/grad_scaler.h"
#include "kestrel/train/hyperparameters.h"
#include "kestrel/train/optimizer.h"
#include "kestrel/train/progress_line.h"
#include "kestrel/train/run_files.h"
#include "kestrel/train/schedule.h"
#include "kestrel/train/split_loader.h"
#include "kestrel/train/tensorboard.h"
#include "kestrel/train/train_step.h"
#include "kestrel/train/training_state.h"
#include "kestrel/train/trainer.h"

namespace kestrel::data {
class DevicePrefetcher;
}

namespace kestrel::train {

// What the end of an epoch takes from its batch loop.
struct EpochTotals {
  at::Tensor loss_sum;             // [3] float32 on the device: summed box, obj, cls loss items
  std::array<double, 3> lr{};      // per-group learning rates of the epoch's last iteration
  double images_per_second = 0;    // after the first steps; 0: too few batches to time
  int64_t dropped_boxes = 0;       // boxes of this rank's batches beyond --max-boxes, left out of the loss
  bool interrupted = false;        // Ctrl-C or --interrupt-after: progression points after the last step
};

// train.py's NMS IoU for its final validation of best weights: YOLOv5's 0.65 on COCO (a val path ending in
// coco/val2017.txt), else val.py's 0.6; YOLOv7's 0.7 for --data *coco.yaml with 80 classes (the only case
// where YOLOv7 validates at the end, last and best; kestrel validates best in every case, at 0.6 otherwise).
double final_validation_iou_thres(bool yolov7_recipe, const data::DatasetConfig& data, int64_t nc);

// `s` as one word of a POSIX shell command (quoted where it holds spaces, quotes, $ and the like).
std::string shell_word(const std::string& s);

// The `kestrel val` command that validates a run's best weights as its final validation would: the run's
// --data, validation size and batch (twice a rank's batch: rectangular batches pad by their batch's shapes),
// --single-cls and final IoU threshold (for the messages of a run stopped before it); paths as shell_word.
std::string final_validation_command(const TrainOptions& o, const std::string& best, double iou_thres, int world_size);

// Upstream --multi-scale's size for a batch: random.randrange(int(img * 0.5), int(img * 1.5) + stride)
// rounded down to a multiple of the stride (Python's draw on the MT19937 stream).
int multi_scale_size(int img_size, int stride, std::mt19937& rng);
// images [B, 3, H, W] resized (bilinear, align_corners false) so that the longer side is `size`: each side
// x size / max(H, W), rounded up to a multiple of the stride; unchanged when the longer side is `size`.
at::Tensor multi_scale_resize(const at::Tensor& images, int size, int stride);

class TrainingRun {
 public:
  TrainingRun() = default;
  TrainingRun(const TrainingRun&) = delete;  // the step and the EMA refer to members
  TrainingRun& operator=(const TrainingRun&) = delete;

  // ---- set-up, in this order ----------------------------------------------------------------------
  void read_options(const TrainOptions& requested);  // --resume: the saved options; checks
  void join_ranks();               // device, data-parallel context; ranks > 0 go quiet
  void load_recipe();              // hyperparameters, dataset config, class names
  void build_model();              // seeded init, pretrained transfer, SyncBN, EMA copy, freeze, checkpointing
  void build_data();               // training and validation loaders
  void run_autoanchor();           // new runs: AutoAnchor (rank 0 searches, all ranks receive), weights to fp16 precision
  void build_optimiser();          // schedule, optimiser groups, precision, loss scaler
  void restore_resume_state();     // --resume only: weights, optimiser, scaler, progression
  void choose_run_dir();           // a new run folder on rank 0; a scratch folder on other ranks
  void build_step();               // losses, EMA, the training step, gradient all-reduce
  void open_run_files();           // weights/, hyp.yaml, opt.yaml, labels.jpg, results.csv, TensorBoard
  void start_epochs();             // the banner, the progress line, Ctrl-C handling
  bool resuming() const { return !o.resume.empty(); }

  // ---- one epoch -----------------------------------------------------------------------------------
  void begin_epoch();              // training mode, image weights, the loader at progression.next_batch
  EpochTotals run_batches();       // the batch loop
  void save_interrupted();         // the checkpoint a resume continues from
  bool end_epoch(const EpochTotals& totals);  // validate, log, save; true: stop early (patience)

  // ---- the end -------------------------------------------------------------------------------------
  void end_epochs();               // the previous Ctrl-C handler back
  TrainResult finish();            // validation of best.safetensors, plots, clean-up on all ranks

  TrainOptions o;                  // the effective options (the saved ones when resuming)
  Progression progression;

 private:
  void transfer_pretrained(const models::LoadedModel& pretrained);
  void plot_first_batches(data::DevicePrefetcher& prefetcher);  // train_batch*.jpg, from the host batches
  at::Tensor multi_scale(const at::Tensor& images, int epoch, int64_t i) const;
  int multi_scale_size_of(int epoch, int64_t i) const;  // batch i's --multi-scale size (seeded by epoch and i)
  void check_finite_loss(const loss::YoloLoss::Result& step_loss, const data::DeviceBatch& batch, int epoch,
                         int64_t i, int64_t ni);
  bool optimiser_step(const StepSettings& s, int64_t ni);  // true: stop here (Ctrl-C, --interrupt-after)
  void validate_epoch(bool final_epoch);
  bool ema_is_finite();  // every float tensor of the EMA model (one device read-back)
  void log_epoch(int epoch, const std::array<double, 3>& train_loss, const EpochTotals& totals);
  // periodic: also --save-period's epoch<n>.safetensors (not for a Ctrl-C save in the middle of an epoch).
  void save_checkpoint(const Progression& p, bool best, int epoch_done, bool periodic);
  void validate_best();

  // In the order the phases create them (and the reverse of their destruction, as locals had).
  TrainingState resume_state;     // --resume: the saved run (its EMA is loaded once the EMA exists)
  std::string save_dir;
  c10::Device device{c10::kCPU};
  dist::DistContext dist_ctx;
  std::streambuf* cout_buffer = nullptr;  // std::cout's, while ranks > 0 silence it

  Hyperparameters hyp;
  data::DatasetConfig data_cfg;
  std::vector<std::string> names;
  int nc = 0;

  models::WeightsInfo info;
  std::shared_ptr<models::YoloModel> model;
  std::shared_ptr<models::YoloModel> ema_model;

  int stride = 32;
  SplitLoader train_data, val_data;
  int64_t nb = 0;                  // training batches per epoch (of this rank)

  ScheduleOptions sched;
  OptimizerOptions opt_options;
  std::optional<Optimizer> optimizer;
  std::string amp;                 // fp16, bf16 or off
  std::optional<GradScaler> scaler;

  std::string run_dir;             // rank 0's run folder ("" on other ranks of a new run)
  struct ScratchDir {              // ranks > 0: their save_dir, removed when the run ends, also by an error
    std::string path;
    ~ScratchDir();
  } scratch_dir;

  std::optional<loss::YoloLoss> compute_loss;  // validation's loss (always YOLOv5's)
  LossFn train_loss_fn;
  std::optional<ModelEma> ema;
  std::optional<TrainStep> step;
  std::unique_ptr<CudaGraphStep> graph;  // --cuda-graph: replays the step (and its update)
  std::optional<dist::GradientReducer> reducer;

  std::filesystem::path weights_dir;
  std::string last_path, best_path, state_path;
  std::optional<ResultsCsv> results;
  std::optional<TensorBoardWriter> tensorboard;

  std::optional<StopSignal> stop_signal;         // Ctrl-C and SIGTERM during the epochs
  std::optional<StopSignal> final_stop;          // rank 0, nested in it: the same during the final validation
  ProgressLine progress;
  TrainResult result;
  int first_epoch = 0;                                   // this session's first epoch (a resume's saved one)
  std::chrono::steady_clock::time_point training_start;  // for upstream's "N epochs completed in H hours."
  int64_t batches_run = 0;
  int64_t dist_stop_checks = 0;    // optimiser steps of this process (ranks vote on Ctrl-C every 8th)
  std::optional<dist::DeferredAnyRank> stop_vote;  // data parallel: the Ctrl-C vote, read one vote later
  eval::ValidationResult last_val;
};

}  // namespace kestrel::train
