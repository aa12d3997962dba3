// Model EMA: hand-derived decay ramp and one averaging step on real model state.
#include <gtest/gtest.h>

#include <cmath>

#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/state_dict.h"
#include "kestrel/train/ema.h"

namespace kestrel::train {
namespace {

std::shared_ptr<models::YoloModel> tiny_model() {
  return models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), 2);
}

TEST(ModelEma, DecayRampsUpAsUpstream) {
  auto model = tiny_model();
  ModelEma ema(tiny_model(), *model);
  // d = 0.9999 (1 - exp(-updates / 2000))
  EXPECT_NEAR(ema.decay_at(1), 0.9999 * (1 - std::exp(-1.0 / 2000)), 1e-15);
  EXPECT_NEAR(ema.decay_at(2000), 0.9999 * (1 - std::exp(-1.0)), 1e-15);
  EXPECT_NEAR(ema.decay_at(100000), 0.9999, 1e-12);
}

TEST(ModelEma, AveragesFloatingStateAndLeavesCountersAlone) {
  auto model = tiny_model();
  ModelEma ema(tiny_model(), *model);
  const auto before = models::state_dict(ema.model());
  std::vector<at::Tensor> old;
  for (auto& [k, t] : before) old.push_back(t.clone());
  // Change every floating tensor of the trained model by +1, then average once.
  {
    torch::NoGradGuard g;
    for (auto& [k, t] : models::state_dict(*model))
      if (at::isFloatingType(t.scalar_type())) t.add_(1.0);
      else t.add_(5);
  }
  ema.update();
  const double d = ema.decay_at(1);
  const auto after = models::state_dict(ema.model());
  for (size_t i = 0; i < after.size(); ++i) {
    const at::Tensor& t = after[i].second;
    if (at::isFloatingType(t.scalar_type())) {
      // v = d v + (1 - d)(v + 1) = v + (1 - d)
      EXPECT_TRUE(at::allclose(t, old[i] + (1 - d), 1e-6, 1e-6)) << after[i].first;
    } else {
      EXPECT_TRUE(at::equal(t, old[i])) << after[i].first;  // num_batches_tracked: not averaged
    }
  }
  EXPECT_EQ(ema.updates(), 1);
  for (const auto& p : ema.model().parameters()) EXPECT_FALSE(p.requires_grad());
}

}  // namespace
}  // namespace kestrel::train
