// Runs a kestrel model's weights through upstream's own network: the weights go out through
// tools/export_state_dict.py, upstream's models/yolo.py Model is built from the same YAML in the given
// checkout (YOLOv5 or YOLOv7) by the upstream Python, loads them by name and runs in eval mode.
#pragma once
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kestrel/models/yolo_model.h"

namespace kestrel::test {

// Upstream's inference output (the decoded [b, N, nc + 5]) for x [b, 3, h, w] (float32, CPU). yaml: the
// model's YAML text; names: its class names (their count is the model's nc). Test assertions fail (and an
// undefined tensor comes back) when the export or the upstream run fails.
at::Tensor upstream_model_output(models::YoloModel& model, const std::string& yaml, const std::vector<std::string>& names,
                                 const std::string& python, const std::string& checkout, const at::Tensor& x);

// kestrel's own inference output for x against upstream's: boxes within 1e-3 px, scores within 1e-5.
void expect_matches_upstream(models::YoloModel& model, const std::string& yaml, const std::vector<std::string>& names,
                             const std::string& python, const std::string& checkout, const at::Tensor& x);

}  // namespace kestrel::test
