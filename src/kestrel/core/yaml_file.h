// Reading YAML files with errors a user can act on: "<file>: <what> file not found",
// "<file>:<line>:<column>: malformed YAML: <reason>".
#pragma once
#include <string>

#include <yaml-cpp/yaml.h>

namespace kestrel {

// `what` names the kind of file in messages ("dataset", "hyperparameter", "model").
YAML::Node load_yaml_file(const std::string& path, const std::string& what);
YAML::Node parse_yaml_text(const std::string& text, const std::string& source);

}  // namespace kestrel
