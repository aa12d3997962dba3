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
// "key: value" lines, upstream's opt.yaml: the options, then the run folder as train.py's opt.save_dir.
std::string options_yaml(const TrainOptions& o, const std::string& save_dir = "");

}  // namespace kestrel::train
