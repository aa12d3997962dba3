// The optimiser, both its fused kernels and its foreach algorithm (the ablation baseline), against
// LibTorch's own (independent, per-parameter) torch::optim implementations, with upstream's three
// groups; loss-scaler interplay; state round trip.
#include <gtest/gtest.h>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "kestrel/core/error.h"
#include "kestrel/train/grad_scaler.h"
#include "kestrel/train/optimizer.h"

namespace kestrel::train {
namespace {

// Three groups of random parameters, and a deterministic "gradient" per step.
struct Problem {
  ParamGroups groups;
  std::vector<at::Tensor> all;
  explicit Problem(int seed) {
    at::manual_seed(seed);
    auto make = [&](std::vector<int64_t> shape) {
      at::Tensor t = at::randn(shape).set_requires_grad(true);
      all.push_back(t);
      return t;
    };
    groups.biases = {make({4}), make({3})};
    groups.weights = {make({4, 3}), make({2, 2, 3, 3})};
    groups.norm_weights = {make({4})};
  }
  Problem clone() const {
    Problem p(0);
    for (size_t i = 0; i < all.size(); ++i) p.all[i].detach().copy_(all[i].detach()), p.all[i].set_requires_grad(true);
    return p;
  }
  std::vector<at::Tensor> grads() const {
    std::vector<at::Tensor> g;
    for (const auto& p : all) g.push_back(p.grad());
    return g;
  }
  void set_grads(int step) {
    for (size_t i = 0; i < all.size(); ++i) {
      at::manual_seed(1000 * step + static_cast<int>(i));
      all[i].mutable_grad() = at::randn(all[i].sizes());
    }
  }
};

void expect_same(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(at::allclose(a[i], b[i], 0, tol)) << "parameter " << i << " max diff "
                                                    << (a[i] - b[i]).abs().max().item<double>();
}

// Every test runs with the fused kernels and with the foreach algorithm.
OptimizerOptions options(OptimizerKind kind, double weight_decay, bool fused) {
  OptimizerOptions o{kind, weight_decay};
  o.fused = fused;
  return o;
}

class Optimizers : public ::testing::TestWithParam<bool> {
 protected:
  OptimizerOptions options(OptimizerKind kind, double weight_decay) const {
    return train::options(kind, weight_decay, GetParam());
  }
};
INSTANTIATE_TEST_SUITE_P(Algorithm, Optimizers, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Fused" : "Foreach"; });

TEST_P(Optimizers, SgdNesterovMatchesTorchOptimWithThreeGroups) {
  Problem mine(1), reference = mine.clone();
  Optimizer opt(mine.groups, options(OptimizerKind::sgd, /*weight_decay=*/5e-4));
  // torch::optim::SGD, groups as upstream: biases (no decay), weights (decay), norm weights (no decay).
  std::vector<torch::optim::OptimizerParamGroup> groups;
  const double momentum = 0.937;
  auto options = [&](double wd) {
    return std::make_unique<torch::optim::SGDOptions>(
        torch::optim::SGDOptions(0.1).momentum(momentum).nesterov(true).weight_decay(wd));
  };
  groups.emplace_back(std::vector<at::Tensor>{reference.all[0], reference.all[1]}, options(0));
  groups.emplace_back(std::vector<at::Tensor>{reference.all[2], reference.all[3]}, options(5e-4));
  groups.emplace_back(std::vector<at::Tensor>{reference.all[4]}, options(0));
  torch::optim::SGD sgd(groups, torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 5; ++step) {
    const std::array<double, 3> lr = {0.1 - 0.01 * step, 0.01 + 0.001 * step, 0.02};  // warm-up-like ramps
    for (size_t g = 0; g < 3; ++g) {
      auto& o = static_cast<torch::optim::SGDOptions&>(sgd.param_groups()[g].options());
      o.lr(lr[g]);
    }
    mine.set_grads(step);
    reference.set_grads(step);
    opt.step(lr, momentum);
    sgd.step();
  }
  expect_same(mine.all, reference.all, 1e-6);
}

// A warm-up that starts at momentum 0 (hyp warmup_momentum: 0): torch's SGD then takes a plain step and
// makes no momentum buffer, so the first step with momentum > 0 starts its buffer from that step's gradient.
// (LibTorch's fused kernel refused the buffers outright at momentum 0.)
TEST_P(Optimizers, SgdWarmupFromMomentumZeroMatchesTorchOptim) {
  Problem mine(8), reference = mine.clone();
  Optimizer opt(mine.groups, options(OptimizerKind::sgd, /*weight_decay=*/5e-4));
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto options = [&](double wd) {
    return std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(wd));
  };
  groups.emplace_back(std::vector<at::Tensor>{reference.all[0], reference.all[1]}, options(0));
  groups.emplace_back(std::vector<at::Tensor>{reference.all[2], reference.all[3]}, options(5e-4));
  groups.emplace_back(std::vector<at::Tensor>{reference.all[4]}, options(0));
  torch::optim::SGD sgd(groups, torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
  const std::array<double, 4> momenta = {0.0, 0.5, 0.937, 0.937};  // the warm-up's ramp from 0
  for (int step = 0; step < 4; ++step) {
    for (auto& group : sgd.param_groups()) static_cast<torch::optim::SGDOptions&>(group.options()).momentum(momenta[step]);
    mine.set_grads(step);
    reference.set_grads(step);
    opt.step({0.1, 0.1, 0.1}, momenta[step]);
    sgd.step();
  }
  expect_same(mine.all, reference.all, 1e-6);
}

// By hand, one parameter: p = 1, gradients 0.5 then 0.25, lr 0.1, momentum 0 then 0.8. Step 1 is plain:
// p = 1 - 0.1 * 0.5 = 0.95; step 2 starts the buffer at its gradient (0.25) and steps by Nesterov's
// g + 0.8 * buf = 0.45: p = 0.95 - 0.045 = 0.905.
TEST_P(Optimizers, SgdStepAtMomentumZeroLeavesNoBuffer) {
  ParamGroups groups;
  at::Tensor p = at::ones({1}).set_requires_grad(true);
  groups.weights = {p};
  Optimizer opt(groups, options(OptimizerKind::sgd, /*weight_decay=*/0.0));
  p.mutable_grad() = at::full({1}, 0.5);
  opt.step({0.1, 0.1, 0.1}, 0.0);
  EXPECT_NEAR(p.item<double>(), 0.95, 1e-7);
  p.mutable_grad() = at::full({1}, 0.25);
  opt.step({0.1, 0.1, 0.1}, 0.8);
  EXPECT_NEAR(p.item<double>(), 0.905, 1e-7);
}


template <typename TorchOptimizer, typename TorchOptions>
void check_adam(OptimizerKind kind, bool fused) {
  Problem mine(2), reference = mine.clone();
  Optimizer opt(mine.groups, options(kind, /*weight_decay=*/1e-2, fused));
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto options = [&](double wd) {
    return std::make_unique<TorchOptions>(TorchOptions(1e-2).betas({0.9, 0.999}).eps(1e-8).weight_decay(wd));
  };
  groups.emplace_back(std::vector<at::Tensor>{reference.all[0], reference.all[1]}, options(0));
  groups.emplace_back(std::vector<at::Tensor>{reference.all[2], reference.all[3]}, options(1e-2));
  groups.emplace_back(std::vector<at::Tensor>{reference.all[4]}, options(0));
  TorchOptimizer adam(groups, TorchOptions(1e-2));
  for (int step = 0; step < 5; ++step) {
    mine.set_grads(step);
    reference.set_grads(step);
    opt.step({1e-2, 1e-2, 1e-2}, 0.9);
    adam.step();
  }
  expect_same(mine.all, reference.all, 1e-6);
}

TEST_P(Optimizers, AdamMatchesTorchOptim) {
  check_adam<torch::optim::Adam, torch::optim::AdamOptions>(OptimizerKind::adam, GetParam());
}
TEST_P(Optimizers, AdamWMatchesTorchOptim) {
  check_adam<torch::optim::AdamW, torch::optim::AdamWOptions>(OptimizerKind::adamw, GetParam());
}

TEST_P(Optimizers, ParametersWithoutGradientOrFrozenAreUntouched) {
  Problem p(3);
  p.all[2].set_requires_grad(false);  // frozen: not even in the optimiser
  Optimizer opt(p.groups, options(OptimizerKind::sgd, 5e-4));
  const at::Tensor frozen = p.all[2].detach().clone(), unused = p.all[3].detach().clone();
  p.set_grads(0);
  p.all[3].mutable_grad() = at::Tensor();  // no gradient this step (e.g. an unused branch)
  opt.step({0.1, 0.1, 0.1}, 0.9);
  EXPECT_TRUE(at::equal(p.all[2].detach(), frozen));
  EXPECT_TRUE(at::equal(p.all[3].detach(), unused));
  EXPECT_FALSE(at::equal(p.all[0].detach(), p.all[0].detach() * 0));  // others moved (sanity)
}

TEST_P(Optimizers, ScaledGradientsAreUnscaledInsideTheStep) {
  // grads * 1024 with grad_scale 1024 must give the same update as plain grads.
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::adamw}) {
    Problem plain(4), scaled = plain.clone();
    Optimizer a(plain.groups, options(kind, 5e-4)), b(scaled.groups, options(kind, 5e-4));
    GradScaler scaler({true, 1024.0}, at::kCPU);
    for (int step = 0; step < 3; ++step) {
      plain.set_grads(step);
      scaled.set_grads(step);
      for (auto& p : scaled.all) p.mutable_grad().mul_(1024.0);
      scaler.begin_step();
      scaler.check(scaled.grads());
      a.step({0.01, 0.01, 0.01}, 0.9);
      b.step({0.01, 0.01, 0.01}, 0.9, scaler.grad_scale(), scaler.found_inf());
      scaler.update();
    }
    expect_same(plain.all, scaled.all, 1e-6);
  }
}

TEST_P(Optimizers, InfGradientSkipsTheWholeStepAndAdamStepCount) {
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adam}) {
    Problem p(5), reference = p.clone();
    Optimizer opt(p.groups, options(kind, 5e-4)), ref(reference.groups, options(kind, 5e-4));
    GradScaler scaler({true, 1024.0}, at::kCPU);
    // Step 0 has an inf in one gradient: nothing may change, and Adam's bias correction must not count it.
    p.set_grads(0);
    p.all[1].mutable_grad()[0] = std::numeric_limits<float>::infinity();
    const std::vector<at::Tensor> before = [&] {
      std::vector<at::Tensor> c;
      for (auto& t : p.all) c.push_back(t.detach().clone());
      return c;
    }();
    scaler.begin_step();
    scaler.check(p.grads());
    opt.step({0.01, 0.01, 0.01}, 0.9, scaler.grad_scale(), scaler.found_inf());
    scaler.update();
    expect_same(p.all, before, 0);
    EXPECT_EQ(scaler.skipped_steps(), 1);
    EXPECT_EQ(scaler.current_scale(), 512.0);
    // Then the same clean steps on both: the skipped step must have left no trace (momentum, Adam steps).
    for (int step = 1; step < 4; ++step) {
      p.set_grads(step);
      reference.set_grads(step);
      for (auto& t : p.all) t.mutable_grad().mul_(512.0);
      scaler.begin_step();
      scaler.check(p.grads());
      opt.step({0.01, 0.01, 0.01}, 0.9, scaler.grad_scale(), scaler.found_inf());
      scaler.update();
      ref.step({0.01, 0.01, 0.01}, 0.9);
    }
    expect_same(p.all, reference.all, 1e-6);
  }
}

