// The bench's step configurations compute the same training: every ablation option gives the loss of the
// plain fp32 path (same seed, same synthetic batch) within the precision it runs at; bench e2e trains
// on the real pipeline.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kestrel/core/error.h"
#include "kestrel/train/step_bench.h"
#include "test_support.h"

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
  // The foreach optimiser (the ablation's baseline) takes the same steps as the fused kernels.
  StepBenchOptions foreach = small("fp32", false);
  foreach.fused_optimizer = false;
  const StepBenchResult unfused = bench_train_step(foreach);
  for (size_t i = 0; i < plain.losses.size(); ++i) EXPECT_NEAR(unfused.losses[i], plain.losses[i], 1e-5 * plain.losses[i]);
  EXPECT_EQ(unfused.label, "fp32");
  EXPECT_EQ(plain.label, "fp32 + fused optimiser");
  StepBenchOptions adamw = small("fp32", false);  // another optimiser than upstream's SGD is named
  adamw.optimizer = "adamw";
  EXPECT_EQ(bench_train_step(adamw).label, "fp32 + fused optimiser (AdamW)");
  // Batch norm + SiLU fused (the CPU runs the kernels' arithmetic as loops): the same training.
  StepBenchOptions fused_bn = small("fp32", true);
  fused_bn.fused_bn_silu = true;
  const StepBenchResult bn_silu = bench_train_step(fused_bn);
  for (size_t i = 0; i < plain.losses.size(); ++i) EXPECT_NEAR(bn_silu.losses[i], plain.losses[i], 1e-4 * plain.losses[i]);
  EXPECT_EQ(bn_silu.label, "fp32 + channels-last + fused optimiser + fused BN-SiLU");
  // Activation checkpointing recomputes the same numbers: the same losses over three steps.
  StepBenchOptions ckpt = small("fp32", false);
  ckpt.checkpoint_layers = -1;
  const StepBenchResult recomputed = bench_train_step(ckpt);
  for (size_t i = 0; i < plain.losses.size(); ++i) EXPECT_NEAR(recomputed.losses[i], plain.losses[i], 1e-5 * plain.losses[i]);
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
  o = small("fp32", false);
  o.checkpoint_layers = 99;  // more layers than the model has: the row's label would claim 99
  EXPECT_NE(test::error_message([&] { bench_train_step(o); }).find("--checkpoint 99: "), std::string::npos);
  o = small("fp32", false);
  o.cuda_graph = true;  // graphs are a CUDA feature: on the CPU an error, not a silent eager run
  EXPECT_THROW(bench_train_step(o), Error);
  o.fused_optimizer = false;  // a graph cannot hold the foreach update's host read
  try {
    (void)bench_train_step(o);
    ADD_FAILURE() << "--cuda-graph with the foreach optimiser was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fused optimiser"), std::string::npos) << e.what();
  }
}

// The rows set precision, layout, optimiser, graphs, fused BN-SiLU and checkpointing themselves: the same
// options given by the user would silently change every row.
TEST(StepBench, AblationRefusesTheOptionsItsRowsSet) {
  for (const auto& [name, change] : std::vector<std::pair<std::string, std::function<void(StepBenchOptions&)>>>{
           {"precision", [](StepBenchOptions& o) { o.precision = "bf16"; }},
           {"channels-last", [](StepBenchOptions& o) { o.channels_last = true; }},
           {"foreach", [](StepBenchOptions& o) { o.fused_optimizer = false; }},
           {"checkpoint", [](StepBenchOptions& o) { o.checkpoint_layers = 2; }},
           {"cuda graph", [](StepBenchOptions& o) { o.cuda_graph = true; }}}) {
    StepBenchOptions o = small("fp32", false);
    change(o);
    EXPECT_NE(test::error_message([&] { bench_train_ablation(o, {}); }).find("give none of them with it"), std::string::npos)
        << name;
  }
}

// The ablation's rows, in the guides' order, each reported as soon as it is measured (CPU: no graph row).
TEST(StepBench, AblationReportsEveryRowInOrder) {
  StepBenchOptions o = small("fp32", false);
  o.steps = 1;
  std::vector<std::string> reported;
  const auto rows = bench_train_ablation(o, [&](const StepBenchResult& r) { reported.push_back(r.label); });
  const std::vector<std::string> expected = {"fp32", "bf16", "bf16 + channels-last", "bf16 + channels-last + fused optimiser",
                                             "bf16 + channels-last + fused optimiser + checkpointing"};
  EXPECT_EQ(reported, expected);
  ASSERT_EQ(rows.size(), expected.size());
  // Every row trains the same model on the same batch: the first step's loss (same initial weights) within
  // bf16's precision of the fp32 baseline's.
  for (const auto& r : rows) {
    EXPECT_EQ(r.graphs_captured, 0) << r.label;
    EXPECT_TRUE(r.error.empty()) << r.label << ": " << r.error;
    ASSERT_FALSE(r.losses.empty()) << r.label;
    EXPECT_NEAR(r.losses[0], rows[0].losses[0], 0.02 * rows[0].losses[0]) << r.label;
  }
}

// The whole pipeline on the demo data (32 images twice per epoch with --repeat 2, batches of 8): the
// timed steps run across an epoch boundary on real, augmented batches and train (finite losses that change).
TEST(StepBench, EndToEndRunsTheTrainingPipeline) {
  E2eBenchOptions o;
  o.step = small("fp32", false);
  o.step.batch_size = 8;
  o.step.steps = 10;
  o.data = "data/demo/demo.yaml";
  o.workers = 1;
  o.repeat = 2;
  const E2eBenchResult r = bench_e2e(o);
  EXPECT_EQ(r.batches_per_epoch, 8);
  EXPECT_EQ(r.batch_size, 8);
  EXPECT_EQ(r.device, "cpu");
  ASSERT_EQ(r.step.losses.size(), 10u);
  for (double loss : r.step.losses) EXPECT_TRUE(std::isfinite(loss) && loss > 0) << loss;
  EXPECT_NE(r.step.losses.front(), r.step.losses.back());
  EXPECT_GT(r.step.images_per_second, 0);
  EXPECT_GE(r.data_wait_fraction, 0);
  EXPECT_LE(r.data_wait_fraction, 1);
  EXPECT_EQ(r.step.label.find("OTA"), std::string::npos) << r.step.label;
  // A YOLOv7 hyp file (loss_ota: 1) is timed with the loss training would use: OTA.
  E2eBenchOptions v7 = o;
  v7.hyp = "configs/hyps/hyp.scratch.tiny.yaml";
  v7.step.steps = 2;
  v7.repeat = 1;
  v7.step.batch_size = 64;  // more than the split's 32 images: the batch used is reported, not the one asked
  const E2eBenchResult ota = bench_e2e(v7);
  EXPECT_NE(ota.step.label.find("+ OTA"), std::string::npos) << ota.step.label;
  EXPECT_EQ(ota.batch_size, 32);
  o.data = "data/demo/missing.yaml";
  try {
    (void)bench_e2e(o);
    ADD_FAILURE() << "a missing dataset YAML was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.yaml"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kestrel::train
