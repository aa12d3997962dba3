// StopSignal: a signal while one lives is a request, not an exit; nested instances (an evolution's
// trainings) keep an outer request; the handlers found are restored; Ctrl-C ignored at start stays ignored.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <thread>

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

// A system call that the signal interrupts goes on (SA_RESTART, as std::signal's handlers): a thread blocked
// reading a pipe gets its data, not EINTR, so Ctrl-C does not break a loader's or writer's I/O mid-call.
TEST(StopSignal, InterruptedSystemCallsRestart) {
  using namespace std::chrono_literals;
  const auto before = std::signal(SIGTERM, SIG_DFL);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  {
    StopSignal stop("");
    ssize_t got = 0;
    int error = 0;
    char byte = 0;
    std::atomic<bool> started{false};
    std::thread reader([&] {
      started = true;
      got = ::read(fds[0], &byte, 1);
      error = errno;
    });
    while (!started) std::this_thread::yield();
    std::this_thread::sleep_for(200ms);  // blocked in read() by now
    ::pthread_kill(reader.native_handle(), SIGTERM);
    std::this_thread::sleep_for(200ms);
    ASSERT_EQ(::write(fds[1], "x", 1), 1);
    reader.join();
    EXPECT_EQ(got, 1) << "the read ended with errno " << error;
    EXPECT_EQ(byte, 'x');
    EXPECT_TRUE(StopSignal::requested()) << "the signal reached the handler";
  }
  ::close(fds[0]);
  ::close(fds[1]);
  std::signal(SIGTERM, before);
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

// A child with a StopSignal, the test its parent (as the launcher is a rank's). `steps` runs in the child
// after the parent's first SIGTERM has been seen; the child reports progress through the pipe and ends with
// 0 if it is still alive after them. Returns the child's exit status and what it wrote.
std::pair<int, std::string> child_run(void (*steps)(int fd), int parent_signals) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    StopSignal stop("");
    (void)!::write(fds[1], "r", 1);  // ready
    while (!StopSignal::requested()) ::usleep(1000);
    (void)!::write(fds[1], "s", 1);  // stop requested
    steps(fds[1]);
    for (int i = 0; i < 2000; ++i) ::usleep(1000);  // time for the parent's further signals
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string seen;
  char c = 0;
  EXPECT_EQ(::read(fds[0], &c, 1), 1);  // ready
  seen += c;
  ::kill(pid, SIGTERM);  // from the parent
  EXPECT_EQ(::read(fds[0], &c, 1), 1);  // stop requested
  seen += c;
  for (int i = 1; i < parent_signals; ++i) ::kill(pid, SIGTERM);
  while (::read(fds[0], &c, 1) == 1) seen += c;
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, seen};
}

// The same stop from the launcher (the parent) and from elsewhere (a scheduler signalling every process
// of the job) is one request; a further signal exits at once with 130, as does a second from one side.
TEST(StopSignal, OneStopFromTheParentAndFromElsewhereCountsOnce) {
  const auto [survived, seen] = child_run([](int fd) {
    std::raise(SIGTERM);  // not from the parent: the duplicate, ignored
    (void)!::write(fd, "d", 1);
    std::raise(SIGTERM);  // a further one: at once
    (void)!::write(fd, "x", 1);
  }, 1);
  EXPECT_EQ(survived, 130);
  EXPECT_EQ(seen, "rsd");
  const auto [twice, seen_twice] = child_run([](int) {}, 2);  // two from the parent (Ctrl-C twice, forwarded)
  EXPECT_EQ(twice, 130);
  EXPECT_EQ(seen_twice, "rs");
}

}  // namespace
}  // namespace kestrel
