#include "kestrel/train/progress_line.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kestrel/core/error.h"

namespace kestrel::train {

ProgressLine::ProgressLine(bool quiet, int epochs) : quiet_(quiet), tty_(::isatty(STDOUT_FILENO)), epochs_(epochs) {}

void ProgressLine::header() const {
  if (quiet_) return;
  std::printf("\n%11s%11s%11s%11s%11s%11s%11s\n", "Epoch", "GPU_mem", "box_loss", "obj_loss", "cls_loss", "Instances",
              "Size");
}

bool ProgressLine::due(bool last) {
  if (quiet_ || (!last && !tty_)) return false;
  const auto now = Clock::now();
  if (!last && now - last_draw_ < std::chrono::milliseconds(250)) return false;
  last_draw_ = now;
  return true;
}

void ProgressLine::draw(int epoch, double mem_gb, const std::array<double, 3>& mloss, int64_t instances, int64_t size,
                        int64_t i, int64_t nb, double images_per_s, bool last) const {
  char rate[32] = "", mem[32];
  if (images_per_s > 0) std::snprintf(rate, sizeof rate, " %.1f img/s", images_per_s);
  std::snprintf(mem, sizeof mem, "%.3gG", mem_gb);  // upstream's f'{mem:.3g}G'; 10.9G, not 10.912G
  // Instances and Size too as %11.4g, train.py's format (12345 boxes in a batch: 1.234e+04)
  std::printf("%s%11s%11s%11.4g%11.4g%11.4g%11.4g%11.4g: %3d%% %lld/%lld%s%s", tty_ ? "\r" : "",
              cat(epoch, "/", epochs_ - 1).c_str(), mem, mloss[0],
              mloss[1], mloss[2], static_cast<double>(instances), static_cast<double>(size),
              static_cast<int>(100 * (i + 1) / std::max<int64_t>(nb, 1)), static_cast<long long>(i + 1),
              static_cast<long long>(nb), rate, last ? "\n" : "");
  std::fflush(stdout);
}

}  // namespace kestrel::train
