// The YOLOv5 schedule at given iterations, derived by hand from train.py's formulas (peers.md §2.1).
#include <gtest/gtest.h>

#include <cmath>

#include <vector>

#include "kestrel/core/python_repr.h"
#include "kestrel/train/schedule.h"

namespace kestrel::train {
namespace {

TEST(Schedule, DefaultsAreYolov5ScratchLow) {
  ScheduleOptions o;
  EXPECT_DOUBLE_EQ(o.lr0, 0.01);
  EXPECT_DOUBLE_EQ(o.lrf, 0.01);
  EXPECT_DOUBLE_EQ(o.momentum, 0.937);
  EXPECT_DOUBLE_EQ(o.warmup_epochs, 3.0);
  EXPECT_DOUBLE_EQ(o.warmup_momentum, 0.8);
  EXPECT_DOUBLE_EQ(o.warmup_bias_lr, 0.1);
  EXPECT_EQ(o.nominal_batch_size, 64);
}

TEST(Schedule, LinearAndCosineFactors) {
  ScheduleOptions o;  // 100 epochs, lrf 0.01
  EXPECT_DOUBLE_EQ(lr_factor(o, 0), 1.0);
  EXPECT_NEAR(lr_factor(o, 25), 0.75 * 0.99 + 0.01, 1e-12);   // 0.7525
  EXPECT_NEAR(lr_factor(o, 50), 0.505, 1e-12);
  EXPECT_NEAR(lr_factor(o, 100), 0.01, 1e-12);
  o.cos_lr = true;
  EXPECT_DOUBLE_EQ(lr_factor(o, 0), 1.0);
  EXPECT_NEAR(lr_factor(o, 25), 1 - 0.99 * (1 - 0.7071067811865476) / 2, 1e-12);  // 0.855018...
  EXPECT_NEAR(lr_factor(o, 50), 0.505, 1e-12);
  EXPECT_NEAR(lr_factor(o, 100), 0.01, 1e-12);
}

// YOLOv7's train.py --linear-lr: lf = (1 - x/(E-1))(1 - lrf) + lrf, so the last epoch (E-1) trains at
// lr0 * lrf; its cosine is YOLOv5's one_cycle.
TEST(Schedule, Yolov7LinearReachesLrfAtTheLastEpoch) {
  ScheduleOptions o;
  o.yolov7 = true;
  o.epochs = 5;
  o.lrf = 0.1;
  EXPECT_DOUBLE_EQ(lr_factor(o, 0), 1.0);
  EXPECT_NEAR(lr_factor(o, 2), 0.5 * 0.9 + 0.1, 1e-12);  // 0.55
  EXPECT_NEAR(lr_factor(o, 4), 0.1, 1e-12);
  o.epochs = 1;  // one epoch: x = 0 only, and no division by E - 1 = 0
  EXPECT_DOUBLE_EQ(lr_factor(o, 0), 1.0);
  o.epochs = 5;
  o.cos_lr = true;
  EXPECT_NEAR(lr_factor(o, 5), 0.1, 1e-12);
}

// The iterations that end with an optimiser step while accumulate ramps 1, 1, 2, 2, 3, 3, 4, 4 ...:
// YOLOv5 steps when ni - last_opt_step >= accumulate, YOLOv7 when ni % accumulate == 0 (by hand).
TEST(Schedule, OptimizerStepRulesOfBothRecipes) {
  const int accumulate[12] = {1, 1, 2, 2, 3, 3, 4, 4, 4, 4, 4, 4};
  for (const bool yolov7 : {false, true}) {
    ScheduleOptions o;
    o.yolov7 = yolov7;
    std::vector<int64_t> steps;
    int64_t last = -1;
    for (int64_t ni = 0; ni < 12; ++ni)
      if (optimizer_step_due(o, ni, last, accumulate[ni])) steps.push_back(ni), last = ni;
    // YOLOv5: 0 (0 - -1 >= 1), 1 (1 - 0 >= 1), 2 no (2 - 1 < 2), 3 (3 - 1 >= 2), 4 and 5 no (< 3),
    //         6 no (6 - 3 < 4: accumulate is 4 there), 7 (7 - 3 >= 4), 11 (11 - 7 >= 4).
    // YOLOv7: 0 (0 % 1), 1 (1 % 1), 2 (2 % 2), 3 no (3 % 2), 4 and 5 no (% 3), 6 and 7 no (% 4), 8 (8 % 4).
    if (!yolov7) EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 3, 7, 11})) << "YOLOv5";
    else EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2, 8})) << "YOLOv7";
  }
}

