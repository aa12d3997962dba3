// bench/gpu/run.sh is what a GPU session runs, once, with minutes to spare: a flag renamed in kestrel but
// not in the script would cost that session. Its cpu-check mode runs every step here, on the CPU at toy
// sizes, with this build's binaries; each step must exit 0.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.h"

namespace kestrel {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Lines of `text` that start with `prefix`.
int count_lines_starting(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.rfind(prefix, 0) == 0;
  return n;
}

std::string this_executable() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

TEST(GpuRunScript, EveryStepRunsOnTheCpuAtToySizes) {
  test::TempDir dir;
  const std::string out = dir.file("out");
  const test::CommandResult r = test::run_command(
      "OUT=" + out + " RUNS=" + dir.file("runs") + " K=" + test::kestrel_binary() + " T=" + this_executable() +
      " BUDGET=900 bash bench/gpu/run.sh cpu-check");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("skipped for time: none"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("MISSING LIBRARIES"), std::string::npos) << r.output;

  // What comes back from the device tool (at most 8 files): the packed logs and their summary, nothing else.
  std::vector<std::string> returned;
  for (const auto& entry : std::filesystem::directory_iterator(out)) returned.push_back(entry.path().filename().string());
  std::sort(returned.begin(), returned.end());
  EXPECT_EQ(returned, (std::vector<std::string>{"figures.tgz", "summary.txt"}));
  const std::string logs_dir = dir.file("logs");
  ASSERT_EQ(test::run_command("mkdir -p " + logs_dir + " && tar xzf " + out + "/figures.tgz -C " + logs_dir).exit_code, 0);

  // The script's top-level steps (indented ones need TensorRT), each run once and each exiting 0.
  const int steps = count_lines_starting(read_text("bench/gpu/run.sh"), "run_step ");
  ASSERT_GE(steps, 10);
  std::string logs;
  for (const char* file : {"env", "cuda_tests", "train_graph", "ablation_yolov5s", "bench_models", "bench_e2e",
                           "bench_data", "allocator", "train_e2e", "train_autobatch"}) {
    logs += read_text(logs_dir + "/" + file + ".txt");
  }
  EXPECT_EQ(count_lines_starting(logs, "=== "), steps) << logs;
  EXPECT_EQ(count_lines_starting(logs, "exit 0 after"), steps) << logs;
  // The summary, printed last, has every step's header and exit.
  const std::string summary = read_text(out + "/summary.txt");
  EXPECT_EQ(count_lines_starting(summary, "=== "), steps) << summary;
  EXPECT_EQ(count_lines_starting(summary, "exit 0 after"), steps) << summary;
  EXPECT_NE(r.output.rfind("===== summary"), std::string::npos);
  EXPECT_NE(summary.find("skipped for time: none"), std::string::npos) << summary;
  // The training run's weights were exported for TensorRT both ways (--end2end, --include-nms).
  EXPECT_EQ(count_lines_starting(read_text(logs_dir + "/trt_end2end.txt"), "ONNX: export success"), 2) << r.output;
}

}  // namespace
}  // namespace kestrel
