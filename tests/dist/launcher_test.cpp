// The local launcher (`kestrel train --nproc-per-node N`): exit codes, stopping the other ranks when
// one fails, and each rank bound to its own CPUs. The ranks are this test binary re-executed with
// --gtest_filter=DistLauncherChild.ExitWithRankCode.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
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
  if (std::string(mode).rfind("stopped:", 0) == 0) {  // both saved and stopped (Ctrl-C handled); rank 1 later
    if (e.rank == 1) {
      std::this_thread::sleep_for(500ms);
      std::ofstream(std::string(mode).substr(8) + "/rank1-stopped") << "1\n";
    }
    std::_Exit(130);
  }
  if (std::string(mode) == "sigint") {  // rank 1 dies of SIGINT before a handler is set: it saved nothing
    if (e.rank == 0) std::this_thread::sleep_for(60s);
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
  if (std::string(mode).rfind("term-then-fail:", 0) == 0) {  // a Ctrl-C forwarded to ranks that go on, then rank 1 fails
    std::signal(SIGTERM, SIG_IGN);
    const std::string ready = std::string(mode).substr(15) + "/rank0-ignores-sigterm";
    if (e.rank == 0) {
      std::ofstream(ready) << "1\n";
      std::this_thread::sleep_for(60s);
    }
    for (int i = 0; i < 300 && !std::ifstream(ready); ++i) std::this_thread::sleep_for(100ms);
    ::kill(::getppid(), SIGTERM);  // the launcher forwards it to both
    std::this_thread::sleep_for(500ms);
    std::_Exit(4);
  }
  if (std::string(mode).rfind("orphan:", 0) == 0) {  // writes its pid, then waits to be stopped
    std::ofstream(std::string(mode).substr(7) + "/rank" + std::to_string(e.rank)) << ::getpid() << "\n";
    std::this_thread::sleep_for(60s);
  }
  if (std::string(mode).rfind("sigint-disposition:", 0) == 0) {  // what the rank starts with for Ctrl-C
    struct sigaction now {};
    ::sigaction(SIGINT, nullptr, &now);
    std::ofstream(std::string(mode).substr(19) + "/rank" + std::to_string(e.rank))
        << (now.sa_handler == SIG_IGN ? "ignored" : "default") << "\n";
  }
  if (std::string(mode).rfind("affinity:", 0) == 0) {
    // Writes "bound|unbound <OMP_NUM_THREADS>: <cpu> <cpu> ..." for the parent test to check.
    std::ofstream out(std::string(mode).substr(9) + "/rank" + std::to_string(e.rank));
    const char* omp = std::getenv("OMP_NUM_THREADS");
    out << (cpus_bound_by_launcher() ? "bound " : "unbound ") << (omp ? omp : "unset") << ":";
    for (int c : allowed_cpus()) out << " " << c;
    out << "\n";
  }
  std::_Exit(0);
}

// Runs the launcher itself in a process of its own (this binary re-executed), for a test to kill it.
TEST(DistLauncherChild, RunLauncher) {
  const char* mode = std::getenv("KESTREL_LAUNCHER_PARENT_TEST");
  if (mode == nullptr) GTEST_SKIP() << "only runs under DistLauncher tests";
  ScopedEnv env({{"KESTREL_LAUNCHER_TEST", mode}, {"KESTREL_LAUNCHER_PARENT_TEST", ""}, {"WORLD_SIZE", ""}, {"MASTER_PORT", ""}});
  std::_Exit(launch_local(2, {"kestrel_tests", "--gtest_filter=DistLauncherChild.ExitWithRankCode"}));
}

int launch_child(const std::string& mode) {
  ScopedEnv env({{"KESTREL_LAUNCHER_TEST", mode}, {"WORLD_SIZE", ""}, {"MASTER_PORT", ""}});
  return launch_local(2, {"kestrel_tests", "--gtest_filter=DistLauncherChild.ExitWithRankCode"});
}

TEST(DistLauncher, AllRanksSucceed) { EXPECT_EQ(launch_child("ok"), 0); }