TEST(Schedule, AccumulationAndWeightDecay) {
  ScheduleOptions o;
  o.batch_size = 16;  // 64 / 16 = 4 steps, decay unchanged
  EXPECT_EQ(accumulation_steps(o), 4);
  EXPECT_DOUBLE_EQ(scaled_weight_decay(o, 5e-4), 5e-4);
  o.batch_size = 24;  // round(2.667) = 3: decay * 24 * 3 / 64
  EXPECT_EQ(accumulation_steps(o), 3);
  EXPECT_NEAR(scaled_weight_decay(o, 5e-4), 5.625e-4, 1e-15);
  o.batch_size = 128;  // at least one step: decay * 128 / 64
  EXPECT_EQ(accumulation_steps(o), 1);
  EXPECT_NEAR(scaled_weight_decay(o, 5e-4), 1e-3, 1e-15);
  // To the last bit as Python's `wd *= bs * acc / nbs` (the optimiser line prints it): 0.0005 * (57 / 64),
  // and 0.0005 * (75 / 64); multiplied in the other order they are 0.00044531249999999996 and
  // 0.0005859375000000001.
  o.batch_size = 19;
  EXPECT_EQ(python_float_repr(scaled_weight_decay(o, 5e-4)), "0.0004453125");
  o.batch_size = 25;
  EXPECT_EQ(python_float_repr(scaled_weight_decay(o, 5e-4)), "0.0005859375");
}

TEST(Schedule, WarmupRampsAtGivenIterations) {
  ScheduleOptions o;
  o.batch_size = 16;
  EXPECT_EQ(warmup_iterations(o, 10), 100);   // 3 epochs x 10 batches = 30 < 100
  EXPECT_EQ(warmup_iterations(o, 200), 600);  // 3 x 200
  // halfway through a 100-iteration warm-up in epoch 0 (lf = 1): bias 0.1 -> 0.01, others 0 -> 0.01
  StepSettings s = step_settings(o, 0, 50, 10);
  EXPECT_NEAR(s.lr[0], 0.055, 1e-12);
  EXPECT_NEAR(s.lr[1], 0.005, 1e-12);
  EXPECT_NEAR(s.lr[2], 0.005, 1e-12);
  EXPECT_NEAR(s.momentum, 0.8 + 0.5 * 0.137, 1e-12);
  EXPECT_EQ(s.accumulate, 2);  // interp 1 -> 4 at 0.5 = 2.5, rounded half to even as numpy does
  s = step_settings(o, 0, 0, 10);
  EXPECT_NEAR(s.lr[0], 0.1, 1e-12);
  EXPECT_NEAR(s.lr[1], 0.0, 1e-12);
  EXPECT_NEAR(s.momentum, 0.8, 1e-12);
  EXPECT_EQ(s.accumulate, 1);
  // epoch 6, iteration 60 (10 batches per epoch): still warming up, towards lr0 * lf(6)
  s = step_settings(o, 6, 60, 10);
  const double target = 0.01 * lr_factor(o, 6);
  EXPECT_NEAR(s.lr[1], 0.6 * target, 1e-12);
  EXPECT_NEAR(s.lr[0], 0.1 + 0.6 * (target - 0.1), 1e-12);
  // after warm-up: every group at lr0 * lf(epoch - 1) (train.py's scheduler steps at each epoch's end),
  // full momentum and accumulation
  s = step_settings(o, 20, 201, 10);
  EXPECT_NEAR(s.lr[0], 0.01 * (0.81 * 0.99 + 0.01), 1e-12);  // lf(19)
  EXPECT_DOUBLE_EQ(s.lr[0], s.lr[2]);
  EXPECT_DOUBLE_EQ(s.momentum, 0.937);
  EXPECT_EQ(s.accumulate, 4);
}

