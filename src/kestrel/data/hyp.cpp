#include "kestrel/data/hyp.h"

#include <cmath>

#include <yaml-cpp/yaml.h>

#include "kestrel/core/error.h"
#include "kestrel/core/yaml_file.h"

namespace kestrel::data {

AugmentOptions load_augment_options(const std::string& path, bool* yolov7_recipe) {
  YAML::Node root = load_yaml_file(path, "hyperparameter");
  if (!root.IsMap()) fail(path, ": a hyperparameter file is a YAML mapping of key: value");
  AugmentOptions o;
  const bool v7 = static_cast<bool>(root["paste_in"]) || static_cast<bool>(root["loss_ota"]);
  if (yolov7_recipe) *yolov7_recipe = v7;
  if (v7) o.mosaic9 = 0.2;  // YOLOv7's load_mosaic9 share, fixed in its code rather than a hyp key
  const std::pair<const char*, double*> keys[] = {
      {"hsv_h", &o.hsv_h},   {"hsv_s", &o.hsv_s},     {"hsv_v", &o.hsv_v},   {"degrees", &o.degrees},
      {"translate", &o.translate}, {"scale", &o.scale}, {"shear", &o.shear}, {"perspective", &o.perspective},
      {"flipud", &o.flipud}, {"fliplr", &o.fliplr},   {"mosaic", &o.mosaic}, {"mosaic9", &o.mosaic9},
      {"mixup", &o.mixup},   {"copy_paste", &o.copy_paste}, {"paste_in", &o.paste_in}};
  for (const auto& [key, target] : keys) {
    if (!root[key]) continue;
    try {
      *target = root[key].as<double>();
    } catch (const YAML::Exception&) {
      fail(path, ":", root[key].Mark().line + 1, ": '", key, "' must be a number");
    }
    if (!(*target >= 0) || !std::isfinite(*target))
      fail(path, ":", root[key].Mark().line + 1, ": '", key, "' must be a finite number >= 0");
  }
  // Upstream's copy_paste draws round(p * n) of n instances (random.sample): above 1 it fails there.
  if (o.copy_paste > 1)
    fail(path, ":", root["copy_paste"].Mark().line + 1, ": 'copy_paste' is a probability: at most 1, got ", o.copy_paste);
  return o;
}

}  // namespace kestrel::data
