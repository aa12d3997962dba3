// Helpers shared by the tests: temporary folders, running Python cross-checks and the kestrel binary.
#pragma once
#include <functional>
#include <string>

namespace kestrel::test {

// A fresh folder under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void write_file(const std::string& path, const std::string& text);

// The message of the kestrel::Error that f() throws; "" when it throws none (other exceptions pass).
std::string error_message(const std::function<void()>& f);

// The first `images` (1..5) demo training images and their labels under dir/images/train and
// dir/labels/train, and dir/tiny.yaml using them as both train and val split (the demo's class
// names). Returns the YAML's path. Paths are relative to the working directory (the source tree).
std::string demo_subset(const TempDir& dir, int images);

struct CommandResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};
CommandResult run_command(const std::string& command);

// Runs `script` with the project's Python (the one with torch, numpy, safetensors, pycocotools ...).
CommandResult run_python(const std::string& script);
std::string kestrel_binary();

}  // namespace kestrel::test
