// The progress line's columns as upstream train.py's pbar description:
// ('%11s' * 2 + '%11.4g' * 5) % (f'{epoch}/{epochs - 1}', f'{mem:.3g}G', *mloss, instances, size),
// the expected strings evaluated by Python; kestrel appends percent, batch and images/s.
#include <gtest/gtest.h>

#include <string>

#include "kestrel/train/progress_line.h"

namespace kestrel::train {
namespace {

std::string drawn(int epoch, double mem_gb, std::array<double, 3> mloss, int64_t instances, int64_t size) {
  testing::internal::CaptureStdout();  // first: a line made on a terminal would redraw with '\r'
  ProgressLine line(/*quiet=*/false, /*epochs=*/100);
  line.draw(epoch, mem_gb, mloss, instances, size, 0, 2, 0, /*last=*/true);
  return testing::internal::GetCapturedStdout();
}

TEST(ProgressLine, ColumnsAsUpstream) {
  EXPECT_EQ(drawn(3, 10.912, {0.05123, 0.0456, 0.0123}, 143, 640).substr(0, 77),
            "       3/99      10.9G    0.05123     0.0456     0.0123        143        640");
  EXPECT_EQ(drawn(0, 0.8624, {1.5, 0.25, 0.125}, 7, 320),
            "       0/99     0.862G        1.5       0.25      0.125          7        320:  50% 1/2\n");
  // Instances and Size are %11.4g too: a dense batch's 12345 boxes, a 10240-pixel --multi-scale size
  EXPECT_EQ(drawn(1, 0.5, {1.5, 0.25, 0.125}, 12345, 10240).substr(0, 77),
            "       1/99       0.5G        1.5       0.25      0.125  1.234e+04  1.024e+04");
}

}  // namespace
}  // namespace kestrel::train
