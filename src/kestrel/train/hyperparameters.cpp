#include "kestrel/train/hyperparameters.h"

#include <ostream>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "kestrel/core/error.h"
#include "kestrel/core/yaml_file.h"

namespace kestrel::train {
namespace {

// Every key the trainer understands, bound to where it goes.
std::vector<std::pair<const char*, double*>> bindings(Hyperparameters& h) {
  data::AugmentOptions& a = h.augment;
  loss::LossOptions& l = h.loss;
  return {{"lr0", &h.lr0},
          {"lrf", &h.lrf},
          {"momentum", &h.momentum},
          {"weight_decay", &h.weight_decay},
          {"warmup_epochs", &h.warmup_epochs},
          {"warmup_momentum", &h.warmup_momentum},
          {"warmup_bias_lr", &h.warmup_bias_lr},
          {"box", &l.box},
          {"cls", &l.cls},
          {"cls_pw", &l.cls_pw},
          {"obj", &l.obj},
          {"obj_pw", &l.obj_pw},
          {"iou_t", &h.iou_t},
          {"anchor_t", &l.anchor_t},
          {"fl_gamma", &l.fl_gamma},
          {"hsv_h", &a.hsv_h},
          {"hsv_s", &a.hsv_s},
          {"hsv_v", &a.hsv_v},
          {"degrees", &a.degrees},
          {"translate", &a.translate},
          {"scale", &a.scale},
          {"shear", &a.shear},
          {"perspective", &a.perspective},
          {"flipud", &a.flipud},
          {"fliplr", &a.fliplr},
          {"mosaic", &a.mosaic},
          {"mosaic9", &a.mosaic9},
          {"mixup", &a.mixup},
          {"copy_paste", &a.copy_paste},
          {"paste_in", &a.paste_in}};
}

}  // namespace

Hyperparameters default_hyperparameters() {
  Hyperparameters h;
  for (const auto& [key, target] : bindings(h))
    if (std::string(key) != "mosaic9" && std::string(key) != "paste_in") h.values.emplace_back(key, *target);
  return h;
}

Hyperparameters load_hyperparameters(const std::string& given) {
  const std::string path = data::resolve_hyp_path(given);
  YAML::Node root = load_yaml_file(path, "hyperparameter");
  if (!root.IsMap()) fail(path, ": a hyperparameter file is a YAML mapping of key: value");
  Hyperparameters h;
  h.augment = data::augment_options_from_yaml(root, path, &h.yolov7_recipe);  // also applies YOLOv7's mosaic9 share
  std::map<std::string, double*> known;
  for (const auto& [key, target] : bindings(h)) known[key] = target;
  for (const auto& item : root) {
    if (!item.first.IsScalar()) fail(path, ":", item.first.Mark().line + 1, ": a key must be a plain name, not a list or mapping");
    const std::string key = item.first.Scalar();
    double value = 0;
    try {
      value = item.second.as<double>();
    } catch (const YAML::Exception&) {
      fail(path, ":", item.second.Mark().line + 1, ": '", key, "' must be a number");
    }
    if (!std::isfinite(value)) fail(path, ":", item.second.Mark().line + 1, ": '", key, "' must be finite");
    h.values.emplace_back(key, value);
    if (key == "loss_ota") {
      h.loss_ota = value == 1;  // train.py: hyp['loss_ota'] == 1
    } else if (const auto it = known.find(key); it != known.end()) {
      *it->second = value;
    } else if (key != "anchors") {
      h.unknown_keys.push_back(key);
    } else if (value > 0) {  // YOLOv5's optional key (hyp.VOC.yaml: 3.412): it rebuilds the head with that many
      h.unknown_keys.push_back(cat("anchors (YOLOv5 sets round(", value, ") anchors per level and fits them with "
                                   "AutoAnchor; kestrel keeps the model YAML's anchors)"));
    }
  }
  // YOLOv7's train.py trains with OTA when loss_ota is 1 or missing; any other value means its plain loss.
  if (h.yolov7_recipe && !root["loss_ota"]) h.loss_ota = true;
  h.loss.yolov7_iou = h.yolov7_recipe;  // YOLOv7's train.py and test.py compute their losses with its bbox_iou
  for (const auto& [key, target] : bindings(h)) {
    const std::string name = key;
    if (root[name] || name == "mosaic9" || (name == "paste_in" && !h.yolov7_recipe)) continue;
    h.defaulted_keys.push_back(name);
    h.values.emplace_back(name, *target);
  }
  if (h.warmup_epochs < 0) fail(path, ": 'warmup_epochs' must be >= 0");
  if (h.lr0 <= 0) fail(path, ": 'lr0' must be > 0");
  if (h.lrf <= 0) fail(path, ": 'lrf' must be > 0");
  if (h.momentum < 0 || h.momentum >= 1) fail(path, ": 'momentum' must be in [0, 1)");
  if (h.loss.anchor_t <= 1) fail(path, ": 'anchor_t' must be > 1");
  // Values that train nonsense without a word (a step size of 1e30, a negative decay or IoU threshold):
  // upstream takes any number, kestrel names the key. The ranges hold every value of upstream's files and of
  // its hyperparameter evolution (train.py's meta limits), with room to spare.
  const std::tuple<const char*, double, double, double> ranges[] = {
      {"lr0", h.lr0, 0, 10},           {"lrf", h.lrf, 0, 10},          {"weight_decay", h.weight_decay, 0, 1},
      {"warmup_momentum", h.warmup_momentum, 0, 1}, {"warmup_bias_lr", h.warmup_bias_lr, 0, 10},
      {"box", h.loss.box, 0, 1000},    {"obj", h.loss.obj, 0, 1000},   {"cls", h.loss.cls, 0, 1000},
      {"cls_pw", h.loss.cls_pw, 1e-6, 1000}, {"obj_pw", h.loss.obj_pw, 1e-6, 1000}, {"iou_t", h.iou_t, 0, 1},
      {"anchor_t", h.loss.anchor_t, 1, 100}, {"fl_gamma", h.loss.fl_gamma, 0, 10},
      {"warmup_epochs", h.warmup_epochs, 0, 1e6}};  // (1e300 epochs overflowed the warm-up's iteration count)
  for (const auto& [key, value, low, high] : ranges)
    if (!(value >= low && value <= high)) {
      const YAML::Node node = root[key];
      fail(path, node ? cat(":", node.Mark().line + 1) : std::string(), ": '", key, "' must be in [", low, ", ", high,
           "], got ", value);
    }
  return h;
}

data::AugmentOptions load_augmentations(const std::string& path, std::ostream& warnings, bool* yolov7_recipe) {
  const Hyperparameters h = load_hyperparameters(path);
  print_hyperparameter_warnings(h, path, warnings);
  *yolov7_recipe = h.yolov7_recipe;
  return h.augment;
}

void print_hyperparameter_warnings(const Hyperparameters& h, const std::string& path, std::ostream& out) {
  if (!h.unknown_keys.empty()) {
    std::string keys;
    for (const auto& k : h.unknown_keys) keys += " " + k;
    out << "warning: " << path << ": keys kestrel does not use:" << keys << "\n";
  }
  if (!h.defaulted_keys.empty()) {
    std::string keys;
    for (const auto& k : h.defaulted_keys) keys += " " + k;
    out << "warning: " << path << " lacks" << keys << ": hyp.scratch-low's values are used (hyp.yaml lists them)\n";
  }
}

std::string hyperparameters_yaml(const Hyperparameters& h) {
  std::string out;  // as yaml.safe_dump writes upstream's hyp.yaml: readable by upstream's train.py too
  for (const auto& [key, value] : h.values) {
    // A key other than a plain name (a hyp file's own "odd: key") double-quoted, as safe_dump quotes it.
    const bool plain = !key.empty() && std::all_of(key.begin(), key.end(), [](unsigned char c) {
      return std::isalnum(c) || c == '_' || c == '-' || c == '.';
    }) && !std::isdigit(static_cast<unsigned char>(key[0])) && key[0] != '-' && key[0] != '.';
    out += (plain ? key : nlohmann::json(key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)) + ": " +
           yaml_float(value) + "\n";
  }
  return out;
}

}  // namespace kestrel::train
