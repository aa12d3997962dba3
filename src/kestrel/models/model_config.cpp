#include "kestrel/models/model_config.h"

#include <cmath>
#include <filesystem>
#include <set>

#include "kestrel/core/error.h"
#include "kestrel/core/yaml_file.h"

namespace kestrel::models {
namespace fs = std::filesystem;

namespace {

std::string where(const std::string& source, const YAML::Node& node) {
  const auto mark = node.Mark();
  return mark.line >= 0 ? cat(source, ":", mark.line + 1) : source;
}

template <typename T>
T scalar(const YAML::Node& node, const std::string& source, const std::string& key) {
  if (!node.IsScalar()) fail(where(source, node), ": '", key, "' must be a number");
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    fail(where(source, node), ": '", key, "' must be a number, got '", node.Scalar(), "'");
  }
}

LayerSpec parse_layer(const YAML::Node& row, int index, const std::string& source) {
  const std::string at = cat(where(source, row), ": layer ", index);
  if (!row.IsSequence() || row.size() != 4)
    fail(at, ": a layer is [from, number, module, args] (4 entries), got ",
         row.IsSequence() ? cat(row.size(), " entries") : std::string("no list"));
  LayerSpec spec;
  spec.line = row.Mark().line + 1;
  const YAML::Node& from = row[0];
  try {
    if (from.IsSequence()) {
      spec.from_is_list = true;
      for (const auto& f : from) spec.from.push_back(f.as<int>());
      if (spec.from.empty()) fail(at, ": 'from' is an empty list");
    } else {
      spec.from.push_back(from.as<int>());
    }
    spec.number = row[1].as<int>();
  } catch (const YAML::Exception&) {
    fail(at, ": 'from' must be an integer or a list of integers and 'number' an integer");
  }
  for (int f : spec.from) {
    if (f >= index) fail(at, ": 'from' index ", f, " does not name an earlier layer");
    // Layer 0 reads the input image (-1); later layers may look back at most to layer 0.
    if (f < 0 && (index == 0 ? f != -1 : index + f < 0))
      fail(at, ": 'from' index ", f, " reaches before the first layer");
  }
  // Upstream's configs repeat a block at most 9 times (before depth_multiple); the bound keeps a typo from
  // building millions of layers.
  if (spec.number < 1 || spec.number > 1000) fail(at, ": 'number' must be in [1, 1000], got ", spec.number);
  if (!row[2].IsScalar() || row[2].Scalar().empty()) fail(at, ": 'module' must be a name");
  spec.module = row[2].Scalar();
  if (!row[3].IsSequence()) fail(at, " (", spec.module, "): 'args' must be a list");
  spec.args = row[3];
  return spec;
}

// `root` by value: yaml-cpp returns invalid nodes for missing keys of a const node, defined-but-null ones otherwise.
ModelConfig from_yaml(YAML::Node root, const std::string& source) {
  if (root.IsNull()) fail(source, ": the model file is empty");
  if (!root.IsMap()) fail(source, ": a model file is a YAML mapping with nc, anchors, backbone and head");

  ModelConfig cfg;
  cfg.source = source;
  for (const char* key : {"nc", "depth_multiple", "width_multiple", "backbone", "head"})
    if (!root[key]) fail(source, ": missing key '", key, "'");
  cfg.nc = scalar<int>(root["nc"], source, "nc");
  if (cfg.nc < 1) fail(where(source, root["nc"]), ": 'nc' must be >= 1, got ", cfg.nc);
  cfg.depth_multiple = scalar<double>(root["depth_multiple"], source, "depth_multiple");
  cfg.width_multiple = scalar<double>(root["width_multiple"], source, "width_multiple");
  // Bounded: the builder rounds number * depth_multiple and channels * width_multiple to int (.inf or 1e300
  // overflowed there). Upstream's largest is 1.33 (yolov5x); 100 leaves any real model room.
  if (!(cfg.depth_multiple > 0 && cfg.depth_multiple <= 100) || !(cfg.width_multiple > 0 && cfg.width_multiple <= 100))
    fail(source, ": depth_multiple and width_multiple must be numbers in (0, 100]");
  // The builder divides widths by channel_multiple and gives layer 0 `ch` input channels.
  if (root["channel_multiple"]) {
    cfg.channel_multiple = scalar<int>(root["channel_multiple"], source, "channel_multiple");
    if (cfg.channel_multiple < 1)
      fail(where(source, root["channel_multiple"]), ": 'channel_multiple' must be >= 1, got ", cfg.channel_multiple);
  }
  if (root["ch"]) {
    cfg.ch = scalar<int>(root["ch"], source, "ch");
    if (cfg.ch < 1) fail(where(source, root["ch"]), ": 'ch' must be >= 1, got ", cfg.ch);
  }
  if (root["activation"] && !root["activation"].IsNull()) {  // empty or null: the default, as upstream's `if act:`
    if (!root["activation"].IsScalar())
      fail(where(source, root["activation"]), ": 'activation' must be a module such as nn.SiLU(), got a list or mapping");
    cfg.activation = root["activation"].Scalar();
  }
  cfg.anchors = root["anchors"];  // checked by the builder, which knows whether the head needs them

  int index = 0;
  for (const char* part : {"backbone", "head"}) {
    const YAML::Node list = root[part];
    if (!list.IsSequence() || list.size() == 0) fail(where(source, list), ": '", part, "' must be a non-empty list of layers");
    for (const auto& row : list) cfg.layers.push_back(parse_layer(row, index++, source));
    if (std::string(part) == "backbone") cfg.backbone_layers = index;
  }
  return cfg;
}

}  // namespace

