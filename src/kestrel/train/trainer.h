// `kestrel train`: YOLOv5/YOLOv7 train.py's procedure with its flags and defaults. Builds (or loads) the
// model, the training and validation loaders, the loss, the optimiser with its three groups, the EMA
// and the loss scaler; runs the epochs; validates the EMA after each; writes the run folder.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kestrel::train {

struct TrainOptions {
  // Upstream flags (names and defaults of YOLOv5 v7.0 train.py where kestrel has them).
  std::string weights;                 // initial weights (kestrel .safetensors); "" = from scratch
  std::string cfg;                     // model YAML or shipped name (needed without --weights)
  std::string data = "data/demo/demo.yaml";
  std::string hyp;                     // "" = hyp.scratch-low values
  int epochs = 100;
  int batch_size = 16;
  int img_size = 640;
  int img_size_test = 0;               // YOLOv7 --img-size TRAIN TEST: the validation size; 0 = img_size
  bool rect = false;
  std::string resume;                  // a run's weights/last.state.safetensors or its folder
  bool nosave = false;                 // only the final checkpoint
  bool noval = false;                  // validate only after the final epoch
  bool noplots = false;                // no plot files: labels.jpg, results.png, the final validation's charts
  bool tensorboard = true;             // TensorBoard event files (upstream writes none under --evolve)
  bool v5_metric = false;              // YOLOv7 --v5-metric: YOLOv7 models' AP with recall sentinel 1.0
  bool v3_metric = false;              // --v3-metric: ultralytics/yolov3 v9.6.0 val.py's metric (eval::MetricStyle)
  bool noautoanchor = false;           // skip AutoAnchor (the anchor check and search before training)
  std::string cache;                   // "", "ram" or "disk" (resized images next to the originals)
  std::string device;                  // "", "cpu", "0", "cuda:0"
  bool multi_scale = false;
  bool single_cls = false;
  bool sync_bn = false;                // SyncBatchNorm over the ranks (data parallel only)
  bool quad = false;                   // upstream --quad: 4 images -> one 2x image, loss x 4
  bool image_weights = false;          // sample images by class weights x (1 - class mAP)^2 each epoch
  std::string optimizer = "SGD";
  int workers = 8;
  bool bind_cores = false;             // pin loader workers to cores: this rank's slice of the allowed ones
  std::string project = "runs/train";
  std::string name = "exp";
  bool exist_ok = false;
  bool cos_lr = false;                 // YOLOv5 --cos-lr
  bool linear_lr = false;              // YOLOv7 --linear-lr: its recipes default to the cosine schedule
  double label_smoothing = 0.0;
  int patience = 100;
  std::vector<int> freeze{0};          // [n]: the first n layers; several values: those layer indices
  int save_period = -1;
  uint64_t seed = 0;

  // kestrel's own.
  std::string amp = "auto";            // auto (fp16 on CUDA, off on CPU), fp16, bf16, off
  double loss_scale = 65536.0;         // initial dynamic loss scale (fp16)
  bool check_nans = false;             // stop at the first non-finite loss (one host read per step)
  bool freeze_bn = false;              // keep BatchNorm statistics fixed (BN layers in eval mode)
  std::vector<int> checkpoint;         // activation checkpointing: [n] the first n layers, or those indices
  // No flag: false writes no checkpoint at all, not even the final one or on Ctrl-C (--evolve's
  // generations, as upstream, where only results.csv is read back); the final validation of best
  // weights is skipped with it.
  bool save_weights = true;
  // No flag: false leaves out the warnings about --hyp's unused and missing keys (--evolve says them once,
  // of the user's file, not of each generation's).
  bool hyp_warnings = true;
  bool cuda_graph = false;             // capture the step as CUDA graphs after the warm-up (one process, CUDA)
  // Tests only (no flag): false runs --cuda-graph's step (static buffers, gradients kept in place) without
  // capturing, on any device, so a CPU test covers everything around the capture.
  bool cuda_graph_capture = true;
  bool channels_last = false;          // channels-last weights and activations (fp16 convolutions' layout on GPUs)
  bool fused_bn_silu = false;          // batch norm + SiLU as one operation in training (CUDA kernels)
  double max_grad_norm = 10.0;         // upstream's clip_grad_norm_(max_norm=10.0); <= 0: off
  int max_boxes = 400;                 // target capacity per image
  int min_warmup_iterations = -1;      // -1: 100 (YOLOv5) or 1000 (YOLOv7 recipe)
  bool quiet = false;                  // no per-iteration progress line
  int64_t interrupt_after = -1;        // testing aid: behave as if Ctrl-C came after this many batches
};

struct TrainResult {
  std::string save_dir;
  std::string last, best;              // weights files ("" if not written)
  int epochs_completed = 0;
  double best_fitness = 0;
  double final_map50 = 0, final_map = 0;
  std::vector<double> epoch_losses;    // mean training loss (box + obj + cls) per epoch run
  bool interrupted = false;
  // Ctrl-C or SIGTERM after the last optimiser step (the last batches, the last validation): every epoch
  // is saved; the final validation of best weights and the plots were skipped.
  bool stopped_after_training = false;
};

TrainResult train(const TrainOptions& options);

// Fitness of YOLOv5/YOLOv7: 0.1 mAP@0.5 + 0.9 mAP@0.5:0.95.
double fitness(double map50, double map);

}  // namespace kestrel::train