// A MASTER_PORT that is not a port is refused by name (atoi made "abc" port 0), before any rank starts.
TEST(DistLauncher, MalformedMasterPortIsRefused) {
  for (const char* port : {"abc", "0", "65536", "29500x"}) {
    ScopedEnv env({{"KESTREL_LAUNCHER_TEST", "ok"}, {"WORLD_SIZE", ""}, {"MASTER_PORT", port}});
    const std::string message = test::error_message(
        [] { launch_local(2, {"kestrel_tests", "--gtest_filter=DistLauncherChild.ExitWithRankCode"}); });
    EXPECT_NE(message.find(std::string("MASTER_PORT=") + port + ": expected a port number in [1, 65535]"), std::string::npos)
        << port << ": " << message;
  }
}

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
    // Marked as bound, so that --bind-cores takes the rank's mask as its share (and does not split it again).
    EXPECT_EQ(omp_threads, "bound " + std::to_string(cpus.size())) << "rank " << r;
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

// A rank killed by SIGINT (exit status 128 + 2, as a rank that saved and stopped reports 130) is a
// failure: the other rank is stopped at once, not left waiting for it in a collective.
TEST(DistLauncher, ARankKilledBySigintIsAFailure) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(launch_child("sigint"), 130);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  // Both stopped by themselves: 130, and rank 1 is not killed when rank 0 reports its stop first.
  test::TempDir dir;
  EXPECT_EQ(launch_child("stopped:" + dir.path()), 130);
  EXPECT_TRUE(std::filesystem::exists(dir.file("rank1-stopped")));
}

// A launcher started with Ctrl-C ignored (a script's background job) starts its ranks with it ignored, as a
// single process keeps ignoring it; otherwise they start with the default (their StopSignal handles it).
TEST(DistLauncher, CtrlCIgnoredAtStartStaysIgnoredInTheRanks) {
  test::TempDir dir;
  for (const bool ignored : {true, false}) {
    struct sigaction before {}, set {};
    set.sa_handler = ignored ? SIG_IGN : SIG_DFL;
    sigemptyset(&set.sa_mask);
    ::sigaction(SIGINT, &set, &before);
    EXPECT_EQ(launch_child("sigint-disposition:" + dir.path()), 0);
    ::sigaction(SIGINT, &before, nullptr);
    for (int r = 0; r < 2; ++r) {
      std::ifstream in(dir.file("rank" + std::to_string(r)));
      std::string disposition;
      in >> disposition;
      EXPECT_EQ(disposition, ignored ? "ignored" : "default") << "rank " << r;
    }
  }
}

// After a forwarded Ctrl-C the ranks go on to their next step; one that fails then still gets the
// others stopped.
TEST(DistLauncher, StopsTheOthersWhenOneFailsAfterACtrlC) {
  const auto start = std::chrono::steady_clock::now();
  test::TempDir dir;
  EXPECT_EQ(launch_child("term-then-fail:" + dir.path()), 4);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
}

bool process_gone(pid_t pid) {  // exited (a zombie counts: it runs no more)
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return true;
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && (text[paren + 2] == 'Z' || text[paren + 2] == 'X');
}

// A launcher killed outright (SIGKILL: no handler runs) takes its ranks with it; none is left orphaned.
TEST(DistLauncher, RanksDoNotOutliveTheLauncher) {
  test::TempDir dir;
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  ASSERT_GT(n, 0);
  exe[n] = '\0';
  const std::string mode = "KESTREL_LAUNCHER_PARENT_TEST=orphan:" + dir.path();
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    ::putenv(const_cast<char*>(mode.c_str()));
    char filter[] = "--gtest_filter=DistLauncherChild.RunLauncher";
    char* args[] = {exe, filter, nullptr};
    ::execv(exe, args);
    ::_exit(127);
  }
  std::vector<pid_t> ranks;
  for (int wait = 0; wait < 300 && ranks.size() < 2; ++wait) {  // up to 30 s for both ranks to start
    std::this_thread::sleep_for(100ms);
    ranks.clear();
    for (int r = 0; r < 2; ++r) {
      std::ifstream in(dir.file("rank" + std::to_string(r)));
      pid_t pid = 0;
      if (in >> pid) ranks.push_back(pid);
    }
  }
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);
  ASSERT_EQ(ranks.size(), 2u) << "the ranks did not start";
  bool gone = false;
  for (int wait = 0; wait < 100 && !gone; ++wait) {  // up to 10 s
    std::this_thread::sleep_for(100ms);
    gone = process_gone(ranks[0]) && process_gone(ranks[1]);
  }
  EXPECT_TRUE(gone) << "ranks " << ranks[0] << " and " << ranks[1] << " outlived their launcher";
  for (pid_t pid : ranks)
    if (!process_gone(pid)) ::kill(pid, SIGKILL);
}

}  // namespace
}  // namespace kestrel::dist