std::string ModelConfig::name() const { return fs::path(source).stem().string(); }

ModelConfig parse_model_config(const std::string& yaml_text, const std::string& source) {
  return from_yaml(parse_yaml_text(yaml_text, source), source);
}

ModelConfig load_model_config(const std::string& path) { return from_yaml(load_yaml_file(path, "model"), path); }

std::string resolve_model_config_path(const std::string& name_or_path) {
  if (fs::exists(name_or_path)) return name_or_path;
  // A missing path stands for the shipped copy only where upstream keeps that config (models/yolov5s.yaml,
  // YOLOv7's cfg/training/yolov7.yaml, cfg/baseline/), relative to its checkout, or kestrel's own
  // configs/models/ from another folder. Any other path is the user's own file: missing, it is an error,
  // never the shipped config of the same name trained in its place.
  const std::string folder = fs::path(name_or_path).parent_path().lexically_normal().generic_string();
  if (folder == "cfg/deploy")
    fail(name_or_path, ": no such file; YOLOv7's deploy configs are not shipped: train with cfg/training/",
         fs::path(name_or_path).filename().string(), " (kestrel folds its implicit layers for inference and export, as "
         "the deploy model has them folded), or give the deploy file's path in a YOLOv7 checkout");
  if (folder == "models/hub" || folder == "hub")
    fail(name_or_path, ": no such file; YOLOv5's models/hub configs are not shipped: give the file's path in a YOLOv5 "
         "checkout (they load as they are)");
  if (!folder.empty() && folder != "models" && folder != "cfg/training" && folder != "cfg/baseline" && folder != "configs/models")
    fail(name_or_path, ": model config not found");
  std::string stem = fs::path(name_or_path).filename().string();
  if (fs::path(stem).extension() == ".yaml" || fs::path(stem).extension() == ".yml") stem = fs::path(stem).stem().string();
  for (const fs::path& dir : {fs::path("configs/models"), fs::path(KESTREL_SOURCE_DIR) / "configs/models"}) {
    fs::path candidate = dir / (stem + ".yaml");
    if (fs::exists(candidate)) return candidate.string();
  }
  if (!folder.empty()) fail(name_or_path, ": model config not found (kestrel ships no ", stem, ".yaml)");
  // A bare name (yolov3-spp, yolov5s6.yaml): say which names are shipped.
  std::set<std::string> shipped;
  std::error_code ec;
  for (const fs::path& dir : {fs::path("configs/models"), fs::path(KESTREL_SOURCE_DIR) / "configs/models"})
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".yaml") shipped.insert(it->path().stem().string());
  std::string list;
  for (const std::string& name : shipped) list += (list.empty() ? "" : ", ") + name;
  fail(name_or_path, ": no such file, and not a config kestrel ships (", list.empty() ? "none found" : list,
       "); give the path of another upstream model YAML");
}

}  // namespace kestrel::models
