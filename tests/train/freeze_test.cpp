// --freeze / --checkpoint layer selection and freezing, and --freeze-bn, on yolov5n.
#include <gtest/gtest.h>

#include <torch/nn/modules/batchnorm.h>

#include "kestrel/core/error.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/train/freeze.h"

namespace kestrel::train {
namespace {

std::shared_ptr<models::YoloModel> yolov5n() {
  return models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), 3);
}

TEST(Freeze, LayerSelectionAsUpstream) {
  EXPECT_EQ(selected_layers({0}), std::vector<int>{});
  EXPECT_EQ(selected_layers({3}), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(selected_layers({1, 4}), (std::vector<int>{1, 4}));  // a list: exactly those layers
}

TEST(Freeze, OnlyTheSelectedLayersParametersStopLearning) {
  auto model = yolov5n();
  // yolov5n layers 0 and 1 are Conv blocks (conv weight, BN weight, BN bias): 3 tensors each.
  const std::vector<std::string> frozen = freeze_layers(*model, {2});
  EXPECT_EQ(frozen, (std::vector<std::string>{"model.0.conv.weight", "model.0.bn.weight", "model.0.bn.bias",
                                              "model.1.conv.weight", "model.1.bn.weight", "model.1.bn.bias"}));
  for (const auto& p : model->named_parameters()) {
    const bool in_first_two = p.key().rfind("model.0.", 0) == 0 || p.key().rfind("model.1.", 0) == 0;
    EXPECT_EQ(p.value().requires_grad(), !in_first_two) << p.key();
  }
  // "model.1." must not catch layers 10..19; {1, 10} freezes exactly those two.
  EXPECT_EQ(freeze_layers(*model, {1, 10}).size(), 6u);
  for (const auto& p : model->named_parameters()) {
    const bool hit = p.key().rfind("model.1.", 0) == 0 || p.key().rfind("model.10.", 0) == 0;
    EXPECT_EQ(p.value().requires_grad(), !hit) << p.key();
  }
  EXPECT_TRUE(freeze_layers(*model, {0}).empty());  // upstream's default: nothing frozen
}

// yolov5n has 25 layers (0..23 and the Detect head, 24): --freeze 24 leaves the head to train, while 25 (or
// 999) freezes everything, which upstream only finds out in backward; indices beyond the model, or negative
// ones, are refused rather than ignored.
TEST(Freeze, NothingLeftToTrainAndLayersBeyondTheModelAreErrors) {
  auto model = yolov5n();
  EXPECT_FALSE(freeze_layers(*model, {24}).empty());
  const auto message = [&](const std::vector<int>& spec) {
    try {
      freeze_layers(*model, spec);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({25}).find("nothing is left to train"), std::string::npos) << message({25});
  EXPECT_NE(message({999}).find("--freeze 999: the model has 25 layers (0..24)"), std::string::npos) << message({999});
  EXPECT_NE(message({0, 1, 999}).find("--freeze: layer 999 is outside the model's layers 0..24"), std::string::npos);
  EXPECT_NE(message({-3}).find("--freeze: a layer count must be 0 or more"), std::string::npos) << message({-3});
  EXPECT_NE(message({1, -2}).find("--freeze: layer indices count from 0"), std::string::npos) << message({1, -2});
}

TEST(Freeze, FreezeBnPutsEveryBatchNormInEvalMode) {
  auto model = yolov5n();
  model->train();
  set_batchnorm_eval(*model);
  int bn = 0, other_training = 0;
  for (const auto& m : model->modules()) {
    if (dynamic_cast<torch::nn::BatchNorm2dImpl*>(m.get())) {
      ++bn;
      EXPECT_FALSE(m->is_training());
    } else if (m->is_training()) {
      ++other_training;
    }
  }
  EXPECT_GT(bn, 50);              // yolov5n has 57 BatchNorm layers
  EXPECT_GT(other_training, 0);   // the rest stays in training mode
}

}  // namespace
}  // namespace kestrel::train
