// Ctrl-C and SIGTERM (a scheduler's stop, the launcher's forward) as a request to stop at the next safe
// point: while a StopSignal lives, the first signal sets requested() and prints its note; a second one
// exits at once with 130. Training saves and stops at the next optimiser step; detect finishes the frame
// it is on and closes its videos, so that they stay playable; an evolution stops after the training in hand.
//
// Instances nest (an evolution's trainings): only the outermost clears an earlier request, so a Ctrl-C
// between two trainings still stops the evolution; each restores the handlers and note it found. A
// process started with Ctrl-C ignored (a script's background job) keeps ignoring it, as Python does.
// In a launched rank, the same stop from the launcher (the parent) and from elsewhere (a scheduler
// signalling every process of the job) counts once.
#pragma once
#include <signal.h>

namespace kestrel {

class StopSignal {
 public:
  // `note`: what the first signal prints (a string literal: printed from the signal handler).
  explicit StopSignal(const char* note);
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  static bool requested();

 private:
  const char* previous_note_;
  struct sigaction previous_int_ {}, previous_term_ {};
};

}  // namespace kestrel
