// Helpers shared by the tests: temporary folders, running Python cross-checks and the kestrel binary.
#pragma once
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <ATen/record_function.h>

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

// YAML lines a1 .. a<levels>: a1 a list of nine 1s, each next one a list of nine aliases of the one before
// (9^levels values in a few lines).
std::string yaml_alias_bomb(int levels);

struct CommandResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};
CommandResult run_command(const std::string& command);

// Runs `script` with the project's Python (the one with torch, numpy, safetensors, pycocotools ...).
CommandResult run_python(const std::string& script);
std::string kestrel_binary();

// While alive: cuDNN convolves float32 exactly and alike run after run — deterministic algorithms, no
// autotuning, no TF32 (which LibTorch allows in cuDNN by default: 10-bit mantissas, differences ~1e-3).
// For comparisons of two CUDA runs, or of CUDA against the CPU. The previous settings come back after.
class ExactCudnn {
 public:
  ExactCudnn();
  ~ExactCudnn();
  ExactCudnn(const ExactCudnn&) = delete;
  ExactCudnn& operator=(const ExactCudnn&) = delete;

 private:
  bool deterministic_, benchmark_, tf32_;
};

// Every ATen op dispatched while alive, in any thread: its name, the outermost op it ran inside (the op
// the calling code called) and the thread. One recorder at a time.
class OpRecorder {
 public:
  struct Call {
    std::string op, outermost;
    std::thread::id thread;
  };
  OpRecorder();
  ~OpRecorder();
  OpRecorder(const OpRecorder&) = delete;
  OpRecorder& operator=(const OpRecorder&) = delete;
  std::vector<Call> calls() const;
  bool saw(const std::string& op) const;

 private:
  at::CallbackHandle handle_;
};

}  // namespace kestrel::test
