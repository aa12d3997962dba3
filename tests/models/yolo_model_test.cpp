// Building, running and fusing models: output shapes, upstream state-dict names, fused == unfused.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_summary.h"
#include "kestrel/models/state_dict.h"
#include "kestrel/models/yolo_model.h"

namespace kestrel::models {
namespace {

std::shared_ptr<YoloModel> shipped(const std::string& name, int nc = 0) {
  return build_model(load_model_config(resolve_model_config_path(name)), nc);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Random BN statistics and affine parameters, and non-trivial implicit layers, so that fusion has
// something to fold (a fresh model's BN is an identity up to eps).
void randomize_normalisation(YoloModel& model) {
  torch::NoGradGuard no_grad;
  at::manual_seed(0);
  for (auto& [key, t] : state_dict(model)) {
    const bool bn_like = key.find("running_") != std::string::npos || key.find("implicit") != std::string::npos ||
                         ((key.find(".bn.") != std::string::npos || key.find("rbr_") != std::string::npos) &&
                          t.dim() == 1);
    if (!bn_like) continue;
    if (key.find("running_var") != std::string::npos) t.uniform_(0.5, 2.0);
    else if (key.find("running_mean") != std::string::npos) t.uniform_(-0.2, 0.2);
    else if (key.find("implicit") != std::string::npos) t.add_(at::randn_like(t) * 0.1);
    else if (ends_with(key, ".weight")) t.uniform_(0.5, 1.5);
    else if (ends_with(key, ".bias")) t.uniform_(-0.2, 0.2);
  }
}

struct ShapeCase {
  const char* config;
  int64_t batch, img;
};

class OutputShapes : public ::testing::TestWithParam<ShapeCase> {};

TEST_P(OutputShapes, RawLevelsAndDecoded) {
  const auto& c = GetParam();
  auto model = shipped(c.config, 3);
  torch::NoGradGuard no_grad;
  model->eval();
  at::Tensor x = at::rand({c.batch, 3, c.img, c.img});
  auto levels = model->forward(x);
  const auto& strides = model->head().strides();
  ASSERT_EQ(levels.size(), strides.size());
  int64_t total = 0;
  for (size_t i = 0; i < levels.size(); ++i) {
    const int64_t g = c.img / static_cast<int64_t>(strides[i]);
    EXPECT_EQ(levels[i].sizes().vec(), (std::vector<int64_t>{c.batch, 3, g, g, 8}));
    total += 3 * g * g;
  }
  at::Tensor decoded = model->head().decode(levels);
  EXPECT_EQ(decoded.sizes().vec(), (std::vector<int64_t>{c.batch, total, 8}));
  // objectness and class scores are probabilities; widths and heights positive
  EXPECT_TRUE((decoded.narrow(2, 4, 4) >= 0).all().item<bool>());
  EXPECT_TRUE((decoded.narrow(2, 4, 4) <= 1).all().item<bool>());
  EXPECT_TRUE((decoded.narrow(2, 2, 2) > 0).all().item<bool>());
}

// An IAuxDetect model (yolov7-w6: P3-P6) gives the 4 lead levels and then 4 auxiliary ones of the same
// shapes in training, and only the lead ones in eval; the auxiliary ones come from their own convs.
TEST(YoloModel, AuxHeadGivesAuxiliaryLevelsOnlyInTraining) {
  auto model = shipped("yolov7-w6", 2);
  ASSERT_TRUE(model->head().aux());
  torch::NoGradGuard no_grad;
  const at::Tensor x = at::rand({1, 3, 128, 128});
  model->train();
  const auto train_levels = model->forward(x);
  model->eval();
  const auto eval_levels = model->forward(x);
  ASSERT_EQ(train_levels.size(), 8u);
  ASSERT_EQ(eval_levels.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const int64_t g = 128 / (8 << i);
    EXPECT_EQ(eval_levels[i].sizes().vec(), (std::vector<int64_t>{1, 3, g, g, 7})) << i;
    EXPECT_EQ(train_levels[4 + i].sizes(), eval_levels[i].sizes()) << i;
    EXPECT_FALSE(at::allclose(train_levels[4 + i], train_levels[i])) << i;
  }
  EXPECT_EQ(model->predict(x).size(1), 3 * (16 * 16 + 8 * 8 + 4 * 4 + 2 * 2));
}

INSTANTIATE_TEST_SUITE_P(Sizes, OutputShapes,
                         ::testing::Values(ShapeCase{"yolov5n", 1, 64}, ShapeCase{"yolov5n", 2, 160},
                                           ShapeCase{"yolov5n", 3, 96}, ShapeCase{"yolov3-tiny", 2, 128},
                                           ShapeCase{"yolov7-tiny", 2, 96}, ShapeCase{"yolov7-tiny", 1, 224}));

TEST(YoloModel, StateDictKeysAreUpstreamNames) {
  auto v5 = state_dict(*shipped("yolov5s"));
  EXPECT_EQ(v5.front().first, "model.0.conv.weight");
  EXPECT_EQ(v5[1].first, "model.0.bn.weight");
  EXPECT_EQ(v5[3].first, "model.0.bn.running_mean");
  EXPECT_EQ(v5[5].first, "model.0.bn.num_batches_tracked");
  EXPECT_EQ(v5.back().first, "model.24.m.2.bias");
  auto v7 = state_dict(*shipped("yolov7"));
  EXPECT_EQ(v7.back().first, "model.105.im.2.implicit");
  bool has_rep = false;
  for (auto& [k, t] : v7) has_rep |= k == "model.102.rbr_dense.0.weight";
  EXPECT_TRUE(has_rep);
  auto v3 = state_dict(*shipped("yolov3"));
  bool repeated = false;  // rows with number > 1 are nn.Sequential: model.<i>.<j>.*
  for (auto& [k, t] : v3) repeated |= k == "model.6.7.cv2.conv.weight";
  EXPECT_TRUE(repeated);
}

TEST(YoloModel, AnchorsInGridUnitsAndBiasPriors) {
  auto model = shipped("yolov5s");
  const auto& head = model->head();
  // P3 anchors (10,13) at stride 8 -> (1.25, 1.625) grid cells
  EXPECT_FLOAT_EQ(head.anchors()[0][0][0].item<float>(), 1.25f);
  EXPECT_FLOAT_EQ(head.anchors()[0][0][1].item<float>(), 1.625f);
  EXPECT_FLOAT_EQ(head.anchors()[2][2][1].item<float>(), 326.0f / 32.0f);
}

TEST(YoloModel, AnchorsGivenLargeFirstAreReordered) {
  auto cfg = load_model_config(resolve_model_config_path("yolov5n"));
  YAML::Node flipped;
  for (int i = 2; i >= 0; --i) flipped.push_back(cfg.anchors[i]);
  cfg.anchors = flipped;
  auto model = build_model(cfg);
  EXPECT_FLOAT_EQ(model->head().anchors()[0][0][0].item<float>(), 10.0f / 8.0f);
}

class Fusion : public ::testing::TestWithParam<const char*> {};

TEST_P(Fusion, FusedOutputsEqualUnfused) {
  auto model = shipped(GetParam());
  randomize_normalisation(*model);
  torch::NoGradGuard no_grad;
  model->eval();
  at::manual_seed(1);
  at::Tensor x = at::rand({2, 3, 128, 128});
  // raw head outputs (logits and box offsets, O(1..10)), all levels flattened
  auto raw = [&] {
    std::vector<at::Tensor> flat;
    for (auto& level : model->forward(x)) flat.push_back(level.flatten());
    return at::cat(flat);
  };
  at::Tensor before = raw();
  const auto params_before = model_stats(*model, 128).parameters;
  model->fuse();
  at::Tensor after = raw();
  EXPECT_TRUE(model->fused());
  EXPECT_LT(model_stats(*model, 128).parameters, params_before);  // BN (and RepConv branches) are gone
  EXPECT_GT(before.abs().max().item<double>(), 1.0);  // the outputs are not trivially small
  const double max_diff = (after - before).abs().max().item<double>();
  EXPECT_LT(max_diff, 1e-4 * before.abs().max().item<double>()) << max_diff;
}

INSTANTIATE_TEST_SUITE_P(Configs, Fusion, ::testing::Values("yolov5n", "yolov3-tiny", "yolov7-tiny", "yolov7"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& c : n) if (c == '-') c = '_';
                           return n;
                         });

// RepConv with an identity branch (c1 == c2, stride 1) and grouped, and YOLOv7's Conv argument order.
TEST(Fusion, RepConvWithIdentityBranch) {
  const char* yaml = R"(
nc: 2
depth_multiple: 1.0
width_multiple: 1.0
anchors: [[10,13, 16,30]]
backbone:
  [[-1, 1, Conv, [16, 3, 2, None, 1, nn.LeakyReLU(0.1)]],
   [-1, 1, RepConv, [16, 3, 1]],
   [-1, 1, RepConv, [16, 3, 1, None, 2]],
   [-1, 1, RepConv, [32, 3, 2]],
  ]
head:
  [[[3], 1, IDetect, [nc, anchors]]]
)";
  auto model = build_model(parse_model_config(yaml, "rep.yaml"));
  auto keys = state_dict(*model);
  bool identity = false;
  for (auto& [k, t] : keys) identity |= k == "model.1.rbr_identity.running_var";
  EXPECT_TRUE(identity);
  randomize_normalisation(*model);
  torch::NoGradGuard no_grad;
  model->eval();
  at::Tensor x = at::rand({1, 3, 64, 64});
  at::Tensor before = model->forward(x)[0];
  model->fuse();
  EXPECT_LT((model->forward(x)[0] - before).abs().max().item<double>(), 1e-5 * std::max(1.0, before.abs().max().item<double>()));
}

}  // namespace
}  // namespace kestrel::models
