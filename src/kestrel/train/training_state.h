// The training-state file a resume continues from (a run's weights/last.state.safetensors): the model,
// its EMA, the optimiser and loss-scaler state as tensors ("model/...", "ema/...", "optimizer/...",
// "scaler/..."), and as JSON metadata the effective options (opt.yaml's fields) and the progression.
// kestrel's own format ("kestrel-train-state-1"); safetensors, so loading it runs nothing.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kestrel/models/state_dict.h"
#include "kestrel/train/trainer.h"

namespace kestrel::train {

// Per-epoch values of a run that a resume must restore.
struct Progression {
  int epoch = 0;            // epoch in progress (or to start)
  int64_t next_batch = 0;   // first batch of `epoch` still to run
  int64_t last_opt_step = -1;
  double best_fitness = 0;
  int best_epoch = 0;
  std::array<double, 3> loss_sum{0, 0, 0};  // this epoch's summed loss items so far
  int64_t loss_count = 0;
  std::vector<double> maps;  // per-class mAP50-95 of the last validation (--image-weights); empty: none yet
};

struct TrainingState {
  TrainOptions options;
  Progression progression;
  int64_t ema_updates = 0;
  int world_size = 1;       // ranks of the run that saved it
  models::NamedTensors model, ema, optimizer, scaler;  // names without their prefix; scaler empty without fp16
  // The run's architecture (its WeightsInfo's config text and stem), so that a resume needs no other file;
  // empty in files saved before kestrel wrote them (the resume then reads weights/last.safetensors).
  std::string model_yaml, model_name;
};

// `--resume` accepts a run folder or the file itself: the file's path.
std::string training_state_path(const std::string& resume);

// A bare `--resume` (upstream: the newest last*.pt below the working folder): the most recently written
// weights/last.state.safetensors below `project` (runs/train). Throws kestrel::Error when there is none.
std::string latest_training_state(const std::string& project);

// Reads and checks the whole file; anything missing or malformed is an error naming `path`.
TrainingState read_training_state(const std::string& path);

// Written atomically (a crash leaves the previous file).
void write_training_state(const std::string& path, const TrainingState& state);

}  // namespace kestrel::train
