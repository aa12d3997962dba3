// Helpers of the distributed tests: ranks as threads of the test, each with its own Gloo process group
// over a shared FileStore, and tensor comparisons.
#pragma once
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <ATen/core/Tensor.h>

#include "kestrel/dist/process_group.h"

namespace torch::nn {
class Module;
}

namespace kestrel::test {

// Runs fn(rank) on `world` threads; rethrows the first failure after all have finished.
void run_ranks(int world, const std::function<void(int)>& fn);

// Rank `rank` of a `world`-rank CPU (Gloo) group rendezvousing through a FileStore at `path`.
dist::DistContext file_group(const std::string& path, int rank, int world,
                       std::chrono::seconds timeout = std::chrono::seconds(30));

// ||a - b|| <= tol ||b|| (+ a floor for all-zero tensors).
::testing::AssertionResult close_rel(const at::Tensor& a, const at::Tensor& b, double tol);

// Copies every parameter and buffer of `from` into `to` (same architecture).
void copy_state(torch::nn::Module& from, torch::nn::Module& to);

// Sets environment variables for one test ("" unsets) and restores them afterwards.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::vector<std::pair<std::string, std::string>> vars);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace kestrel::test
