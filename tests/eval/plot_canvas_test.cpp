// Axis ticks: 1, 2, 2.5 or 5 times a power of ten over ordinary ranges (by hand), and ranges a few ulps
// wide, which fitness values of evolve.png produce (0.0117 and 0.011699999999999999), end.
#include <gtest/gtest.h>

#include <cmath>

#include "kestrel/eval/plot_canvas.h"

namespace kestrel::eval::canvas {
namespace {

TEST(PlotCanvas, TicksByHand) {
  EXPECT_EQ(ticks(0, 1), (std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}));
  EXPECT_EQ(ticks(0, 10), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(ticks(3, 3), (std::vector<double>{3}));
}

TEST(PlotCanvas, RangesOfAFewUlpsEnd) {
  const double a = 0.011699999999999999, b = 0.0117;
  ASSERT_LT(a, b);
  const std::vector<double> t = ticks(a, b);
  EXPECT_LE(t.size(), 51u);
  EXPECT_GE(t.size(), 1u);
  const double big = 1e17;
  EXPECT_LE(ticks(big, std::nextafter(big, 2 * big)).size(), 51u);
}

}  // namespace
}  // namespace kestrel::eval::canvas
