// Fused batch norm + SiLU against LibTorch's own layers (torch::nn::BatchNorm2d in training mode, then
// at::silu, differentiated by autograd): output, running statistics and the gradients of x, weight and
// bias. The CPU runs the kernels' per-element code in loops; the CUDA kernels are compared on a GPU.
#include <gtest/gtest.h>

#include <numeric>

#include <torch/cuda.h>

#include <ATen/ATen.h>

#include "kestrel/core/error.h"
#include "kestrel/loss/yolo_loss.h"
#include "kestrel/models/batch_norm_silu.h"
#include "kestrel/models/common.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/yolo_model.h"

namespace kestrel::models {
namespace {

struct Outcome {
  at::Tensor y, dx, dweight, dbias, running_mean, running_var, batches;
};

// One training forward and backward of a BN(C) with non-trivial affine parameters; loss = Σ y·g.
Outcome run(bool fused, const at::Tensor& x_in, const at::Tensor& g) {
  torch::manual_seed(3);
  BatchNorm2d bn = make_batch_norm(x_in.size(1));
  {
    torch::NoGradGuard no_grad;  // drawn on the CPU, then moved: the same values for every device
    bn->weight.uniform_(0.5, 1.5);
    bn->bias.uniform_(-0.5, 0.5);
    bn->running_mean.uniform_(-1, 1);
    bn->running_var.uniform_(0.5, 2);
  }
  bn->to(x_in.device());
  bn->train();
  at::Tensor x = x_in.detach().clone().requires_grad_(true);
  at::Tensor y = fused ? batch_norm_silu(*bn, x) : at::silu(bn->forward(x));
  (y.to(at::kFloat) * g).sum().backward();
  return {y.detach(), x.grad(), bn->weight.grad(), bn->bias.grad(), bn->running_mean.clone(), bn->running_var.clone(),
          bn->num_batches_tracked.clone()};
}

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.to(at::kDouble).cpu(), y = b.to(at::kDouble).cpu();
  return ((x - y).abs().max() / y.abs().max().clamp_min(1e-12)).item<double>();
}

void expect_same(const Outcome& fused, const Outcome& plain, double tol) {
  EXPECT_LT(max_rel(fused.y, plain.y), tol) << "output";
  EXPECT_LT(max_rel(fused.dx, plain.dx), tol) << "input gradient";
  EXPECT_LT(max_rel(fused.dweight, plain.dweight), tol) << "weight gradient";
  EXPECT_LT(max_rel(fused.dbias, plain.dbias), tol) << "bias gradient";
  EXPECT_LT(max_rel(fused.running_mean, plain.running_mean), 1e-5) << "running mean";
  EXPECT_LT(max_rel(fused.running_var, plain.running_var), 1e-5) << "running variance";
  EXPECT_TRUE(at::equal(fused.batches.cpu(), plain.batches.cpu()));
}

TEST(BatchNormSiLU, MatchesTheUnfusedLayersOnCpu) {
  torch::manual_seed(0);
  // Per-channel offsets and scales, so that mean, variance and the sums differ between channels.
  const at::Tensor x = at::randn({4, 6, 5, 7}) * at::linspace(0.5, 3, 6).view({1, 6, 1, 1}) +
                       at::linspace(-2, 2, 6).view({1, 6, 1, 1});
  const at::Tensor g = at::randn({4, 6, 5, 7});
  for (bool cl : {false, true}) {
    const at::Tensor input = cl ? x.contiguous(at::MemoryFormat::ChannelsLast) : x;
    expect_same(run(true, input, g), run(false, input, g), 1e-5);
  }
}

TEST(BatchNormSiLU, Bfloat16InputComputesInFloat) {
  torch::manual_seed(1);
  const at::Tensor x = (at::randn({2, 4, 6, 6}) * 2 + 1).to(at::kBFloat16);
  const at::Tensor g = at::randn({2, 4, 6, 6});
  const Outcome fused = run(true, x, g);
  EXPECT_EQ(fused.y.scalar_type(), at::kBFloat16);
  EXPECT_EQ(fused.dx.scalar_type(), at::kBFloat16);
  EXPECT_EQ(fused.dweight.scalar_type(), at::kFloat);
  // Against the unfused layers in float on the same (bf16-valued) input: bf16's 8-bit mantissa.
  const Outcome plain = run(false, x.to(at::kFloat), g);
  EXPECT_LT(max_rel(fused.y, plain.y), 1e-2);
  EXPECT_LT(max_rel(fused.dx, plain.dx), 2e-2);
  // The gradient arriving at a bf16 output is bf16 too (the float run's is not): its rounding, averaged.
  EXPECT_LT(max_rel(fused.dweight, plain.dweight), 1e-2);
  EXPECT_LT(max_rel(fused.dbias, plain.dbias), 1e-2);
}

TEST(BatchNormSiLU, UnsupportedInputsAreErrors) {
  BatchNorm2d bn = make_batch_norm(3);
  bn->train();
  EXPECT_FALSE(batch_norm_silu_supports(at::zeros({1, 3, 4, 4}, at::kDouble)));
  EXPECT_FALSE(batch_norm_silu_supports(at::zeros({3, 4, 4})));
  EXPECT_THROW(batch_norm_silu(*bn, at::zeros({1, 3, 4, 4}, at::kDouble)), Error);
  EXPECT_THROW(batch_norm_silu(*bn, at::zeros({1, 3, 1, 1})), Error);  // one value per channel, as BatchNorm2d
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 0);
}