TEST_P(Optimizers, StateRoundTripContinuesIdentically) {
  Problem a(6), b = a.clone();
  Optimizer first(a.groups, options(OptimizerKind::adamw, 1e-2)), second(b.groups, options(OptimizerKind::adamw, 1e-2));
  for (int step = 0; step < 2; ++step) {
    a.set_grads(step);
    b.set_grads(step);
    first.step({0.01, 0.01, 0.01}, 0.9);
    second.step({0.01, 0.01, 0.01}, 0.9);
  }
  // A third optimiser restored from the first's state continues exactly like the second.
  Problem c = a.clone();
  Optimizer restored(c.groups, options(OptimizerKind::adamw, 1e-2));
  auto state = first.state();
  for (auto& [name, t] : state) t = t.clone();
  restored.load_state(state, "test");
  c.set_grads(2);
  b.set_grads(2);
  restored.step({0.01, 0.01, 0.01}, 0.9);
  second.step({0.01, 0.01, 0.01}, 0.9);
  expect_same(c.all, b.all, 0);
  state.pop_back();
  EXPECT_THROW(restored.load_state(state, "test"), Error);
}

// The two algorithms agree with each other over a longer run with every ingredient of a training step:
// three groups, weight decay, changing learning rates, scaled gradients and one skipped inf step.
TEST(Optimizer, FusedAndForeachAgreeOverAScaledRunWithASkippedStep) {
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::adamw}) {
    Problem fused(7), foreach = fused.clone();
    Optimizer a(fused.groups, options(kind, 5e-4, true)), b(foreach.groups, options(kind, 5e-4, false));
    GradScaler scale_a({true, 256.0}, at::kCPU), scale_b({true, 256.0}, at::kCPU);
    for (int step = 0; step < 8; ++step) {
      const std::array<double, 3> lr = {0.05 - 0.005 * step, 0.001 * (step + 1), 0.01};
      for (auto* run : {&fused, &foreach}) {
        run->set_grads(step);
        for (auto& t : run->all) t.mutable_grad().mul_(256.0 / (1 << (step > 3)));  // the scale after the skip
        if (step == 3) run->all[2].mutable_grad()[0][0] = std::numeric_limits<float>::quiet_NaN();
      }
      scale_a.begin_step();
      scale_b.begin_step();
      scale_a.check(fused.grads());
      scale_b.check(foreach.grads());
      a.step(lr, 0.9, scale_a.grad_scale(), scale_a.found_inf());
      b.step(lr, 0.9, scale_b.grad_scale(), scale_b.found_inf());
      scale_a.update();
      scale_b.update();
    }
    EXPECT_EQ(scale_b.skipped_steps(), 1);
    // float32 rounding of two orders of operations, a few ulps per step over 7 steps (|p| ~ 1)
    expect_same(fused.all, foreach.all, 1e-5);
  }
}

TEST(Optimizer, KindNamesFollowUpstream) {
  EXPECT_EQ(parse_optimizer_kind("SGD"), OptimizerKind::sgd);
  EXPECT_EQ(parse_optimizer_kind("adamw"), OptimizerKind::adamw);
  EXPECT_EQ(parse_optimizer_kind("Adam"), OptimizerKind::adam);
  EXPECT_THROW(parse_optimizer_kind("RMSProp"), Error);
}

}  // namespace
}  // namespace kestrel::train
