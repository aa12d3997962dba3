#include "dist/dist_test_support.h"

#include <cstdlib>
#include <exception>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/nn/module.h>

namespace kestrel::test {

void run_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

dist::DistContext file_group(const std::string& path, int rank, int world, std::chrono::seconds timeout) {
  auto store = c10::make_intrusive<c10d::FileStore>(path, world);
  return dist::init_with_store(store, rank, world, rank, c10::Device(c10::kCPU), timeout);
}

::testing::AssertionResult close_rel(const at::Tensor& a, const at::Tensor& b, double tol) {
  const double diff = (a - b).norm().item<double>(), ref = b.norm().item<double>();
  if (diff <= tol * ref + 1e-12) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative difference " << diff / std::max(ref, 1e-30) << " (|b| " << ref << ")";
}

void copy_state(torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard g;
  auto pf = from.parameters(), pt = to.parameters();
  for (size_t i = 0; i < pf.size(); ++i) pt[i].copy_(pf[i]);
  auto bf = from.buffers(), bt = to.buffers();
  for (size_t i = 0; i < bf.size(); ++i) bt[i].copy_(bf[i]);
}

ScopedEnv::ScopedEnv(std::vector<std::pair<std::string, std::string>> vars) {
  for (auto& [k, v] : vars) {
    const char* old = std::getenv(k.c_str());
    saved_.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
    if (v.empty()) ::unsetenv(k.c_str());
    else ::setenv(k.c_str(), v.c_str(), 1);
  }
}

ScopedEnv::~ScopedEnv() {
  for (auto& [k, v] : saved_) {
    if (v) ::setenv(k.c_str(), v->c_str(), 1);
    else ::unsetenv(k.c_str());
  }
}

}  // namespace kestrel::test
