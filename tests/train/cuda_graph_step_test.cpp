// The graph-ready step computes the training of the plain step: batches of varying target counts
// (padded into static buffers), accumulation micro-steps and a momentum ramp give the same losses,
// weights, EMA and optimiser state as TrainStep called directly. On the CPU this checks everything but
// the capture (capture off); with a CUDA device the same run captures graphs and replays them.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include "kestrel/core/error.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/state_dict.h"
#include "kestrel/train/cuda_graph_step.h"
#include "kestrel/train/param_groups.h"
#include "test_support.h"

namespace kestrel::train {
namespace {

// Model, EMA, optimiser, scaler and step, built the same way from the same seed.
struct Rig {
  std::shared_ptr<models::YoloModel> model, average;
  std::unique_ptr<ModelEma> ema;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<GradScaler> scaler;
  std::unique_ptr<TrainStep> step;

  Rig(const c10::Device& device, bool fp16) {
    torch::manual_seed(3);
    const auto config = models::load_model_config(models::resolve_model_config_path("yolov5n"));
    model = models::build_model(config, 3);
    model->to(device);
    model->train();
    average = models::build_model(config, 3);
    average->to(device);
    ema = std::make_unique<ModelEma>(average, *model);
    optimizer = std::make_unique<Optimizer>(split_parameters(*model), OptimizerOptions{});
    GradScalerOptions so;
    so.enabled = fp16;
    so.init_scale = 1024;
    scaler = std::make_unique<GradScaler>(so, device);
    StepOptions step_options;
    step_options.autocast = fp16;
    step = std::make_unique<TrainStep>(*model, make_loss_fn(model->head(), loss::LossOptions{}, 64, false), *optimizer,
                                       *scaler, ema.get(), step_options);
  }
};

struct Batch {
  at::Tensor images, targets, mask;
};

// 2 images of 64x64; `rows` target rows of which the first rows - 2 are real boxes.
Batch make_batch(int64_t rows, uint64_t seed, const c10::Device& device) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  Batch b;
  b.images = at::rand({2, 3, 64, 64}, gen).to(device);
  const at::Tensor cls = at::randint(0, 3, {2, rows, 1}, gen, at::kFloat);
  const at::Tensor xy = at::rand({2, rows, 2}, gen) * 0.8 + 0.1;
  const at::Tensor wh = at::rand({2, rows, 2}, gen) * 0.3 + 0.05;
  b.targets = at::cat({cls, xy, wh}, 2).to(device);
  b.mask = (at::arange(rows) < rows - 2).expand({2, rows}).contiguous().to(device);
  return b;
}

// 14 batches, an update every second one; the momentum ramps over the first three updates (as in the
// schedule's warm-up), then holds; target rows 7, 20 (both padded to 32) and one batch of 40 (to 64).
// rtol: 1e-4 in float32; fp16 runs get 2e-3 (the loss's gathers backpropagate through index_add_, whose
// CUDA kernel adds half values atomically in no fixed order, so two equal runs differ in the last bits).
void train_both(Rig& plain, Rig& graphed, CudaGraphStep& graph_step, const c10::Device& device, double rtol = 1e-4) {
  const std::array<double, 3> lr{0.02, 0.01, 0.01};
  for (int i = 0; i < 14; ++i) {
    const bool update = i % 2 == 1;
    const int u = i / 2;
    const StepSettings s{{lr[0] * (1 + 0.1 * u), lr[1], lr[2]}, u < 3 ? 0.8 + 0.04 * u : 0.937, 2};
    const Batch b = make_batch(i == 9 ? 40 : (i % 3 == 0 ? 7 : 20), 100 + static_cast<uint64_t>(i), device);
    const loss::YoloLoss::Result want = plain.step->forward_backward(b.images, b.targets, b.mask);
    if (update) plain.step->optimizer_step(s);
    const loss::YoloLoss::Result got = graph_step.run(b.images, b.targets, b.mask, s, update);
    ASSERT_TRUE(at::allclose(got.items.cpu(), want.items.cpu(), rtol, 1e-6)) << "batch " << i;
    ASSERT_NEAR(got.total.item<double>(), want.total.item<double>(), rtol * std::abs(want.total.item<double>()));
  }
}

void expect_same_state(Rig& plain, Rig& graphed, double rtol = 1e-4) {
  const double atol = rtol / 100;
  const auto a = plain.model->named_parameters(), b = graphed.model->named_parameters();
  for (const auto& p : a) EXPECT_TRUE(at::allclose(p.value().cpu(), b[p.key()].cpu(), rtol, atol)) << p.key();
  const auto ea = models::state_dict(plain.ema->model()), eb = models::state_dict(graphed.ema->model());
  for (size_t i = 0; i < ea.size(); ++i)
    EXPECT_TRUE(at::allclose(ea[i].second.cpu().to(at::kDouble), eb[i].second.cpu().to(at::kDouble), rtol, atol))
        << "ema " << ea[i].first;
  EXPECT_EQ(plain.ema->updates(), 7);
  EXPECT_EQ(graphed.ema->updates(), 7);
  const auto oa = plain.optimizer->state(), ob = graphed.optimizer->state();
  for (size_t i = 0; i < oa.size(); ++i)
    EXPECT_TRUE(at::allclose(oa[i].second.cpu(), ob[i].second.cpu(), rtol, atol)) << oa[i].first;
}

TEST(CudaGraphStep, PaddedTargetRowsAreThePowersOfTwoFrom32) {
  EXPECT_EQ(padded_target_rows(0), 32);
  EXPECT_EQ(padded_target_rows(1), 32);
  EXPECT_EQ(padded_target_rows(32), 32);
  EXPECT_EQ(padded_target_rows(33), 64);
  EXPECT_EQ(padded_target_rows(400), 512);
}

TEST(CudaGraphStep, StaticBufferStepTrainsAsThePlainStepOnCpu) {
  const c10::Device cpu(c10::kCPU);
  Rig plain(cpu, false), graphed(cpu, false);
  GraphStepOptions o;
  o.capture = false;
  CudaGraphStep graph_step(*graphed.step, cpu, o);
  // Gradients keep their memory from now on: the buffers a graph would write are the ones updated.
  std::vector<const void*> grad_memory;
  for (const auto& p : graphed.model->parameters()) grad_memory.push_back(p.grad().data_ptr());
  train_both(plain, graphed, graph_step, cpu);
  expect_same_state(plain, graphed);
  size_t i = 0;
  for (const auto& p : graphed.model->parameters()) {
    EXPECT_EQ(p.grad().data_ptr(), grad_memory[i++]);
    EXPECT_EQ(p.grad().abs().max().item<float>(), 0.0f);  // zeroed after the last update
  }
  EXPECT_EQ(graph_step.graphs_captured(), 0);
}

// An epoch's start zeroes the gradients through TrainStep::zero_grad, which keeps their memory once a
// graph step owns them; an optimiser zero_grad that frees them is caught at the next step, before a
// replay could write into freed memory.
TEST(CudaGraphStep, GradientsKeepTheirMemoryAcrossZeroGrad) {
  const c10::Device cpu(c10::kCPU);
  Rig rig(cpu, false);
  GraphStepOptions o;
  o.capture = false;
  CudaGraphStep graph_step(*rig.step, cpu, o);
  const StepSettings s{{0.01, 0.01, 0.01}, 0.9, 1};
  const Batch b = make_batch(7, 5, cpu);
  graph_step.run(b.images, b.targets, b.mask, s, false);
  std::vector<const void*> memory;
  for (const auto& p : rig.step->trainable()) memory.push_back(p.grad().data_ptr());
  rig.step->zero_grad();
  size_t i = 0;
  for (const auto& p : rig.step->trainable()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().data_ptr(), memory[i++]);
    EXPECT_EQ(p.grad().abs().max().item<float>(), 0.0f);
  }
  graph_step.run(b.images, b.targets, b.mask, s, true);  // fine: the gradients are where they were
  rig.optimizer->zero_grad();                              // set to none
  const std::string message = test::error_message([&] { graph_step.run(b.images, b.targets, b.mask, s, false); });
  EXPECT_NE(message.find("was freed after the step was set up"), std::string::npos) << message;
  // Without a graph step the gradients are set to none, as upstream's zero_grad.
  Rig plain(cpu, false);
  plain.step->forward_backward(b.images, b.targets, b.mask);
  plain.step->zero_grad();
  for (const auto& p : plain.step->trainable()) EXPECT_FALSE(p.grad().defined());
}

