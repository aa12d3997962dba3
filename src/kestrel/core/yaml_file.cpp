#include "kestrel/core/yaml_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kestrel/core/error.h"
#include "kestrel/core/regular_file.h"

namespace kestrel {

YAML::Node parse_yaml_text(const std::string& text, const std::string& source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    fail(source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": malformed YAML: ", e.msg);
  }
}

YAML::Node load_yaml_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail(path, ": ", what, " file not found");
  if (std::filesystem::is_directory(path, ec)) fail(path, ": is a directory, expected a ", what, " YAML file");
  require_regular_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return parse_yaml_text(text.str(), path);
}

}  // namespace kestrel
