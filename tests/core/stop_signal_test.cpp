// StopSignal: a signal while one lives is a request, not an exit; nested instances (an evolution's
// trainings) keep an outer request; the handlers found are restored; Ctrl-C ignored at start stays ignored.
#include <gtest/gtest.h>

#include <csignal>

#include "kestrel/core/stop_signal.h"

namespace kestrel {
namespace {

TEST(StopSignal, ASignalIsARequestAndNestedInstancesKeepIt) {
  const auto before = std::signal(SIGTERM, SIG_DFL);
  {
    StopSignal outer("");
    EXPECT_FALSE(StopSignal::requested());
    std::raise(SIGTERM);  // handled: the process goes on
    EXPECT_TRUE(StopSignal::requested());
    {
      StopSignal inner("");  // a training inside an evolution
      EXPECT_TRUE(StopSignal::requested()) << "an inner instance must not clear the outer request";
    }
    EXPECT_TRUE(StopSignal::requested());
  }
  {
    StopSignal next("");
    EXPECT_FALSE(StopSignal::requested()) << "a new outermost instance starts clear";
  }
  EXPECT_EQ(std::signal(SIGTERM, before), SIG_DFL) << "the handler found is restored";
}

TEST(StopSignal, IgnoredCtrlCStaysIgnored) {
  const auto before = std::signal(SIGINT, SIG_IGN);  // a script's background job
  {
    StopSignal stop("");
    std::raise(SIGINT);
    EXPECT_FALSE(StopSignal::requested());
  }
  EXPECT_EQ(std::signal(SIGINT, before), SIG_IGN);
}

}  // namespace
}  // namespace kestrel