TEST(CudaGraphStep, CaptureNeedsCuda) {
  const c10::Device cpu(c10::kCPU);
  Rig rig(cpu, false);
  EXPECT_THROW(CudaGraphStep(*rig.step, cpu, GraphStepOptions{}), Error);
}

TEST(CudaGraphStep, CapturedAndEagerStepsGiveTheSameWeightsOnCuda) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const c10::Device cuda(c10::kCUDA, 0);
  const test::ExactCudnn exact;
  for (bool fp16 : {false, true}) {
    Rig plain(cuda, fp16), graphed(cuda, fp16);
    GraphStepOptions o;
    o.warmup = 1;
    CudaGraphStep graph_step(*graphed.step, cuda, o);
    const double rtol = fp16 ? 2e-3 : 1e-4;
    train_both(plain, graphed, graph_step, cuda, rtol);
    expect_same_state(plain, graphed, rtol);
    // (32 rows, micro-step), (32 rows, update) at momentum 0.937 and (64 rows, ...) once: at least two
    // graphs, replayed for the later batches.
    EXPECT_GE(graph_step.graphs_captured(), 2) << (fp16 ? "fp16" : "fp32");
    EXPECT_GE(graph_step.replays(), 4) << (fp16 ? "fp16" : "fp32");
  }
}

