// load_model_weights on an arbitrary file (what --weights reads) up to the model: the safetensors
// reader, the metadata (format tag, model YAML, class names) and the embedded YAML through the real
// parse_model_config. build_model and the state-dict functions are stubs (building the network would pull
// in all of models/ and most inputs would fail there on the tensors anyway): reaching build_model ends
// the input, which must then have a config and at least one class name. Errors must be kestrel::Error
// naming the file. Inputs starting with '{' are a header JSON alone (fuzz_util.h). Seed: weights.json,
// the metadata of a yolov5n weights file with a small model YAML.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "kestrel/models/state_dict.h"
#include "kestrel/models/weights_file.h"

using namespace kestrel;

namespace {
struct ReachedBuild {
  int nc;
};
}  // namespace

namespace kestrel::models {
std::shared_ptr<YoloModel> build_model(const ModelConfig& cfg, int nc) {
  if (cfg.layers.empty()) fuzz::finding("a model config without layers reached build_model");
  throw ReachedBuild{nc};
}
NamedTensors state_dict(const torch::nn::Module&) { std::abort(); }
LoadReport load_state_dict(torch::nn::Module&, const NamedTensors&, bool, const std::string&) { std::abort(); }
}  // namespace kestrel::models

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::scratch_file("weights", ".safetensors");
  fuzz::write_safetensors_input(path, data, size);
  fuzz::expect_kestrel_errors_only(path, [&] {
    try {
      models::load_model_weights(path);
      fuzz::finding("load_model_weights returned without building a model");
    } catch (const ReachedBuild& r) {
      if (r.nc < 1) fuzz::finding("build_model reached with no classes");
    }
  });
  return 0;
}
