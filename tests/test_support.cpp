#include "test_support.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <memory>
#include <mutex>

#include <ATen/Context.h>

#include "kestrel/core/error.h"

namespace kestrel::test {

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "kestrel-test-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string demo_subset(const TempDir& dir, int images) {
  namespace fs = std::filesystem;
  static const char* const kStems[] = {"000000000025", "000000000030", "000000000036", "000000000042", "000000000049"};
  if (images < 1 || images > 5) throw std::invalid_argument("demo_subset: 1..5 images");
  fs::create_directories(dir.file("images/train"));
  fs::create_directories(dir.file("labels/train"));
  for (int i = 0; i < images; ++i) {
    const std::string stem = kStems[i];
    fs::copy_file("data/demo/images/train/" + stem + ".jpg", dir.file("images/train/" + stem + ".jpg"),
                  fs::copy_options::overwrite_existing);
    fs::copy_file("data/demo/labels/train/" + stem + ".txt", dir.file("labels/train/" + stem + ".txt"),
                  fs::copy_options::overwrite_existing);
  }
  std::ifstream demo("data/demo/demo.yaml");
  std::string line, names;
  bool in_names = false;
  while (std::getline(demo, line)) {
    if (line.rfind("nc:", 0) == 0) in_names = true;
    if (in_names) names += line + "\n";
  }
  write_file(dir.file("tiny.yaml"), "path: " + dir.path() + "\ntrain: images/train\nval: images/train\n" + names);
  return dir.file("tiny.yaml");
}

CommandResult run_command(const std::string& command) {
  std::string full = command + " 2>&1";
  FILE* pipe = ::popen(full.c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  std::string output;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

CommandResult run_python(const std::string& script) {
  TempDir dir;
  write_file(dir.file("check.py"), script);
  return run_command(std::string(KESTREL_TEST_PYTHON) + " " + dir.file("check.py"));
}

std::string kestrel_binary() { return KESTREL_KESTREL_BINARY; }

ExactCudnn::ExactCudnn()
    : deterministic_(at::globalContext().deterministicCuDNN()),
      benchmark_(at::globalContext().benchmarkCuDNN()),
      tf32_(at::globalContext().allowTF32CuDNN()) {
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
  at::globalContext().setAllowTF32CuDNN(false);
}

ExactCudnn::~ExactCudnn() {
  at::globalContext().setDeterministicCuDNN(deterministic_);
  at::globalContext().setBenchmarkCuDNN(benchmark_);
  at::globalContext().setAllowTF32CuDNN(tf32_);
}

namespace {
std::mutex recorded_mutex;
std::vector<OpRecorder::Call> recorded;
thread_local std::vector<std::string> open_ops;  // this thread's ops being dispatched, outermost first

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn) {
  open_ops.emplace_back(fn.name());
  std::lock_guard<std::mutex> lock(recorded_mutex);
  recorded.push_back({fn.name(), open_ops.front(), std::this_thread::get_id()});
  return nullptr;
}
void on_op_end(const at::RecordFunction&, at::ObserverContext*) {
  if (!open_ops.empty()) open_ops.pop_back();
}
}  // namespace

OpRecorder::OpRecorder() {
  {
    std::lock_guard<std::mutex> lock(recorded_mutex);
    recorded.clear();
  }
  handle_ = at::addGlobalCallback(
      at::RecordFunctionCallback(&on_op_start, &on_op_end).scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}

OpRecorder::~OpRecorder() { at::removeCallback(handle_); }

std::vector<OpRecorder::Call> OpRecorder::calls() const {
  std::lock_guard<std::mutex> lock(recorded_mutex);
  return recorded;
}

bool OpRecorder::saw(const std::string& op) const {
  for (const Call& call : calls())
    if (call.op == op) return true;
  return false;
}

std::string yaml_alias_bomb(int levels) {
  std::string bomb = "a1: &a1 [1,1,1,1,1,1,1,1,1]\n";
  for (int level = 2; level <= levels; ++level) {
    const std::string prev = "*a" + std::to_string(level - 1);
    bomb += "a" + std::to_string(level) + ": &a" + std::to_string(level) + " [" + prev;
    for (int k = 1; k < 9; ++k) bomb += "," + prev;
    bomb += "]\n";
  }
  return bomb;
}

}  // namespace kestrel::test
