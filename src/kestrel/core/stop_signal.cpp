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
int g_depth = 0;  // live instances (made and destroyed on the main thread)

extern "C" void on_stop_signal(int) {
  if (g_requested.exchange(true)) std::_Exit(130);
  const char* note = g_note.load();
  const ssize_t written = ::write(STDERR_FILENO, note, std::strlen(note));  // async-signal-safe
  (void)written;
}

}  // namespace

StopSignal::StopSignal(const char* note) : previous_note_(g_note.load()) {
  g_note = note;
  if (g_depth++ == 0) g_requested = false;
  previous_int_ = std::signal(SIGINT, on_stop_signal);
  if (previous_int_ == SIG_IGN) std::signal(SIGINT, SIG_IGN);
  previous_term_ = std::signal(SIGTERM, on_stop_signal);
}

StopSignal::~StopSignal() {
  std::signal(SIGINT, previous_int_);
  std::signal(SIGTERM, previous_term_);
  g_note = previous_note_;
  --g_depth;
}

bool StopSignal::requested() { return g_requested; }

}  // namespace kestrel
