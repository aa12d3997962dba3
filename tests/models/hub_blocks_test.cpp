// YOLOv5's models/hub blocks (models/ghost_blocks.h, models/transformer_blocks.h): upstream's state-dict
// names for every variant, shapes through a small network of all of them (GhostConv, GhostBottleneck with
// stride 1 and 2, C3Ghost, DWConv, C3TR), and, with an upstream YOLOv5 checkout (KESTREL_UPSTREAM_PYTHON,
// KESTREL_YOLOV5_DIR), the same network's outputs against upstream's models/yolo.py Model with kestrel's
// weights loaded by name (models/upstream_model_check.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "export/onnx_check.h"
#include "kestrel/models/ghost_blocks.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/transformer_blocks.h"
#include "models/upstream_model_check.h"
#include "test_support.h"

namespace kestrel::models {
namespace {

std::set<std::string> keys_of(torch::nn::Module& m) {
  std::set<std::string> out;
  for (const auto& p : m.named_parameters()) out.insert(p.key());
  for (const auto& b : m.named_buffers()) out.insert(b.key());
  return out;
}

std::set<std::string> conv_keys(const std::string& prefix) {
  std::set<std::string> out{prefix + ".conv.weight"};
  for (const char* k : {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"})
    out.insert(prefix + ".bn." + k);
  return out;
}

std::set<std::string> merged(std::initializer_list<std::set<std::string>> parts) {
  std::set<std::string> out;
  for (const auto& p : parts) out.insert(p.begin(), p.end());
  return out;
}

// Upstream's attribute names: GhostBottleneck.conv = Sequential(GhostConv, DWConv or Identity, GhostConv),
// .shortcut = Sequential(DWConv, Conv) or Identity; GhostConv.cv1/.cv2 are Convs.
TEST(GhostBlocks, StateDictKeysAreUpstreams) {
  GhostBottleneck s1(8, 8, 3, 1), s2(8, 16, 3, 2);
  const auto ghost = [](const std::string& p) { return merged({conv_keys(p + ".cv1"), conv_keys(p + ".cv2")}); };
  EXPECT_EQ(keys_of(s1), merged({ghost("conv.0"), ghost("conv.2")}));
  EXPECT_EQ(keys_of(s2), merged({ghost("conv.0"), conv_keys("conv.1"), ghost("conv.2"), conv_keys("shortcut.0"),
                                 conv_keys("shortcut.1")}));
  C3Ghost c3(8, 16, 2);
  EXPECT_EQ(keys_of(c3), merged({conv_keys("cv1"), conv_keys("cv2"), conv_keys("cv3"), ghost("m.0.conv.0"),
                                 ghost("m.0.conv.2"), ghost("m.1.conv.0"), ghost("m.1.conv.2")}));
}

TEST(TransformerBlocks, StateDictKeysAreUpstreams) {
  C3TR c3(16, 32, 2);  // c_ = 16, two layers of 4 heads
  std::set<std::string> expected = merged({conv_keys("cv1"), conv_keys("cv2"), conv_keys("cv3")});
  expected.insert({"m.linear.weight", "m.linear.bias"});
  for (const char* layer : {"m.tr.0.", "m.tr.1."})
    for (const char* k : {"q.weight", "k.weight", "v.weight", "ma.in_proj_weight", "ma.in_proj_bias", "ma.out_proj.weight",
                          "ma.out_proj.bias", "fc1.weight", "fc2.weight"})
      expected.insert(std::string(layer) + k);
  EXPECT_EQ(keys_of(c3), expected);
  TransformerBlock widening(8, 16, 4, 1);  // c1 != c2: a Conv first
  EXPECT_EQ(keys_of(widening).count("conv.conv.weight"), 1u);
}

const char* kHubYaml = R"(
nc: 3
depth_multiple: 1.0
width_multiple: 1.0
anchors: [[10,13, 16,30], [30,61, 62,45]]
backbone:
  [[-1, 1, Conv, [16, 3, 2]],             # 0  /2
   [-1, 1, GhostConv, [32, 3, 2]],        # 1  /4
   [-1, 2, C3Ghost, [32]],                # 2
   [-1, 1, GhostBottleneck, [48, 3, 2]],  # 3  /8
   [-1, 1, GhostBottleneck, [48, 5, 1]],  # 4
   [-1, 1, DWConv, [64, 3, 2]],           # 5  /16
   [-1, 2, C3TR, [64]],                   # 6  two transformer layers on 4 x 6 positions
  ]
head:
  [[-1, 1, GhostConv, [64, 1, 1, 1, False]],  # 7  no activation
   [[4, 7], 1, Detect, [nc, anchors]]]    # 8
)";

std::shared_ptr<YoloModel> hub_net() {
  auto model = exporting::test_onnx::yaml_network(kHubYaml, "hub.yaml", 3);
  model->eval();
  return model;
}

// The layer's attention is written out (LibTorch's MultiheadAttention::forward reads the device to compare
// its inputs); it must equal LibTorch's own module on the same parameters. The weights are scaled up so
// that the softmax is far from uniform, where a wrong scale or head split would show.
TEST(TransformerBlocks, AttentionEqualsLibTorchMultiheadAttention) {
  torch::manual_seed(2);
  TransformerLayer layer(16, 4);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : layer.named_parameters())
      if (p.key().rfind("ma.", 0) == 0 || p.key().rfind("q.", 0) == 0 || p.key().rfind("k.", 0) == 0) p.value().mul_(4);
  }
  const at::Tensor x = at::randn({10, 3, 16});  // [L, b, c]
  const auto lin = [](const torch::nn::Linear& l, const at::Tensor& t) { return at::linear(t, l->weight, l->bias); };
  auto& ma = const_cast<torch::nn::MultiheadAttention&>(layer.attention());
  // The layer through LibTorch's MultiheadAttention module.
  const auto reference = [&](const at::Tensor& in) {
    const at::Tensor y = std::get<0>(ma->forward(lin(layer.query(), in), lin(layer.key(), in), lin(layer.value(), in))) + in;
    return lin(layer.feed_forward2(), lin(layer.feed_forward1(), y)) + y;
  };
  const at::Tensor got = layer.forward(x), want = reference(x);
  EXPECT_LT((got - want).abs().max().item<double>(), 1e-5 * want.abs().max().item<double>());
  // The attention is not uniform: the layer differs from one that averages the values by far more than that.
  const at::Tensor vx = lin(layer.value(), x);
  const at::Tensor mean_values = at::linear(vx, ma->in_proj_weight.chunk(3, 0)[2], ma->in_proj_bias.chunk(3, 0)[2])
                                     .mean(0, /*keepdim=*/true)
                                     .expand_as(vx);
  const at::Tensor attention = std::get<0>(ma->forward(lin(layer.query(), x), lin(layer.key(), x), vx));
  EXPECT_GT((attention - ma->out_proj->forward(mean_values)).abs().max().item<double>(),
            0.1 * attention.abs().max().item<double>());
  // Gradients flow as through LibTorch's module.
  at::Tensor xg = x.clone().requires_grad_(), xw = x.clone().requires_grad_();
  layer.forward(xg).sum().backward();
  reference(xw).sum().backward();
  EXPECT_LT((xg.grad() - xw.grad()).abs().max().item<double>(), 1e-4 * xw.grad().abs().max().item<double>());
}

TEST(HubBlocks, SmallNetworkShapes) {
  auto model = hub_net();
  EXPECT_EQ(model->head().strides(), (std::vector<double>{8, 16}));
  torch::NoGradGuard no_grad;
  // 2 anchors a level on 8 x 12 and 4 x 6 cells; 3 classes + 5
  EXPECT_EQ(model->predict(at::rand({1, 3, 64, 96})).sizes(), (at::IntArrayRef{1, 2 * (8 * 12 + 4 * 6), 8}));
}

TEST(HubBlocks, MatchUpstreamYoloV5) {
  const char* python = std::getenv("KESTREL_UPSTREAM_PYTHON");
  const char* checkout = std::getenv("KESTREL_YOLOV5_DIR");
  if (!python || !checkout) GTEST_SKIP() << "set KESTREL_UPSTREAM_PYTHON and KESTREL_YOLOV5_DIR to compare with upstream";
  auto model = hub_net();
  at::manual_seed(4);
  test::expect_matches_upstream(*model, kHubYaml, {"a", "b", "c"}, python, checkout, at::rand({2, 3, 64, 96}));
}

}  // namespace
}  // namespace kestrel::models
