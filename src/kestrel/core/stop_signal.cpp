#include "kestrel/core/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>

namespace kestrel {
namespace {

std::atomic<bool> g_requested{false};
std::atomic<const char*> g_note{""};
std::atomic<int> g_first_from_parent{-1};   // whether the first signal came from the parent process
std::atomic<bool> g_duplicate_seen{false};
int g_depth = 0;  // live instances (made and destroyed on the main thread)

extern "C" void on_stop_signal(int, siginfo_t* info, void*) {
  // A launched rank can get one stop twice: forwarded by the launcher (its parent) and sent to every
  // process of the job by a scheduler (SLURM's scancel, systemd, pkill). One copy from each side is one
  // request; only a further signal means "stop at once".
  const int from_parent = info != nullptr && info->si_code == SI_USER && info->si_pid == ::getppid() ? 1 : 0;
  if (g_requested.exchange(true)) {
    if (from_parent != g_first_from_parent.load() && !g_duplicate_seen.exchange(true)) return;
    std::_Exit(130);
  }
  g_first_from_parent = from_parent;
  const char* note = g_note.load();
  const ssize_t written = ::write(STDERR_FILENO, note, std::strlen(note));  // async-signal-safe
  (void)written;
}

// The handler for `sig`, unless the process was started with it ignored (kept ignored). Returns the old one.
struct sigaction install(int sig) {
  struct sigaction old {}, sa {};
  ::sigaction(sig, nullptr, &old);
  if (sig == SIGINT && old.sa_handler == SIG_IGN) return old;
  sa.sa_sigaction = on_stop_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;  // as std::signal's: a write interrupted by the signal goes on
  sigemptyset(&sa.sa_mask);
  ::sigaction(sig, &sa, nullptr);
  return old;
}

}  // namespace

StopSignal::StopSignal(const char* note) : previous_note_(g_note.load()) {
  g_note = note;
  if (g_depth++ == 0) g_requested = false, g_first_from_parent = -1, g_duplicate_seen = false;
  previous_int_ = install(SIGINT);
  previous_term_ = install(SIGTERM);
}

StopSignal::~StopSignal() {
  ::sigaction(SIGINT, &previous_int_, nullptr);
  ::sigaction(SIGTERM, &previous_term_, nullptr);
  g_note = previous_note_;
  --g_depth;
}

bool StopSignal::requested() { return g_requested; }

}  // namespace kestrel
