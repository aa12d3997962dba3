// Detect's output-bias priors (upstream _initialize_biases): objectness log(8 / (640 / s)^2) at stride s,
// classes log(0.6 / (nc - 0.99999)) in YOLOv5's models/yolo.py and log(0.6 / (nc - 0.99)) in YOLOv7's, for
// every YOLOv7 head (IDetect and plain Detect alike).
#include "kestrel/models/detect.h"

#include <gtest/gtest.h>

#include <array>
#include <map>
#include <string>
#include <cmath>
#include <memory>
#include <tuple>
#include <utility>

#include <ATen/ATen.h>

#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/state_dict.h"
#include "kestrel/models/yolo_model.h"

namespace kestrel::models {
namespace {

// The bias change initialize() makes at level 0 (stride 8) of a 2-class head: [objectness, class 0, class 1].
std::array<double, 3> prior_added(bool implicit, bool yolov7_family) {
  at::manual_seed(5);
  const auto head = std::make_shared<Detect>(2, std::vector<std::vector<double>>{{10, 13}, {30, 61}, {116, 90}},
                                             std::vector<int64_t>{4, 4, 4}, implicit);
  const auto bias = [&] { return head->named_parameters()["m.0.bias"].detach().clone().view({1, 7}); };
  const at::Tensor before = bias();
  head->initialize({8, 16, 32}, yolov7_family);
  const at::Tensor added = (bias() - before).to(at::kDouble);
  return {added[0][4].item<double>(), added[0][5].item<double>(), added[0][6].item<double>()};
}

TEST(Detect, BiasPriorsFollowTheModelsCodebase) {
  const double objectness = std::log(8.0 / std::pow(640.0 / 8, 2));
  const double v5_class = std::log(0.6 / (2 - 0.99999)), v7_class = std::log(0.6 / (2 - 0.99));
  for (const auto& [implicit, family, expected_class] :
       {std::tuple{false, false, v5_class}, std::tuple{false, true, v7_class}, std::tuple{true, false, v7_class}}) {
    const auto added = prior_added(implicit, family);
    EXPECT_NEAR(added[0], objectness, 1e-6) << implicit << family;
    EXPECT_NEAR(added[1], expected_class, 1e-6) << implicit << family;
    EXPECT_NEAR(added[2], expected_class, 1e-6) << implicit << family;
  }
  EXPECT_GT(std::abs(v7_class - v5_class), 0.009);  // the two formulas are told apart at 1e-6
}

// Built models pick the formula by family: yolov4-csp (YOLOv7's repository, a plain Detect) gets YOLOv7's.
// With nc = 1 the two priors are 4.09 and 11.0, far apart next to the conv bias initialisation
// (|b| <= 1 / sqrt(fan_in) <= 0.18 here).
TEST(Detect, BuiltModelsPickThePriorByFamily) {
  for (const auto& [config, expected] : {std::pair{"yolov4-csp", std::log(0.6 / (1 - 0.99))}, std::pair{"yolov5n", std::log(0.6 / (1 - 0.99999))}}) {
    const auto model = build_model(load_model_config(resolve_model_config_path(config)), 1);
    const at::Tensor bias = model->head().named_parameters()["m.0.bias"].detach().view({3, 6});
    const at::Tensor cls = bias.select(1, 5);
    EXPECT_LT((cls - expected).abs().max().item<double>(), 0.2) << config << ": " << cls;
  }
}

// YOLOv7's plain Detect registers anchor_grid (pixels: yolov7 models/yolo.py Detect.__init__), YOLOv5's does
// not; a file without it (written before kestrel kept it, or imported) loads with it made from its anchors.
TEST(Detect, Yolov7PlainDetectKeepsAnAnchorGrid) {
  const auto keys_of = [](const YoloModel& m) {
    std::map<std::string, at::Tensor> keys;
    for (const auto& [key, t] : state_dict(m)) keys[key] = t;
    return keys;
  };
  const auto v5 = build_model(load_model_config(resolve_model_config_path("yolov5n")), 1);
  for (const auto& [key, t] : keys_of(*v5)) EXPECT_EQ(key.find("anchor_grid"), std::string::npos) << key;
  const auto v7 = build_model(load_model_config(resolve_model_config_path("yolov4-csp")), 1);
  const auto keys = keys_of(*v7);
  std::string grid_key;
  for (const auto& [key, t] : keys)
    if (key.size() > 12 && key.compare(key.size() - 12, 12, ".anchor_grid") == 0) grid_key = key;
  ASSERT_FALSE(grid_key.empty());
  const std::string prefix = grid_key.substr(0, grid_key.size() - 11);
  // yolov4-csp.yaml's anchors, in pixels, P3 to P5 ([12,16, 19,36, 40,28], ...): the grid holds them as written.
  const at::Tensor grid = keys.at(grid_key).view({3, 3, 2});
  EXPECT_EQ(grid[0][0][0].item<float>(), 12.f);
  EXPECT_EQ(grid[0][0][1].item<float>(), 16.f);
  EXPECT_EQ(grid[2][2][0].item<float>(), 459.f);
  EXPECT_EQ(grid[2][2][1].item<float>(), 401.f);
  // A file with other anchors and no anchor_grid: the grid follows the file's anchors x strides (8, 16, 32).
  NamedTensors file;
  for (const auto& [key, t] : state_dict(*v7)) {
    if (key == grid_key) continue;
    file.emplace_back(key, key == prefix + "anchors" ? t * 1.5 : t);
  }
  const auto loaded = build_model(load_model_config(resolve_model_config_path("yolov4-csp")), 1);
  load_state_dict(*loaded, file, /*strict=*/true, "file");
  const at::Tensor filled = keys_of(*loaded).at(grid_key).view({3, 3, 2});
  EXPECT_EQ(filled[0][0][0].item<float>(), 18.f);
  EXPECT_EQ(filled[2][2][1].item<float>(), 601.5f);
}

// check_anchor_order in each upstream's form. Level 0 [1x1, 1x1, 200x200], level 1 three 100x100: the mean
// areas fall (13,334 then 10,000), so YOLOv5 reverses the levels; the first and last anchors' areas rise
// (1 then 10,000), so YOLOv7 keeps them.
TEST(Detect, AnchorOrderCheckFollowsEachFamily) {
  for (const bool family : {false, true}) {
    const auto head = std::make_shared<Detect>(2, std::vector<std::vector<double>>{{1, 1, 1, 1, 200, 200}, {100, 100, 100, 100, 100, 100}},
                                               std::vector<int64_t>{4, 4}, false);
    head->initialize({8, 16}, family);
    const at::Tensor first = head->anchor_pixels()[0][0];
    EXPECT_FLOAT_EQ(first[0].item<float>(), family ? 1.f : 100.f) << family;
    EXPECT_FLOAT_EQ(first[1].item<float>(), family ? 1.f : 100.f) << family;
    EXPECT_EQ(head->reversed_anchor_order(), !family);  // what training's "Reversing anchor order" line reports
  }
}

// The xy decode in each upstream's own order, to the bit: YOLOv5 v7.0's Detect (xy * 2 + (grid - 0.5)) *
// stride, YOLOv7's Detect and IDetect (xy * 2 - 0.5 + grid) * stride. Where sigmoid < 0.25, 2 s - 0.5 is
// not exact in float32 and the two round differently; a kestrel val of a YOLOv7 model matches YOLOv7's.
TEST(Detect, DecodeFollowsEachFamilysOrder) {
  const std::vector<std::vector<double>> anchors{{10, 13}, {30, 61}, {116, 90}};  // one anchor a level
  const at::Tensor logits = at::randn({1, 1, 40, 40, 7}, at::TensorOptions().dtype(at::kFloat)) * 3;
  const auto yx = at::meshgrid({at::arange(40, at::kFloat), at::arange(40, at::kFloat)}, "ij");
  const at::Tensor cell = at::stack({yx[1], yx[0]}, 2).view({1, 1, 40, 40, 2});
  const at::Tensor s = logits.sigmoid().narrow(4, 0, 2);
  const at::Tensor v5 = ((s * 2 + (cell - 0.5)) * 8.0).reshape({1, -1, 2});
  const at::Tensor v7 = ((s * 2 - 0.5 + cell) * 8.0).reshape({1, -1, 2});
  ASSERT_FALSE(at::equal(v5, v7)) << "the case should tell the two orders apart";
  for (const auto& [implicit, family] : {std::pair{false, false}, std::pair{false, true}, std::pair{true, false}}) {
    const auto head = std::make_shared<Detect>(2, anchors, std::vector<int64_t>{4, 4, 4}, implicit);
    head->initialize({8, 16, 32}, family);
    std::vector<at::Tensor> levels{logits, at::zeros({1, 1, 20, 20, 7}), at::zeros({1, 1, 10, 10, 7})};
    const at::Tensor xy = head->decode(levels).narrow(1, 0, 40 * 40).narrow(2, 0, 2);
    EXPECT_TRUE(at::equal(xy, implicit || family ? v7 : v5)) << implicit << family;
  }
}

}  // namespace
}  // namespace kestrel::models