// A yolov5n whose Conv blocks use the fused operation trains like the plain one: the same loss and
// gradients for one step, also with every layer checkpointed (recomputation must not count a batch twice
// in the running statistics).
TEST(BatchNormSiLU, ModelWithFusedBlocksTrainsLikeThePlainOne) {
  const auto config = load_model_config(resolve_model_config_path("yolov5n"));
  torch::manual_seed(5);  // LibTorch seeds its default generator at random: fixed images, a fixed case
  const at::Tensor images = at::rand({2, 3, 64, 64});
  at::Tensor targets = at::zeros({2, 1, 5});
  targets.narrow(-1, 1, 4).copy_(at::tensor({0.5f, 0.5f, 0.3f, 0.4f}));
  const at::Tensor mask = at::ones({2, 1}, at::kBool);
  auto step = [&](bool fused, bool checkpoint) {
    torch::manual_seed(0);
    auto model = build_model(config, 3);
    // yolov5n.yaml's Conv blocks (all SiLU): backbone 1+1+5+1+7+1+9+1+5+2 = 33 (a C3 of n bottlenecks holds
    // 3 + 2n), head 1+5+1+5+1+5+1+5 = 24; Detect's convolutions have no BN.
    if (fused) {
      EXPECT_EQ(set_fused_batch_norm_silu(*model, true), 57);
    }
    if (checkpoint) {
      std::vector<int> layers(model->layers().size() - 1);
      std::iota(layers.begin(), layers.end(), 0);
      model->set_checkpointed_layers(layers);
    }
    model->train();
    const loss::YoloLoss criterion(model->head(), loss::LossOptions{}, 64);
    const at::Tensor loss = criterion(model->forward(images), targets, mask).total;
    loss.backward();
    std::vector<at::Tensor> state{loss.detach()};
    for (const auto& p : model->parameters()) state.push_back(p.grad().clone());
    for (const auto& b : model->buffers()) state.push_back(b.clone());
    return state;
  };
  const auto plain = step(false, false);
  for (bool checkpoint : {false, true}) {
    const auto fused = step(true, checkpoint);
    ASSERT_EQ(fused.size(), plain.size());
    EXPECT_LT(max_rel(fused[0], plain[0]), 1e-5) << "loss";
    // The fused backward sums in double, ATen's BN backward in float: over random images the largest
    // difference of a gradient, relative to its largest element, ranged 0.4e-4 to 3.3e-4 (head layers).
    for (size_t i = 1; i < plain.size(); ++i)
      EXPECT_LT(max_rel(fused[i], plain[i]), 5e-4) << "gradient or buffer " << i << (checkpoint ? " (checkpointed)" : "");
  }
}

TEST(BatchNormSiLU, CudaMatchesTheUnfusedLayers) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(2);
  // Enough rows for many blocks of the sums kernel (8 x 40 x 40 = 12800 rows) and channels beyond one block (70).
  const at::Tensor x = (at::randn({8, 70, 40, 40}) * 1.5 + 0.3).to(at::kCUDA).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor g = at::randn({8, 70, 40, 40}).to(at::kCUDA);
  expect_same(run(true, x, g), run(false, x, g), 1e-4);
  // fp16 (autocast's convolution output) against float layers on the same half-valued input.
  const at::Tensor xh = x.to(at::kHalf);
  const Outcome fused = run(true, xh, g), plain = run(false, xh.to(at::kFloat), g);
  EXPECT_EQ(fused.y.scalar_type(), at::kHalf);
  EXPECT_LT(max_rel(fused.y, plain.y), 2e-3);
  EXPECT_LT(max_rel(fused.dx, plain.dx), 5e-3);
  EXPECT_LT(max_rel(fused.dweight, plain.dweight), 1e-2);  // the gradient arrives in half precision
  EXPECT_LT(max_rel(fused.dbias, plain.dbias), 1e-2);
  // The CPU loops and the kernels agree (same per-element code; sums in another order).
  const Outcome cpu = run(true, x.cpu(), g.cpu());
  expect_same(run(true, x, g), cpu, 1e-4);
}

}  // namespace
}  // namespace kestrel::models
