// The per-iteration line of upstream's training progress bar (Epoch, GPU_mem, box/obj/cls loss,
// Instances, Size, then percent, batch and images/s), redrawn in place on a terminal and printed
// once per epoch otherwise.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>

namespace kestrel::train {

class ProgressLine {
 public:
  using Clock = std::chrono::steady_clock;
  ProgressLine() = default;
  ProgressLine(bool quiet, int epochs);
  void header() const;
  // Whether to draw now: the epoch's last batch, or on a terminal at most 4 times a second.
  bool due(bool last);
  void draw(int epoch, double mem_gb, const std::array<double, 3>& mloss, int64_t instances, int64_t size, int64_t i,
            int64_t nb, double images_per_s, bool last) const;

 private:
  bool quiet_ = true, tty_ = false;
  int epochs_ = 1;
  Clock::time_point last_draw_{};
};

}  // namespace kestrel::train
