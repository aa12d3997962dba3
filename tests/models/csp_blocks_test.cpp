// YOLOv7's cfg/baseline/ blocks (models/csp_blocks.h): upstream's state-dict names and parameter counts by
// hand for each CSP split and unit and for Stem, shapes and the YOLOv7-family rule through a small network,
// a malformed kernel; and, with an upstream YOLOv7 checkout (KESTREL_UPSTREAM_PYTHON, KESTREL_YOLOV7_DIR),
// that network's outputs against upstream's models/yolo.py Model with kestrel's weights loaded by name, and
// every upstream cfg/baseline/*.yaml built by both with the same parameter count and state-dict keys.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "export/onnx_check.h"
#include "kestrel/core/error.h"
#include "kestrel/models/csp_blocks.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/model_family.h"
#include "kestrel/models/state_dict.h"
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

std::set<std::string> convs(const std::string& prefix, std::initializer_list<const char*> names) {
  std::set<std::string> out;
  for (const char* name : names) {
    const std::string p = prefix + name;
    out.insert(p + ".conv.weight");
    for (const char* k : {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}) out.insert(p + ".bn." + k);
  }
  return out;
}

std::set<std::string> merged(std::initializer_list<std::set<std::string>> parts) {
  std::set<std::string> out;
  for (const auto& p : parts) out.insert(p.begin(), p.end());
  return out;
}

