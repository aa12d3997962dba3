// One YAML text read as each of kestrel's YAML files: dataset (load_dataset_config), hyperparameters
// (augment_options_from_yaml) and model (load_model_config). Only kestrel::Error naming the file may come out.
#include <cmath>
#include <cstdint>
#include <string>

#include <yaml-cpp/yaml.h>

#include "fuzz_util.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/core/yaml_file.h"
#include "kestrel/data/hyp.h"
#include "kestrel/models/model_config.h"

using namespace kestrel;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::scratch_file("yaml", ".yaml");
  fuzz::write_file(path, data, size);
  fuzz::expect_kestrel_errors_only(path, [&] {
    const data::DatasetConfig cfg = data::load_dataset_config(path);
    if (cfg.nc < 1 || static_cast<size_t>(cfg.nc) != cfg.names.size()) fuzz::finding("dataset nc disagrees with names");
    if (cfg.train.empty() || cfg.val.empty()) fuzz::finding("dataset without train or val");
  });
  fuzz::expect_kestrel_errors_only(path, [&] {
    const YAML::Node root = load_yaml_file(path, "hyperparameter");
    if (!root.IsMap()) return;  // train::load_hyperparameters refuses it (a mapping of key: value)
    const data::AugmentOptions o = data::augment_options_from_yaml(root, path);
    for (double v : {o.hsv_h, o.hsv_s, o.hsv_v, o.degrees, o.translate, o.scale, o.shear, o.perspective, o.flipud,
                     o.fliplr, o.mosaic, o.mosaic9, o.mixup, o.copy_paste, o.paste_in})
      if (!(v >= 0) || !std::isfinite(v)) fuzz::finding("augment option negative or not finite");
  });
  fuzz::expect_kestrel_errors_only(path, [&] {
    const models::ModelConfig cfg = models::load_model_config(path);
    if (cfg.nc < 1 || cfg.layers.empty()) fuzz::finding("model config without nc or layers");
    // what the builder relies on
    if (cfg.channel_multiple < 1 || cfg.ch < 1) fuzz::finding("model channel_multiple or ch below 1");
    if (!(cfg.depth_multiple > 0 && std::isfinite(cfg.depth_multiple) && cfg.width_multiple > 0 &&
          std::isfinite(cfg.width_multiple)))
      fuzz::finding("model depth/width multiple not finite > 0");
    for (size_t i = 0; i < cfg.layers.size(); ++i)
      for (int f : cfg.layers[i].from)
        if (f >= static_cast<int>(i) || (f < 0 && static_cast<int>(i) + f < (i == 0 ? -1 : 0)))
          fuzz::finding("layer 'from' out of range");
  });
  return 0;
}
