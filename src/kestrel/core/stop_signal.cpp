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

extern "C" void on_stop_signal(int) {
  if (g_requested.exchange(true)) std::_Exit(130);
  const char* note = g_note.load();
  const ssize_t written = ::write(STDERR_FILENO, note, std::strlen(note));  // async-signal-safe
  (void)written;
}

}  // namespace

StopSignal::StopSignal(const char* note) {
  g_note = note;
  g_requested = false;
  previous_int_ = std::signal(SIGINT, on_stop_signal);
  previous_term_ = std::signal(SIGTERM, on_stop_signal);
}

StopSignal::~StopSignal() {
  std::signal(SIGINT, previous_int_);
  std::signal(SIGTERM, previous_term_);
}

bool StopSignal::requested() { return g_requested; }

}  // namespace kestrel