int64_t parameter_count(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

// Upstream (models/common.py): BottleneckCSPA/B own cv1..cv3 and m, BottleneckCSPC cv1..cv4 and m; m is an
// nn.Sequential of Bottleneck (cv1, cv2) or Res (cv1, cv2, cv3); Stem owns cv1..cv4 (its pool has no state).
TEST(CspBlocks, StateDictKeysAreUpstreams) {
  CspBlock a(CspSplit::A, CspUnit::Darknet, 8, 16, 2, true, 1, 0.5);
  EXPECT_EQ(keys_of(a), merged({convs("", {"cv1", "cv2", "cv3"}), convs("m.0.", {"cv1", "cv2"}), convs("m.1.", {"cv1", "cv2"})}));
  CspBlock c(CspSplit::C, CspUnit::Res, 8, 16, 1, true, 1, 0.5);
  EXPECT_EQ(keys_of(c), merged({convs("", {"cv1", "cv2", "cv3", "cv4"}), convs("m.0.", {"cv1", "cv2", "cv3"})}));
  CspBlock b(CspSplit::B, CspUnit::ResX, 64, 64, 1, true, 32, 0.5);
  EXPECT_EQ(keys_of(b), merged({convs("", {"cv1", "cv2", "cv3"}), convs("m.0.", {"cv1", "cv2", "cv3"})}));
  Stem stem(3, 32);
  EXPECT_EQ(keys_of(stem), convs("", {"cv1", "cv2", "cv3", "cv4"}));
}

// Conv(c1, c2, k, g) holds c2 * c1 / g * k * k weights and 2 * c2 BN parameters. By hand:
TEST(CspBlocks, ParameterCountsByHand) {
  // BottleneckCSPC(8, 16), c_ = 8: cv1, cv2, cv3 1x1 8->8 (64 + 16 each), cv4 1x1 16->16 (256 + 32),
  // m.0 Bottleneck(8, 8, e=1): 1x1 (64 + 16) and 3x3 (576 + 16). 240 + 288 + 80 + 592 = 1200.
  CspBlock c(CspSplit::C, CspUnit::Darknet, 8, 16, 1, true, 1, 0.5);
  EXPECT_EQ(parameter_count(c), 1200);
  // BottleneckCSPB(8, 16), c_ = c2 = 16: cv1 8->16 (128 + 32), cv2 16->16 (256 + 32), cv3 32->16 (512 + 32),
  // m.0 Bottleneck(16, 16, e=1): 1x1 (256 + 32), 3x3 (2304 + 32). 160 + 288 + 544 + 288 + 2336 = 3616.
  CspBlock b(CspSplit::B, CspUnit::Darknet, 8, 16, 1, false, 1, 0.5);
  EXPECT_EQ(parameter_count(b), 3616);
  // ResXCSPA(128, 128), c_ = 64, groups 32: cv1, cv2 128->64 (8192 + 128 each), cv3 128->128 (16384 + 256),
  // m.0 Res(64, 64, g=32, e=1): 1x1 (4096 + 128), grouped 3x3 (64 * 2 * 9 + 128), 1x1 (4096 + 128).
  // 16640 + 16640 + 4224 + 1280 + 4224 = 43008.
  CspBlock ax(CspSplit::A, CspUnit::ResX, 128, 128, 1, true, 32, 0.5);
  EXPECT_EQ(parameter_count(ax), 43008);
  // ResCSPC(16, 16), c_ = 8: cv1, cv2 16->8 (128 + 16 each), cv3 8->8 (64 + 16), cv4 16->16 (256 + 32),
  // m.0 Res(8, 8, e=0.5), hidden 4: 1x1 8->4 (32 + 8), 3x3 4->4 (144 + 8), 1x1 4->8 (32 + 16).
  // 288 + 80 + 288 + 40 + 152 + 48 = 896.
  CspBlock cr(CspSplit::C, CspUnit::Res, 16, 16, 1, true, 1, 0.5);
  EXPECT_EQ(parameter_count(cr), 896);
  // Stem(3, 32), c_ = 16: 3x3 3->16 (432 + 32), 1x1 16->16 (256 + 32), 3x3 16->16 (2304 + 32), 1x1 32->32
  // (1024 + 64) = 4176.
  Stem stem(3, 32);
  EXPECT_EQ(parameter_count(stem), 4176);
}

// The shortcut adds the input only where the widths agree (upstream's `shortcut and c1 == c2`): with every
// weight of a Res unit zeroed, its convolutions output SiLU(0) = 0 after BN with zero weight and bias, so
// the unit returns x with the shortcut and 0 without.
TEST(CspBlocks, ResShortcutAddsTheInput) {
  ResBottleneck with(8, 8, true), without(8, 8, false), widening(8, 16, true);
  const at::Tensor x = at::rand({1, 8, 4, 4});
  torch::NoGradGuard no_grad;
  for (auto* m : {&with, &without, &widening}) {
    m->eval();
    for (auto& p : m->parameters()) p.zero_();
  }
  EXPECT_TRUE(at::equal(with.forward(x), x));
  EXPECT_EQ(without.forward(x).abs().max().item<float>(), 0.f);
  EXPECT_EQ(widening.forward(x).sizes(), (at::IntArrayRef{1, 16, 4, 4}));
  EXPECT_FALSE(widening.shortcut());
}

const char* kCspYaml = R"(
nc: 3
depth_multiple: 1.0
width_multiple: 1.0
anchors: [[10,13, 16,30], [30,61, 62,45]]
backbone:
  [[-1, 1, Stem, [32]],                 # 0  /4
   [-1, 2, BottleneckCSPA, [32]],       # 1
   [-1, 1, BottleneckCSPB, [32]],       # 2  no shortcut by default
   [-1, 2, BottleneckCSPC, [48]],       # 3
   [-1, 1, Conv, [64, [3, 3], 2]],      # 4  /8, kernel written as a list (YOLOv7's baseline yolov3.yaml)
   [-1, 1, ResCSPA, [64]],              # 5
   [-1, 2, ResCSPB, [64]],              # 6
   [-1, 1, ResCSPC, [64]],              # 7
   [-1, 1, ResXCSPA, [128]],            # 8  groups 32 (upstream builds ResCSPA's units first: c_ / 2 >= 32)
   [-1, 1, ResXCSPB, [64]],             # 9
   [-1, 1, ResXCSPC, [128]],            # 10
   [-1, 1, Res, [128]],                 # 11
   [-1, 1, ResX, [128]],                # 12
  ]
head:
  [[-1, 1, Conv, [64, 3, 2]],           # 13 /16
   [3, 1, BottleneckCSPB, [32, True]],  # 14 /4, with shortcut
   [[14, 12, 13], 1, IDetect, [nc, [[10,13, 16,30], [30,61, 62,45], [62,45, 59,119]]]]]  # 15
)";

std::shared_ptr<YoloModel> csp_net() {
  auto model = exporting::test_onnx::yaml_network(kCspYaml, "csp.yaml", 5);
  model->eval();
  return model;
}

TEST(CspBlocks, SmallNetworkShapesAndFamily) {
  auto model = csp_net();
  EXPECT_EQ(model->head().strides(), (std::vector<double>{4, 8, 16}));
  EXPECT_TRUE(is_yolov7_family(*model));
  torch::NoGradGuard no_grad;
  // 2 anchors a level on 16 x 24, 8 x 12 and 4 x 6 cells; 3 classes + 5
  EXPECT_EQ(model->predict(at::rand({1, 3, 64, 96})).sizes(), (at::IntArrayRef{1, 2 * (16 * 24 + 8 * 12 + 4 * 6), 8}));
}

