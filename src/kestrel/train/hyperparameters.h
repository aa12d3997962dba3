// A whole hyperparameter file (upstream --hyp): the optimiser and schedule keys, the loss gains and the
// augmentation keys, with the defaults of YOLOv5's hyp.scratch-low.yaml. YOLOv7's files add loss_ota
// and paste_in. Unknown keys are kept (and written back to the run's hyp.yaml) but reported.
#pragma once
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "kestrel/data/hyp.h"
#include "kestrel/loss/yolo_loss.h"

namespace kestrel::train {

struct Hyperparameters {
  double lr0 = 0.01, lrf = 0.01, momentum = 0.937, weight_decay = 5e-4;
  double warmup_epochs = 3.0, warmup_momentum = 0.8, warmup_bias_lr = 0.1;
  double iou_t = 0.20;        // unused by the loss (as upstream); kept for the file
  bool loss_ota = false;      // YOLOv7: ComputeLossOTA
  loss::LossOptions loss;     // box, cls, cls_pw, obj, obj_pw, anchor_t, fl_gamma (label smoothing: a flag)
  data::AugmentOptions augment;
  bool yolov7_recipe = false; // the file has YOLOv7 keys (paste_in / loss_ota)
  std::vector<std::pair<std::string, double>> values;  // every key as read, in file order (for hyp.yaml)
  std::vector<std::string> unknown_keys;
  std::vector<std::string> defaulted_keys;  // keys the file lacks: the defaults above (and in hyp.yaml)
};

// Reads `path` (a bare file name is looked up in configs/hyps: data::resolve_hyp_path; errors name the file,
// line and key). Missing keys keep the defaults above (upstream fails
// on them with a KeyError), are listed in defaulted_keys and appended to values.
Hyperparameters load_hyperparameters(const std::string& path);
// train.py has no such lines (it fails on a missing key, and --evolve on an unknown one): the keys of `h`
// (read from `path`) kestrel does not use, and those it lacks, as "warning: ..." lines on `out`.
void print_hyperparameter_warnings(const Hyperparameters& h, const std::string& path, std::ostream& out);
// The augmentation keys of a --hyp file for the commands that only load data (bench data, data show),
// read as training reads them, unused and missing keys reported on `warnings` (a misspelt key would show the
// defaults in silence). *yolov7_recipe: the file brings YOLOv7's augmentations (mosaic-9, its zoom range).
data::AugmentOptions load_augmentations(const std::string& path, std::ostream& warnings, bool* yolov7_recipe);
// The defaults as a file would hold them (no file given).
Hyperparameters default_hyperparameters();

// "key: value" lines, in file order (the run's hyp.yaml).
std::string hyperparameters_yaml(const Hyperparameters& h);

}  // namespace kestrel::train
