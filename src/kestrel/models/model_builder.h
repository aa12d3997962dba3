// The network a model YAML describes: upstream's parse_model, for the YOLOv3/v5/v7 module set.
#pragma once
#include <memory>

#include "kestrel/models/model_config.h"
#include "kestrel/models/yolo_model.h"

namespace kestrel::models {

// Builds the network the config describes (upstream's parse_model), probes its strides with a
// 256 x 256 image, orders and scales anchors and sets the head's bias priors. nc > 0 overrides the
// config's class count (as upstream does with a dataset's nc). Errors name the file, line and layer.
std::shared_ptr<YoloModel> build_model(const ModelConfig& cfg, int nc = 0);

}  // namespace kestrel::models
