#include "kestrel/data/hyp.h"

#include <cmath>
#include <filesystem>
#include <string>
#include <tuple>

#include <yaml-cpp/yaml.h>

#include "kestrel/core/error.h"

namespace kestrel::data {

std::string resolve_hyp_path(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (name_or_path.empty() || fs::exists(name_or_path, ec)) return name_or_path;
  // Upstream's own spellings of its files: YOLOv5's data/hyps/<file> (train.py's default), YOLOv7's data/<file>.
  const fs::path given(name_or_path);
  const std::string folder = given.parent_path().lexically_normal().generic_string();
  const bool upstream_folder = folder == "data/hyps" || folder == "data";
  if (given.has_parent_path() && !upstream_folder) return name_or_path;
  const std::string file = given.filename().string();
  for (const fs::path& dir : {fs::path("configs/hyps"), fs::path(KESTREL_SOURCE_DIR) / "configs/hyps"})
    for (const std::string& name : {file, file + ".yaml"})
      if (fs::is_regular_file(dir / name, ec)) return (dir / name).string();
  return name_or_path;
}

AugmentOptions augment_options_from_yaml(const YAML::Node& root, const std::string& path, bool* yolov7_recipe) {
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
    // YOLOv7 zooms by U(1 - scale, 1.1 + scale): a range down to scale -0.05, a constant 1.05.
    const double least = v7 && std::string(key) == "scale" ? -0.05 : 0.0;
    if (!(*target >= least) || !std::isfinite(*target))
      fail(path, ":", root[key].Mark().line + 1, ": '", key, "' must be a finite number >= ", least);
  }
  // Probabilities above 1 (upstream's copy_paste then fails in random.sample; the others act as 1 there) and
  // a scale gain of 1 or more (a zero or negative image scale) are mistakes in the file.
  for (const auto& [key, value] : {std::pair<const char*, double>{"copy_paste", o.copy_paste}, {"mosaic", o.mosaic},
                                   {"mixup", o.mixup}, {"flipud", o.flipud}, {"fliplr", o.fliplr}, {"paste_in", o.paste_in}})
    if (value > 1) fail(path, ":", root[key].Mark().line + 1, ": '", key, "' is a probability: at most 1, got ", value);
  // Gains beyond these only break the images (a hue gain over 1 flips colours, a translation of 10 moves
  // the image off the canvas and every box with it, a shear of 90 degrees is infinite); upstream's evolution
  // stays well inside them.
  for (const auto& [key, value, high] : {std::tuple<const char*, double, double>{"hsv_h", o.hsv_h, 1}, {"hsv_s", o.hsv_s, 1},
                                         {"hsv_v", o.hsv_v, 1}, {"translate", o.translate, 1}, {"degrees", o.degrees, 360},
                                         {"shear", o.shear, 89}, {"perspective", o.perspective, 0.1}})
    if (value > high) fail(path, ":", root[key].Mark().line + 1, ": '", key, "' must be at most ", high, ", got ", value);
  if (o.scale >= 1)
    fail(path, ":", root["scale"].Mark().line + 1, ": 'scale' is a gain below 1 (images are scaled by 1 +/- scale), got ", o.scale);
  return o;
}

}  // namespace kestrel::data
