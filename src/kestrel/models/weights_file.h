// kestrel's weight files: a safetensors file with the model's state dict under upstream keys
// ("model.0.conv.weight", ...) and, in its metadata, everything needed to rebuild the model without
// other files: the model YAML text, the class count and the class names. `kestrel val/detect/export
// --weights last.safetensors` need nothing else.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kestrel/models/yolo_model.h"

namespace kestrel::models {

struct WeightsInfo {
  std::string model_yaml;            // the model config's text
  std::string model_name;            // e.g. "yolov5n" (config file stem)
  std::vector<std::string> names;    // class names (nc entries)
  std::map<std::string, std::string> extra;  // other metadata (epoch, fitness, ...), as written
};

// Writes atomically. The tensors are written in float32 whatever the model's dtype.
void save_model_weights(const std::string& path, const YoloModel& model, const WeightsInfo& info);

struct LoadedModel {
  std::shared_ptr<YoloModel> model;  // on the CPU, float32, training mode
  WeightsInfo info;
};

// Rebuilds the model from the embedded config and loads every tensor (strict). Errors name the file:
// not a kestrel weights file, malformed metadata, tensors that do not fit the config.
LoadedModel load_model_weights(const std::string& path);

// The model YAML text of a config path (or shipped name like "yolov5s") and its stem.
WeightsInfo describe_config(const std::string& cfg_name_or_path, std::vector<std::string> names);

}  // namespace kestrel::models
