// The YOLOv5/YOLOv7 model YAML language: nc, depth_multiple, width_multiple, anchors, optional activation
// and ch, and the backbone + head lists of [from, number, module, args]. Parsing only checks the shape
// of the file; what the modules and their arguments mean is the builder's job (model_builder.h).
#pragma once
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace kestrel::models {

struct LayerSpec {
  std::vector<int> from;       // as written: -1 = previous layer, >= 0 = absolute layer index
  bool from_is_list = false;   // `[-1, 6]` (a list) versus `-1`
  int number = 1;              // repeats as written, before depth_multiple
  std::string module;          // "Conv", "nn.Upsample", "IDetect" ...
  YAML::Node args;             // the argument list as written (a sequence; may hold names like nc, anchors)
  int line = 0;                // 1-based line in the file, for messages
};

struct ModelConfig {
  std::string source;          // file path, or a label when parsed from text
  int nc = 80;
  double depth_multiple = 1.0;
  double width_multiple = 1.0;
  int channel_multiple = 8;    // widths are rounded up to multiples of this (YOLOv5 HEAD key)
  YAML::Node anchors;          // list of per-level [w,h,...] pixel lists, or an int (anchors per level)
  std::string activation;      // YOLOv5's optional default activation, e.g. "nn.LeakyReLU(0.1)"; "" = SiLU
  int ch = 3;                  // input channels
  std::vector<LayerSpec> layers;  // backbone followed by head
  int backbone_layers = 0;

  // "yolov5s" for ".../yolov5s.yaml": the name shown in summaries.
  std::string name() const;
};

// Throws kestrel::Error naming the file (and line) for: missing file, empty file, malformed YAML,
// missing or mistyped keys, malformed layer rows, `from` indices that point forward or out of range.
ModelConfig load_model_config(const std::string& path);
ModelConfig parse_model_config(const std::string& yaml_text, const std::string& source);

// Finds a config by path, or by name among the shipped ones: "yolov5s" -> configs/models/yolov5s.yaml.
std::string resolve_model_config_path(const std::string& name_or_path);

}  // namespace kestrel::models
