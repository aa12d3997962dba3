// The local launcher (`kestrel train --nproc-per-node N`): exit codes, stopping the other ranks when
// one fails, and each rank bound to its own CPUs. The ranks are this test binary re-executed with
// --gtest_filter=DistLauncherChild.ExitWithRankCode.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "dist/dist_test_support.h"
#include "kestrel/dist/launcher.h"
#include "kestrel/dist/process_group.h"
#include "test_support.h"

namespace kestrel::dist {
namespace {

using namespace std::chrono_literals;
using test::ScopedEnv;

TEST(DistLauncher, SplitCpusIntoContiguousRanges) {
  const auto r = split_cpus({0, 1, 2, 3, 4}, 2);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(r[1], (std::vector<int>{3, 4}));
  const auto odd = split_cpus({2, 5, 7, 9}, 4);
  EXPECT_EQ(odd[3], (std::vector<int>{9}));
  const auto too_few = split_cpus({0}, 2);
  EXPECT_TRUE(too_few[0].empty() && too_few[1].empty());
}

// Launched by DistLauncher.* (this test binary re-executed per rank): rank 1 exits with 3 after
// checking its environment; others exit 0. Skipped in a normal test run.
TEST(DistLauncherChild, ExitWithRankCode) {
  const char* mode = std::getenv("KESTREL_LAUNCHER_TEST");
  if (mode == nullptr) GTEST_SKIP() << "only runs under DistLauncher tests";
  const DistEnv e = read_env();
  const bool env_ok = e.world_size == 2 && e.local_rank == e.rank && e.master_addr == "127.0.0.1" && e.master_port > 0;
  if (!env_ok) std::_Exit(9);
  if (std::string(mode) == "fail" && e.rank == 1) std::_Exit(3);
  if (std::string(mode) == "hang" && e.rank == 0) {
    std::this_thread::sleep_for(60s);  // stopped by the launcher when rank 1 fails
  }
  if (std::string(mode) == "hang" && e.rank == 1) std::_Exit(4);
  if (std::string(mode).rfind("affinity:", 0) == 0) {
    // Writes "<OMP_NUM_THREADS>: <cpu> <cpu> ..." for the parent test to check.
    std::ofstream out(std::string(mode).substr(9) + "/rank" + std::to_string(e.rank));
    const char* omp = std::getenv("OMP_NUM_THREADS");
    out << (omp ? omp : "unset") << ":";
    for (int c : allowed_cpus()) out << " " << c;
    out << "\n";
  }
  std::_Exit(0);
}

int launch_child(const std::string& mode) {
  ScopedEnv env({{"KESTREL_LAUNCHER_TEST", mode}, {"WORLD_SIZE", ""}, {"MASTER_PORT", ""}});
  return launch_local(2, {"kestrel_tests", "--gtest_filter=DistLauncherChild.ExitWithRankCode"});
}

TEST(DistLauncher, AllRanksSucceed) { EXPECT_EQ(launch_child("ok"), 0); }

TEST(DistLauncher, ReturnsTheFailingRanksExitCode) { EXPECT_EQ(launch_child("fail"), 3); }

// Each rank runs on its own share of this process's CPUs with one OpenMP thread per CPU.
TEST(DistLauncher, BindsEachRankToItsOwnCpus) {
  const std::vector<int> mine = allowed_cpus();
  if (mine.size() < 2) GTEST_SKIP() << "needs 2 CPUs";
  test::TempDir dir;
  ScopedEnv omp({{"OMP_NUM_THREADS", ""}, {"KESTREL_CPU_BIND", ""}});
  ASSERT_EQ(launch_child("affinity:" + dir.path()), 0);
  std::vector<int> all;
  size_t smallest = mine.size(), largest = 0;
  for (int r = 0; r < 2; ++r) {
    std::ifstream in(dir.file("rank" + std::to_string(r)));
    std::string omp_threads;
    ASSERT_TRUE(std::getline(in, omp_threads, ':')) << "rank " << r << " wrote nothing";
    std::vector<int> cpus;
    for (int c; in >> c;) cpus.push_back(c);
    ASSERT_FALSE(cpus.empty());
    EXPECT_EQ(omp_threads, std::to_string(cpus.size())) << "rank " << r;
    smallest = std::min(smallest, cpus.size());
    largest = std::max(largest, cpus.size());
    all.insert(all.end(), cpus.begin(), cpus.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, mine) << "the ranks' CPUs should partition the launcher's";
  EXPECT_LE(largest - smallest, 1u);
}

TEST(DistLauncher, StopsTheOthersWhenOneFails) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(launch_child("hang"), 4);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
}

}  // namespace
}  // namespace kestrel::dist
