// Activation checkpointing: a checkpointed model computes the same loss, gradients and BatchNorm
// running statistics as the plain one (the recomputation must not count a batch twice), also under
// bf16 autocast, and keeps less memory alive between forward and backward.
#include <gtest/gtest.h>

#include <malloc.h>
#if defined(__SANITIZE_ADDRESS__)
// sanitizer/allocator_interface.h's declaration (the header is not installed with gcc's runtime).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

#include <numeric>

#include <ATen/ATen.h>

#include "kestrel/core/device.h"
#include "kestrel/core/error.h"
#include "kestrel/loss/yolo_loss.h"
#include "kestrel/models/checkpoint.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/yolo_model.h"

namespace kestrel::models {
namespace {

std::shared_ptr<YoloModel> yolov5n() {
  torch::manual_seed(0);
  return build_model(load_model_config(resolve_model_config_path("yolov5n")), 3);
}

std::vector<int> all_layers(const YoloModel& m) {
  std::vector<int> v(m.layers().size() - 1);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

struct Pass {
  at::Tensor loss;
  std::vector<at::Tensor> grads, buffers;
};

Pass run(YoloModel& model, const at::Tensor& images, bool bf16) {
  const loss::YoloLoss criterion(model.head(), loss::LossOptions{}, static_cast<int>(images.size(3)));
  at::Tensor targets = at::zeros({images.size(0), 2, 5});
  targets.narrow(-1, 1, 2).fill_(0.5);
  targets.narrow(-1, 3, 2).fill_(0.3);
  targets.select(1, 1).narrow(-1, 1, 4).copy_(at::tensor({0.3f, 0.6f, 0.2f, 0.4f}));
  const at::Tensor mask = at::ones({images.size(0), 2}, at::kBool);
  model.train();
  Pass p;
  {
    AutocastGuard autocast(c10::kCPU, at::kBFloat16, bf16);
    p.loss = criterion(model.forward(images), targets, mask).total;
  }
  p.loss.backward();
  for (const auto& t : model.parameters()) p.grads.push_back(t.grad().clone());
  for (const auto& b : model.buffers()) p.buffers.push_back(b.clone());
  return p;
}

double rel(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>() / std::max(b.to(at::kDouble).norm().item<double>(), 1e-30);
}

TEST(Checkpoint, SameLossGradientsAndRunningStatistics) {
  const at::Tensor images = at::rand({2, 3, 64, 64});
  auto plain = yolov5n(), ckpt = yolov5n();
  ckpt->set_checkpointed_layers(all_layers(*ckpt));
  EXPECT_GT(ckpt->num_checkpointed_layers(), 15);  // every single-input layer of yolov5n's body
  const Pass a = run(*plain, images, false), b = run(*ckpt, images, false);
  EXPECT_LT(rel(b.loss, a.loss), 1e-6);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_LT(rel(b.grads[i], a.grads[i]), 1e-5) << "gradient " << i;
  // Running mean/var and num_batches_tracked: updated once, in the first pass.
  for (size_t i = 0; i < a.buffers.size(); ++i) EXPECT_TRUE(at::allclose(b.buffers[i], a.buffers[i], 1e-5, 1e-7)) << "buffer " << i;
}

TEST(Checkpoint, RecomputationKeepsTheAutocastPrecision) {
  const at::Tensor images = at::rand({2, 3, 64, 64});
  auto plain = yolov5n(), ckpt = yolov5n();
  ckpt->set_checkpointed_layers(all_layers(*ckpt));
  const Pass a = run(*plain, images, true), b = run(*ckpt, images, true);
  EXPECT_LT(rel(b.loss, a.loss), 1e-6);
  // Recomputed in bf16 like the first pass: the same numbers (an fp32 recomputation would differ by
  // bf16's rounding, ~1e-2 relative).
  for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_LT(rel(b.grads[i], a.grads[i]), 1e-4) << "gradient " << i;
}

// The recomputation must not leave bf16 copies of the weights in autocast's cast cache: the next step's
// forward would find them and run on the weights from before the optimiser's update (the cache is only
// cleared when an autocast region exits, and the recomputation runs in backward, outside any region).
TEST(Checkpoint, NextStepUsesTheUpdatedWeightsUnderAutocast) {
  const at::Tensor images = at::rand({2, 3, 64, 64});
  auto plain = yolov5n(), ckpt = yolov5n();
  ckpt->set_checkpointed_layers(all_layers(*ckpt));
  // The checkpointed model goes last and first: no autocast region may exit (and clear the cache)
  // between its recomputation and its next forward.
  for (YoloModel* model : {plain.get(), ckpt.get()}) {
    (void)run(*model, images, true);
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) {  // a plain SGD step large enough to change every bf16 weight
      p.sub_(p.grad().sign() * p.abs().clamp_min(1e-3) * 0.1);
      p.mutable_grad() = at::Tensor();
    }
  }
  const Pass b = run(*ckpt, images, true), a = run(*plain, images, true);
  EXPECT_LT(rel(b.loss, a.loss), 1e-6) << "plain " << a.loss.item<double>() << ", checkpointed " << b.loss.item<double>();
  for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_LT(rel(b.grads[i], a.grads[i]), 1e-4) << "gradient " << i;
}

// Heap bytes in use (small blocks + mmap-ed large ones); under AddressSanitizer, whose allocator glibc's
// mallinfo2 does not see, the sanitizer's own count.
double heap_bytes() {
#if defined(__SANITIZE_ADDRESS__)
  return static_cast<double>(__sanitizer_get_current_allocated_bytes());
#else
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks + m.hblkhd);
#endif
}

TEST(Checkpoint, KeepsLessMemoryBetweenForwardAndBackward) {
  const at::Tensor images = at::rand({4, 3, 128, 128});
  auto held_after_forward = [&](bool checkpoint) {
    auto model = yolov5n();
    if (checkpoint) model->set_checkpointed_layers(all_layers(*model));
    model->train();
    const double before = heap_bytes();
    std::vector<at::Tensor> out = model->forward(images);
    const double held = heap_bytes() - before;  // activations saved for backward + the outputs
    at::Tensor sum = at::zeros({});
    for (auto& o : out) sum = sum + o.sum();
    sum.backward();
    return held;
  };
  const double plain = held_after_forward(false), ckpt = held_after_forward(true);
  EXPECT_LT(ckpt, 0.5 * plain) << "plain " << plain / 1e6 << " MB, checkpointed " << ckpt / 1e6 << " MB";
}

TEST(Checkpoint, EvalModeAndBadIndices) {
  auto model = yolov5n();
  model->set_checkpointed_layers(all_layers(*model));
  auto plain = yolov5n();
  model->eval();
  plain->eval();
  const at::Tensor x = at::rand({1, 3, 64, 64});
  torch::NoGradGuard g;
  EXPECT_TRUE(at::allclose(model->predict(x), plain->predict(x)));
  EXPECT_THROW(model->set_checkpointed_layers({99}), Error);
  EXPECT_THROW(model->set_checkpointed_layers({-1}), Error);
}

}  // namespace
}  // namespace kestrel::models