// accumulate = round(np.interp(ni, [0, nw], [1, nbs / batch])), half to even, where numpy's last bit
// decides: batch 16, 498 batches an epoch (nw = 1494): np.interp gives 2.5 at ni 747 (-> 2) and
// 3.4999999999999996 at ni 1245 (-> 3, not 4; values printed by numpy 2 in upstream's environment).
TEST(Schedule, WarmupAccumulateRoundsAsNumpy) {
  ScheduleOptions o;
  o.batch_size = 16;
  ASSERT_EQ(warmup_iterations(o, 498), 1494);
  EXPECT_EQ(step_settings(o, 1, 747, 498).accumulate, 2);
  EXPECT_EQ(step_settings(o, 2, 1245, 498).accumulate, 3);
  EXPECT_EQ(step_settings(o, 2, 1246, 498).accumulate, 4);  // 3.5020...
}

// After the warm-up, train.py's learning rate is what its LambdaLR set at the previous epoch's end,
// lr0 * lf(e - 1); the epoch in which the warm-up ends keeps lr0 * lf(e) from its last warm-up iteration,
// so that value serves two epochs. Hand-derived case: 300 epochs of 38 batches (lr0 = lrf = 0.01, linear),
// warm-up max(round(3 x 38), 100) = 114 iterations, ending in epoch 3 (iterations 114..151): epochs 3 and 4
// train at 0.01 lf(3) = 0.009901 and epoch 5 at 0.01 lf(4) = 0.009868 (the x/lr columns of such a
// YOLOv5 v7.0 run's results.csv read 0.009901, 0.009901, 0.009868).
TEST(Schedule, AfterWarmupAnEpochTrainsAtThePreviousEpochsFactor) {
  ScheduleOptions o;
  o.epochs = 300;
  const int64_t nb = 38;
  ASSERT_EQ(warmup_iterations(o, nb), 114);
  const auto last_lr = [&](int epoch) { return step_settings(o, epoch, (epoch + 1) * nb - 1, nb).lr; };
  const double lf3 = 0.01 * ((1 - 3.0 / 300) * 0.99 + 0.01), lf4 = 0.01 * ((1 - 4.0 / 300) * 0.99 + 0.01);
  EXPECT_NEAR(lf3, 0.009901, 5e-7);
  EXPECT_NEAR(lf4, 0.009868, 5e-7);
  for (int group = 0; group < 3; ++group) {
    EXPECT_DOUBLE_EQ(last_lr(3)[group], lf3) << group;
    EXPECT_DOUBLE_EQ(last_lr(4)[group], lf3) << group;
    EXPECT_DOUBLE_EQ(last_lr(5)[group], lf4) << group;
  }
  // the warm-up's own iterations aim at the epoch's factor: its last one (114) is exactly lr0 * lf(3)
  EXPECT_DOUBLE_EQ(step_settings(o, 3, 114, nb).lr[1], lf3);
  EXPECT_DOUBLE_EQ(step_settings(o, 3, 115, nb).lr[1], lf3);
  // the first iteration of epoch 4 is past the warm-up and its epoch had none: still lf(3)
  EXPECT_DOUBLE_EQ(step_settings(o, 4, 152, nb).lr[0], lf3);
}

