// Reading YAML files with errors a user can act on: "<file>: <what> file not found",
// "<file>:<line>:<column>: malformed YAML: <reason>".
#pragma once
#include <string>

#include <yaml-cpp/yaml.h>

namespace kestrel {

// `what` names the kind of file in messages ("dataset", "hyperparameter", "model").
YAML::Node load_yaml_file(const std::string& path, const std::string& what);
YAML::Node parse_yaml_text(const std::string& text, const std::string& source);

// A float as PyYAML's safe_dump writes it (upstream's hyp.yaml, hyp_evolve.yaml): Python's repr, the shortest
// text that reads back as the same double, with ".0" before an exponent without a point (PyYAML reads
// "5e-05" as a string but "5.0e-05" as a float) and .nan / .inf / -.inf.
std::string yaml_float(double v);

}  // namespace kestrel