TEST(CspBlocks, BadArgumentsNameTheLayer) {
  auto build = [](const std::string& row) {
    const std::string yaml = "nc: 1\ndepth_multiple: 1.0\nwidth_multiple: 1.0\nanchors: [[10,13, 16,30]]\nbackbone:\n  [" + row +
                             ",\n   [-1, 1, Conv, [16, 3, 2]]]\nhead:\n  [[[-1], 1, Detect, [nc, anchors]]]\n";
    try {
      build_model(parse_model_config(yaml, "bad.yaml"));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(build("[-1, 1, Conv, [16, [3, 5], 2]]").find("bad.yaml:6: layer 0 (Conv): argument 2 must be an integer or [k, k]"),
            std::string::npos);
  EXPECT_NE(build("[-1, 1, BottleneckCSPC, [16, True, 1, 0.5, 7]]").find("layer 0 (BottleneckCSPC): takes at most 4"),
            std::string::npos);
  // ResX's 32 groups do not divide 16 channels: LibTorch's check, named by the config line.
  EXPECT_NE(build("[-1, 1, ResXCSPA, [16]]").find("bad.yaml:6: layer 0 (ResXCSPA)"), std::string::npos);
}

TEST(CspBlocks, MatchUpstreamYoloV7) {
  const char* python = std::getenv("KESTREL_UPSTREAM_PYTHON");
  const char* checkout = std::getenv("KESTREL_YOLOV7_DIR");
  if (!python || !checkout) GTEST_SKIP() << "set KESTREL_UPSTREAM_PYTHON and KESTREL_YOLOV7_DIR to compare with upstream";
  auto model = csp_net();
  at::manual_seed(6);
  test::expect_matches_upstream(*model, kCspYaml, {"a", "b", "c"}, python, checkout, at::rand({2, 3, 64, 96}));
}

// Every upstream baseline config builds in kestrel with upstream's parameter count and state-dict keys.
TEST(CspBlocks, EveryUpstreamBaselineConfigBuildsAsUpstream) {
  const char* python = std::getenv("KESTREL_UPSTREAM_PYTHON");
  const char* checkout = std::getenv("KESTREL_YOLOV7_DIR");
  if (!python || !checkout) GTEST_SKIP() << "set KESTREL_UPSTREAM_PYTHON and KESTREL_YOLOV7_DIR to compare with upstream";
  test::TempDir dir;
  test::write_file(dir.file("count.py"),
                   "import sys, glob, os\nsys.path.insert(0, '" + std::string(checkout) + "')\n"
                   "from models.yolo import Model\n"
                   "for f in sorted(glob.glob(os.path.join(sys.argv[1], 'cfg/baseline/*.yaml'))):\n"
                   "    m = Model(f, ch=3, nc=80)\n"
                   "    keys = ','.join(sorted(k for k in m.state_dict() if not k.endswith(('anchors', 'anchor_grid'))))\n"
                   "    print('CFG', os.path.basename(f), sum(p.numel() for p in m.parameters()), keys)\n");
  const auto run = test::run_command(std::string(python) + " " + dir.file("count.py") + " " + checkout + " 2>/dev/null");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::istringstream lines(run.output);
  int configs = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("CFG ", 0) != 0) continue;
    std::istringstream row(line.substr(4));
    std::string name, keys;
    int64_t upstream_params = 0;
    row >> name >> upstream_params >> keys;
    const auto model = build_model(load_model_config((std::filesystem::path(checkout) / "cfg/baseline" / name).string()));
    std::set<std::string> ours;
    for (const auto& [key, t] : state_dict(*model))
      if (key.find("anchors") == std::string::npos && key.find("anchor_grid") == std::string::npos) ours.insert(key);
    std::string joined;
    for (const auto& k : ours) joined += (joined.empty() ? "" : ",") + k;
    EXPECT_EQ(parameter_count(*model), upstream_params) << name;
    EXPECT_EQ(joined, keys) << name;
    ++configs;
  }
  EXPECT_EQ(configs, 11) << run.output;  // r50-csp ... yolov4-csp at a207844
}

}  // namespace
}  // namespace kestrel::models
