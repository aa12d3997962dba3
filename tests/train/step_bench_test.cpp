// The bench's step configurations compute the same training: every ablation option gives the loss of the
// plain fp32 path (same seed, same synthetic batch) within the precision it runs at.
#include <gtest/gtest.h>

#include "kestrel/core/error.h"
#include "kestrel/train/step_bench.h"

namespace kestrel::train {
namespace {

StepBenchOptions small(const std::string& precision, bool channels_last) {
  StepBenchOptions o;
  o.cfg = "yolov5n";
  o.batch_size = 2;
  o.img_size = 128;
  o.device = "cpu";
  o.precision = precision;
  o.channels_last = channels_last;
  o.warmup = 1;
  o.steps = 2;
  return o;
}

TEST(StepBench, EveryAblationOptionGivesThePlainLoss) {
  const StepBenchResult plain = bench_train_step(small("fp32", false));
  ASSERT_EQ(plain.losses.size(), 3u);
  EXPECT_GT(plain.images_per_second, 0);
  // Three steps of SGD change the loss: the steps really update the model.
  EXPECT_NE(plain.losses[0], plain.losses[2]);
  const StepBenchResult nhwc = bench_train_step(small("fp32", true));
  for (size_t i = 0; i < plain.losses.size(); ++i) EXPECT_NEAR(nhwc.losses[i], plain.losses[i], 1e-4 * plain.losses[i]);
  // Lower precision: the first step's loss (same weights) within 2 % (bf16 keeps 8 bits of mantissa).
  for (const char* precision : {"bf16", "fp16"}) {
    for (bool cl : {false, true}) {
      const StepBenchResult r = bench_train_step(small(precision, cl));
      EXPECT_NEAR(r.losses[0], plain.losses[0], 0.02 * plain.losses[0]) << precision << (cl ? " channels-last" : "");
    }
  }
}

TEST(StepBench, OtaLossRunsAndBadOptionsAreErrors) {
  StepBenchOptions o = small("fp32", false);
  o.ota = true;
  EXPECT_EQ(bench_train_step(o).losses.size(), 3u);
  o.precision = "fp8";
  EXPECT_THROW(bench_train_step(o), Error);
  o = small("fp32", false);
  o.img_size = 100;
  EXPECT_THROW(bench_train_step(o), Error);
}

}  // namespace
}  // namespace kestrel::train
