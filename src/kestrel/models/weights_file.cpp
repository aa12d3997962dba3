#include "kestrel/models/weights_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "kestrel/core/ascii_lower.h"
#include "kestrel/core/error.h"
#include "kestrel/core/regular_file.h"
#include "kestrel/core/safetensors.h"
#include "kestrel/core/utf8.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/parameter_budget.h"
#include "kestrel/models/state_dict.h"

namespace kestrel::models {
namespace {

constexpr const char* kFormat = "kestrel-yolo-weights-1";

std::string read_text(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(path, ": is a directory, not a model config");
  require_regular_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot read the model config");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

WeightsInfo describe_config(const std::string& cfg_name_or_path, std::vector<std::string> names) {
  const std::string path = resolve_model_config_path(cfg_name_or_path);
  WeightsInfo info;
  info.model_yaml = drop_invalid_utf8(read_text(path)).text;  // as the YAML is read (core/yaml_file.h)
  info.model_name = std::filesystem::path(path).stem().string();
  info.names = std::move(names);
  return info;
}

void save_model_weights(const std::string& path, const YoloModel& model, const WeightsInfo& info) {
  NamedTensors tensors;
  for (auto& [name, t] : state_dict(model))
    tensors.emplace_back(name, at::isFloatingType(t.scalar_type()) ? t.detach().to(at::kFloat) : t.detach());
  std::map<std::string, std::string> metadata = info.extra;
  metadata["format"] = kFormat;
  metadata["model_yaml"] = info.model_yaml;
  metadata["model_name"] = info.model_name;
  metadata["nc"] = std::to_string(info.names.size());
  metadata["names"] = nlohmann::json(info.names).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  save_safetensors(path, tensors, metadata);
}

LoadedModel load_model_weights(const std::string& path) {
  SafetensorsContents file;
  try {
    file = load_safetensors(path);
  } catch (const Error&) {
    // Upstream's detect.py and val.py run .onnx weights (DetectMultiBackend); kestrel runs its own format.
    std::error_code ec;
    if (ascii_lower(std::filesystem::path(path).extension().string()) == ".onnx" && std::filesystem::is_regular_file(path, ec))
      fail(path, ": not a kestrel weights file but (by its name) an ONNX model; kestrel runs .safetensors weights, "
           "ONNX files run in onnxruntime, TensorRT or OpenVINO (docs/deploy.md)");
    throw;
  }
  const auto& m = file.metadata;
  const auto format = m.find("format");
  // A training state (train/training_state.h's format) given for weights: say which file to give.
  if (format != m.end() && format->second == "kestrel-train-state-1")
    fail(path, ": a training state (optimiser, EMA, progress), which `train --resume` reads; the weights of the ",
         "same run are weights/last.safetensors and best.safetensors next to it");
  if (format == m.end() || format->second != kFormat)
    fail(path, ": not a kestrel weights file (no '", kFormat, "' format tag in its metadata)");
  for (const char* key : {"model_yaml", "model_name", "names"})
    if (!m.count(key)) fail(path, ": weights metadata lacks '", key, "'");
  LoadedModel out;
  out.info.model_yaml = m.at("model_yaml");
  out.info.model_name = m.at("model_name");
  try {
    out.info.names = nlohmann::json::parse(m.at("names")).get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": weights metadata 'names' is not a JSON list of strings (", e.what(), ")");
  }
  if (out.info.names.empty()) fail(path, ": weights metadata has no class names");
  if (m.count("nc") && m.at("nc") != std::to_string(out.info.names.size()))
    fail(path, ": weights metadata says nc ", m.at("nc"), " but lists ", out.info.names.size(), " class names");
  // Weights of a diverged run (or damaged bytes) would load and predict nothing, or train on NaN. Checked as
  // the float32 the model holds: an F64 value of 1e300 is infinite there.
  for (const auto& [key, tensor] : file.tensors) {
    if (!at::isFloatingType(tensor.scalar_type())) continue;
    if (!at::isfinite(tensor).all().item<bool>())
      fail(path, ": tensor ", key, " holds NaN or infinite values (saved from a run that diverged, or damaged)");
    if (tensor.scalar_type() == at::kDouble && !at::isfinite(tensor.to(at::kFloat)).all().item<bool>())
      fail(path, ": tensor ", key, " (F64) holds values beyond float32's range, infinite in the model");
  }
  for (const auto& [key, value] : m)
    if (key != "format" && key != "model_yaml" && key != "model_name" && key != "names" && key != "nc")
      out.info.extra[key] = value;
  int64_t file_values = 0;
  for (const auto& [key, tensor] : file.tensors) file_values += tensor.numel();  // each below 2^63 bytes, all in memory
  {
    // A network that matches the file needs as many values as its tensors hold. One much bigger (a config
    // edited to width_multiple 100) is refused before it is allocated; up to twice the file's values (plus
    // a million) it is built, so that the strict load below names the tensors missing or of other shapes.
    ParameterBudget budget(2 * file_values + 1'000'000);
    try {
      // The source name keeps ModelConfig::name() = the original config's stem.
      const ModelConfig cfg = parse_model_config(out.info.model_yaml, out.info.model_name + ".yaml");
      out.model = build_model(cfg, static_cast<int>(out.info.names.size()));
    } catch (const Error& e) {
      if (budget.exceeded())
        fail(path, ": its model config and class names describe a bigger network than its tensors (corrupt, or "
                   "edited by hand): ", e.what());
      fail(path, ": the model config it carries is invalid: ", e.what());
    }
  }
  load_state_dict(*out.model, file.tensors, /*strict=*/true, path);
  return out;
}

}  // namespace kestrel::models
