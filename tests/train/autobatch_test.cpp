// AutoBatch (--batch-size -1): the fit against hand-computed lines and numpy.polyfit, the CPU's default,
// and on CUDA a measured batch that leaves the model as it was.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/Device.h>

#include "kestrel/core/error.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/yolo_model.h"
#include "kestrel/train/autobatch.h"

namespace kestrel::train {
namespace {

const std::vector<int> kSizes = {1, 2, 4, 8, 16};

std::vector<std::optional<double>> on_line(double fixed, double per_image, size_t measured = 5) {
  std::vector<std::optional<double>> memory;
  for (size_t i = 0; i < kSizes.size(); ++i)
    memory.push_back(i < measured ? std::optional<double>(fixed + per_image * kSizes[i]) : std::nullopt);
  return memory;
}

TEST(AutoBatchFit, StraightLine) {
  // 1 GB + 0.5 GB an image, budget 80 GB: (80 - 1) / 0.5 = 158.
  const BatchFit fit = fit_batch_size(kSizes, on_line(1e9, 0.5e9), 80e9, {});
  EXPECT_EQ(fit.batch, 158);
  EXPECT_NEAR(fit.bytes_per_image, 0.5e9, 1);
  EXPECT_NEAR(fit.fixed_bytes, 1e9, 1);
  EXPECT_EQ(fit.note, "");
}

TEST(AutoBatchFit, LeastSquaresAsNumpyPolyfit) {
  // numpy.polyfit([1, 2, 4, 8, 16], [3, 5, 8, 17, 33] GB, 1) = [2.01478495e9, 7.08333333e8]; by hand:
  // slope 299.8 / 148.8, intercept 13.2 - 6.2 x slope; int((100e9 - 7.0833e8) / 2.0148e9) = 49.
  const BatchFit fit = fit_batch_size(kSizes, {3e9, 5e9, 8e9, 17e9, 33e9}, 100e9, {});
  EXPECT_NEAR(fit.bytes_per_image, 299.8 / 148.8 * 1e9, 1e-3);
  EXPECT_NEAR(fit.fixed_bytes, (13.2 - 6.2 * 299.8 / 148.8) * 1e9, 1e-2);
  EXPECT_EQ(fit.batch, 49);
}

TEST(AutoBatchFit, OutOfMemoryBoundsTheAnswer) {
  // 16 ran out of memory: the line's 39 ((80 - 1) / 2, truncated) is at or above it, so 8, the size below.
  BatchFit fit = fit_batch_size(kSizes, on_line(1e9, 2e9, 4), 80e9, {});
  EXPECT_EQ(fit.batch, 8);
  EXPECT_EQ(fit.note, "batch size 16 ran out of memory");
  // A line far beyond the cap with an out-of-memory size: the size below it, as upstream (its 1024 check
  // comes after).
  fit = fit_batch_size(kSizes, on_line(0, 1e3, 3), 80e9, {});
  EXPECT_EQ(fit.batch, 4);
  // A line below the failing size is kept: 15 images fit (1 + 5 x 15 = 76 <= 80) although 16 did not run.
  fit = fit_batch_size(kSizes, on_line(1e9, 5e9, 4), 80e9, {});
  EXPECT_EQ(fit.batch, 15);
  EXPECT_EQ(fit.note, "");
}

TEST(AutoBatchFit, UnusableFitsFallBackToTheDefault) {
  AutoBatchOptions options;
  options.default_batch = 16;
  // Beyond 1024 (1 kB an image), below 1 (the budget under the fixed part), flat.
  BatchFit fit = fit_batch_size(kSizes, on_line(0, 1e3), 80e9, options);
  EXPECT_EQ(fit.batch, 16);
  EXPECT_EQ(fit.note, "the fitted batch size 80000000 is outside 1..1024");
  fit = fit_batch_size(kSizes, on_line(90e9, 1e9), 80e9, options);
  EXPECT_EQ(fit.batch, 16);
  EXPECT_EQ(fit.note, "the fitted batch size -10 is outside 1..1024");
  fit = fit_batch_size(kSizes, {1e9, std::nullopt, 3e9, 5e9, 9e9}, 80e9, options);  // 2 failed: see below
  EXPECT_EQ(fit.batch, 1);
  EXPECT_EQ(fit.note, "batch size 2 ran out of memory");
  fit = fit_batch_size(kSizes, on_line(1e9, 0), 80e9, options);
  EXPECT_EQ(fit.batch, 16);
  EXPECT_EQ(fit.note, "memory did not grow with the batch size");
}

TEST(AutoBatchFit, FallbackNeverAboveASizeThatFailed) {
  AutoBatchOptions options;
  options.default_batch = 16;
  // Only batch 1 ran (2 failed): no line, and 16 would not fit either: 1.
  BatchFit fit = fit_batch_size(kSizes, on_line(1e9, 1e9, 1), 80e9, options);
  EXPECT_EQ(fit.batch, 1);
  EXPECT_EQ(fit.note, "fewer than two batch sizes could be measured");
  // 8 failed and the line is unusable (memory flat): 4, the largest that ran.
  EXPECT_EQ(fit_batch_size(kSizes, on_line(1e9, 0, 3), 80e9, options).batch, 4);
  // Beyond the cap with 16 failing: bounded first (8), as upstream.
  EXPECT_EQ(fit_batch_size(kSizes, on_line(0, 1e3, 4), 80e9, options).batch, 8);
  // Nothing ran: an error that says what to do.
  try {
    fit_batch_size(kSizes, on_line(1e9, 1e9, 0), 80e9, options);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("AutoBatch: a batch of 1 does not fit"), std::string::npos) << e.what();
  }
}

std::shared_ptr<models::YoloModel> yolov5n() {
  return models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), 80);
}

TEST(AutoBatch, CpuKeepsTheDefault) {
  auto model = yolov5n();
  AutoBatchOptions options;
  options.default_batch = 12;
  EXPECT_EQ(autobatch(*model, c10::Device(c10::kCPU), 320, options).batch, 12);
}

// On a GPU: a batch in range, weights and batch-norm statistics as before, no gradients left behind.
TEST(AutoBatch, CudaMeasuresAndLeavesTheModelAsItWas) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const c10::Device cuda(c10::kCUDA, 0);
  auto model = yolov5n();
  model->to(cuda);
  std::vector<at::Tensor> before;
  for (const auto& t : model->parameters()) before.push_back(t.clone());
  for (const auto& t : model->buffers()) before.push_back(t.clone());
  AutoBatchOptions options;
  options.autocast = at::kHalf;
  // yolov5n at 320 in fp16 takes some tens of MB an image: 80 % of a large GPU's memory would be beyond the
  // 1024 cap (the default's answer). A budget of 1 % of the memory gives a line's answer inside it.
  options.fraction = 0.01;
  const BatchFit fit = autobatch(*model, cuda, 320, options);
  EXPECT_EQ(fit.note, "");
  EXPECT_GT(fit.bytes_per_image, 1e6);
  EXPECT_LT(fit.bytes_per_image, 500e6);
  EXPECT_GT(fit.fixed_bytes, 0);
  EXPECT_GE(fit.batch, 1);
  EXPECT_LE(fit.batch, 1024);
  size_t i = 0;
  for (const auto& t : model->parameters()) {
    EXPECT_TRUE(at::equal(t, before[i++]));
    EXPECT_FALSE(t.grad().defined());
  }
  for (const auto& t : model->buffers()) EXPECT_TRUE(at::equal(t, before[i++]));
}

}  // namespace
}  // namespace kestrel::train