// One shape, every call an update, and the momentum changing after its graph was captured: the graph is
// captured again (the old one is kept until the new capture is complete: it holds the graphs' memory
// pool, the only graph there is), and the steps still equal the plain ones.
TEST(CudaGraphStep, RecapturesWhenTheMomentumChangesOnCuda) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const c10::Device cuda(c10::kCUDA, 0);
  const test::ExactCudnn exact;
  Rig plain(cuda, false), graphed(cuda, false);
  GraphStepOptions o;
  o.warmup = 1;
  CudaGraphStep graph_step(*graphed.step, cuda, o);
  for (int i = 0; i < 10; ++i) {
    const StepSettings s{{0.01, 0.01, 0.01}, i < 5 ? 0.9 : 0.8, 1};
    const Batch b = make_batch(20, 300 + static_cast<uint64_t>(i), cuda);
    const loss::YoloLoss::Result want = plain.step->forward_backward(b.images, b.targets, b.mask);
    plain.step->optimizer_step(s);
    const loss::YoloLoss::Result got = graph_step.run(b.images, b.targets, b.mask, s, true);
    ASSERT_NEAR(got.total.item<double>(), want.total.item<double>(), 1e-4 * std::abs(want.total.item<double>())) << i;
  }
  EXPECT_EQ(graph_step.graphs_captured(), 2);  // at momentum 0.9, then again at 0.8
  EXPECT_GE(graph_step.replays(), 4);
  const auto a = plain.model->named_parameters(), b = graphed.model->named_parameters();
  for (const auto& p : a) EXPECT_TRUE(at::allclose(p.value().cpu(), b[p.key()].cpu(), 1e-4, 1e-6)) << p.key();
}

}  // namespace
}  // namespace kestrel::train