// A warm-up ending inside an epoch: 30 batches per epoch, 100 iterations, so epoch 3 (iterations 90..119)
// ends it at iteration 100 and keeps lr0 lf(3) after it; epoch 4 trains at lf(3) too, epoch 5 at lf(4).
// With more warm-up than training every iteration ramps. Cosine and YOLOv7's linear factor lag alike.
TEST(Schedule, WarmupEndingInsideAnEpochAndOtherFactors) {
  ScheduleOptions o;
  o.epochs = 10;
  const int64_t nb = 30;
  ASSERT_EQ(warmup_iterations(o, nb), 100);
  const double lf3 = 0.01 * ((1 - 0.3) * 0.99 + 0.01), lf4 = 0.01 * ((1 - 0.4) * 0.99 + 0.01);  // 0.00703, 0.00604
  EXPECT_DOUBLE_EQ(step_settings(o, 3, 100, nb).lr[0], lf3);
  EXPECT_DOUBLE_EQ(step_settings(o, 3, 119, nb).lr[2], lf3);
  EXPECT_DOUBLE_EQ(step_settings(o, 4, 120, nb).lr[1], lf3);
  EXPECT_DOUBLE_EQ(step_settings(o, 5, 150, nb).lr[1], lf4);
  // 1 batch per epoch, 10 epochs, 100 warm-up iterations: the last epoch is still warming up, towards lf(9)
  EXPECT_NEAR(step_settings(o, 9, 9, 1).lr[1], 0.09 * 0.01 * ((1 - 0.9) * 0.99 + 0.01), 1e-15);
  o.cos_lr = true;  // lf(3) = ((1 - cos(0.3 pi)) / 2)(0.01 - 1) + 1
  EXPECT_NEAR(step_settings(o, 4, 120, nb).lr[1], 0.01 * ((1 - std::cos(0.3 * 3.14159265358979323846)) / 2 * -0.99 + 1), 1e-15);
  o.cos_lr = false;
  o.yolov7 = true;  // YOLOv7's --linear-lr: lf(3) = (1 - 3/9)(1 - lrf) + lrf
  EXPECT_NEAR(step_settings(o, 4, 120, nb).lr[1], 0.01 * ((1 - 3.0 / 9) * 0.99 + 0.01), 1e-15);
}

// No warm-up (--min-warmup-iters 0, warmup_epochs 0: nw = 0): iteration 0 is still "in" it (ni <= nw), and
// numpy's interp(0, [0, 0], [start, end]) gives the end value, so it trains at lr0 lf(0), full momentum and
// accumulation, as every later iteration of epoch 0.
TEST(Schedule, NoWarmupStartsAtTheFullSettings) {
  ScheduleOptions o;
  o.warmup_epochs = 0;
  o.min_warmup_iterations = 0;
  ASSERT_EQ(warmup_iterations(o, 10), 0);
  const StepSettings first = step_settings(o, 0, 0, 10);
  EXPECT_DOUBLE_EQ(first.lr[0], 0.01);
  EXPECT_DOUBLE_EQ(first.lr[1], 0.01);
  EXPECT_DOUBLE_EQ(first.momentum, 0.937);
  EXPECT_EQ(first.accumulate, 4);
  EXPECT_DOUBLE_EQ(step_settings(o, 1, 10, 10).lr[1], 0.01);  // epoch 1 at lf(0)
}

// train.py's warm-up sets x['momentum'] only where a group has one (SGD); Adam's groups hold 'betas', so
// beta1 is hyp momentum throughout, while the learning rates and accumulation still ramp.
TEST(Schedule, AdamBeta1IsNotWarmedUp) {
  ScheduleOptions o;
  o.ramp_momentum = false;
  StepSettings s = step_settings(o, 0, 0, 10);
  EXPECT_DOUBLE_EQ(s.momentum, 0.937);
  EXPECT_NEAR(s.lr[0], 0.1, 1e-12);
  EXPECT_EQ(s.accumulate, 1);
  s = step_settings(o, 0, 50, 10);
  EXPECT_DOUBLE_EQ(s.momentum, 0.937);
  EXPECT_NEAR(s.lr[1], 0.005, 1e-12);
}

}  // namespace
}  // namespace kestrel::train
