// The loss scaler's state machine (torch.amp.GradScaler's rules, derived by hand).
#include <gtest/gtest.h>

#include <limits>

#include "kestrel/train/grad_scaler.h"

namespace kestrel::train {
namespace {

TEST(GradScaler, BacksOffOnInfAndNaNAndGrowsAfterTheInterval) {
  GradScaler scaler({true, 1024.0, 2.0, 0.5, /*growth_interval=*/3}, at::kCPU);
  EXPECT_DOUBLE_EQ(scaler.scale(at::ones({})).item<double>(), 1024.0);
  auto step = [&](float g) {
    std::vector<at::Tensor> grads = {at::full({2}, g)};
    scaler.begin_step();
    scaler.unscale(grads);
    const bool skipped = scaler.found_inf().item<float>() != 0;
    scaler.update();
    return std::make_pair(skipped, grads[0]);
  };
  auto [skipped, g] = step(2048.0f);
  EXPECT_FALSE(skipped);
  EXPECT_FLOAT_EQ(g[0].item<float>(), 2.0f);  // unscaled in place: 2048 / 1024
  EXPECT_TRUE(step(std::numeric_limits<float>::infinity()).first);
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 512.0);
  EXPECT_TRUE(step(std::numeric_limits<float>::quiet_NaN()).first);
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 256.0);
  EXPECT_EQ(scaler.skipped_steps(), 2);
  // Three clean steps in a row double the scale once; the clean step before the infs does not count.
  step(1.0f);
  step(1.0f);
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 256.0);
  step(1.0f);
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 512.0);
  EXPECT_EQ(scaler.skipped_steps(), 2);
}

TEST(GradScaler, DisabledIsTransparent) {
  GradScaler scaler({false}, at::kCPU);
  const at::Tensor loss = at::full({}, 3.0);
  EXPECT_TRUE(scaler.scale(loss).equal(loss));
  EXPECT_FALSE(scaler.grad_scale().defined());
  EXPECT_FALSE(scaler.found_inf().defined());
  EXPECT_EQ(scaler.current_scale(), 1.0);
}

TEST(GradScaler, StateRoundTrip) {
  GradScaler a({true, 64.0}, at::kCPU), b({true, 65536.0}, at::kCPU);
  std::vector<at::Tensor> grads = {at::full({1}, std::numeric_limits<float>::infinity())};
  a.begin_step();
  a.unscale(grads);
  a.update();
  b.load_state(a.state(), "test");
  EXPECT_EQ(b.current_scale(), 32.0);
  EXPECT_EQ(b.skipped_steps(), 1);
}

}  // namespace
}  // namespace kestrel::train
