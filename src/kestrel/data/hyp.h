// The augmentation hyperparameters, with the keys and defaults of YOLOv5's hyp.scratch-low.yaml.
// YOLOv7 adds mosaic9 share (p5: 0.2 of mosaics are 9-tile) and paste_in; its p5 recipe
// (hyp.scratch.p5.yaml) changes translate 0.2, scale 0.9, mixup 0.15, paste_in 0.15.
#pragma once

namespace kestrel::data {

struct AugmentOptions {
  double hsv_h = 0.015;       // hue jitter (fraction)
  double hsv_s = 0.7;         // saturation jitter (fraction)
  double hsv_v = 0.4;         // value jitter (fraction)
  double degrees = 0.0;       // rotation (+/- deg)
  double translate = 0.1;     // translation (+/- fraction)
  double scale = 0.5;         // scale gain (+/-)
  double shear = 0.0;         // shear (+/- deg)
  double perspective = 0.0;   // perspective (+/- fraction), 0..0.001
  double flipud = 0.0;        // vertical flip probability
  double fliplr = 0.5;        // horizontal flip probability
  double mosaic = 1.0;        // mosaic probability
  double mosaic9 = 0.0;       // share of mosaics that use 9 tiles instead of 4 (YOLOv7 p5: 0.2)
  double mixup = 0.0;         // mixup probability
  double copy_paste = 0.0;    // copy-paste probability (needs polygons)
  double paste_in = 0.0;      // YOLOv7 paste-in probability (needs polygons)
};

}  // namespace kestrel::data

#include <string>

namespace YAML {
class Node;
}

namespace kestrel::data {

// A --hyp value as upstream's check_yaml finds it: an existing path as given, else a bare file name (with or
// without .yaml) among the bundled configs/hyps (in the working folder, then the source tree); so is a
// missing file of upstream's folders, data/hyps/hyp.scratch-low.yaml (YOLOv5) or data/hyp.scratch.p5.yaml
// (YOLOv7). Otherwise the value unchanged, for the loader to report as not found.
std::string resolve_hyp_path(const std::string& name_or_path);
// The augmentation keys of a hyperparameter mapping (an upstream hyp file's, or an entry of
// evolve_population.yaml; other keys belong to the trainer and are ignored here), checked. A YOLOv7 recipe (a
// mapping with paste_in or loss_ota) gets YOLOv7's 9-tile mosaic share of 0.2 unless `mosaic9` is given.
// Errors name `path`, the line and the key (train::load_hyperparameters reads whole files).
AugmentOptions augment_options_from_yaml(const YAML::Node& map, const std::string& path, bool* yolov7_recipe = nullptr);

}  // namespace kestrel::data
