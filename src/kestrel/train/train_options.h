// The training options a run saves: opt.yaml (for people, upstream's file) and the JSON inside the
// training-state file (what --resume reads back). One table lists the saved fields and their names.
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "kestrel/train/trainer.h"

namespace kestrel::train {

nlohmann::json options_json(const TrainOptions& o);
// Fails naming `source` when a key of the first state format is missing or has the wrong type; keys
// added later (noautoanchor, sync_bn, quad, ...) keep their defaults when absent. resume, quiet and
// interrupt_after are not saved.
TrainOptions options_from_json(const nlohmann::json& j, const std::string& source);
std::string options_yaml(const TrainOptions& o);  // "key: value" lines, upstream's opt.yaml

}  // namespace kestrel::train
