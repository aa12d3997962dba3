// ONNX export, static shapes: the exported graph, run by onnxruntime (the project's Python), gives what
// YoloModel::predict gives on the same input (YOLOv5, YOLOv3-style and YOLOv7 models, every YOLOv7 block
// and the baseline CSP blocks); onnx.checker accepts the file; bad options and unknown layers are clear
// errors; the CLI writes it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "export/onnx_check.h"
#include "kestrel/core/error.h"
#include "kestrel/export/onnx_export.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/weights_file.h"

namespace kestrel::exporting {
namespace {

using test_onnx::Case;

std::shared_ptr<models::YoloModel> random_model(const std::string& config) {
  at::manual_seed(3);
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path(config)));
  test_onnx::randomize_batch_norm(*model);
  return model;
}

void check_against_onnxruntime(models::YoloModel& model, const std::string& what, int64_t img, int64_t batch,
                               const std::string& output) {
  at::Tensor x = at::rand({batch, 3, img, img});
  at::Tensor y = test_onnx::predict(model, x);  // unfused: the export's fusing is checked too
  test::TempDir dir;
  OnnxExportOptions o;
  o.img = img;
  o.batch = batch;
  export_onnx(model, dir.file("model.onnx"), o, {{"names", "[\"a\"]"}});
  test_onnx::CheckOptions check;
  check.output = output;
  const test::CommandResult r = test_onnx::run_onnxruntime(dir, {{x, y}}, check);
  EXPECT_EQ(r.exit_code, 0) << what << ":\n" << r.output;
  EXPECT_NE(r.output.find("box_rel_err"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"stride\": \"" + std::to_string(model.max_stride()) + "\""), std::string::npos) << r.output;
  std::cout << what << ": " << r.output;  // the measured errors, for the log
}

void check_config(const std::string& config, int64_t img, int64_t batch, const std::string& output) {
  auto model = random_model(config);
  check_against_onnxruntime(*model, config, img, batch, output);
}

// A network written for the test (every block of a family), its BN statistics randomised, against onnxruntime.
std::shared_ptr<models::YoloModel> check_yaml_network(const char* yaml, const std::string& what, uint64_t seed,
                                                      const std::string& output) {
  auto model = test_onnx::yaml_network(yaml, what + ".yaml", seed);
  check_against_onnxruntime(*model, what, 64, 2, output);
  return model;
}

TEST(OnnxExport, Yolov5nMatchesOnnxRuntime) { check_config("yolov5n", 128, 2, test_onnx::kYolov5Output); }
TEST(OnnxExport, Yolov5sMatchesOnnxRuntime) { check_config("yolov5s", 160, 1, test_onnx::kYolov5Output); }
TEST(OnnxExport, Yolov7TinyMatchesOnnxRuntime) { check_config("yolov7-tiny", 128, 1, test_onnx::kYolov7Output); }
// SPPCSPC, RepConv (with its BN statistics randomised: the re-parameterisation is in the graph), IDetect.
TEST(OnnxExport, Yolov7MatchesOnnxRuntime) { check_config("yolov7", 160, 1, test_onnx::kYolov7Output); }
TEST(OnnxExport, Yolov7xMatchesOnnxRuntime) { check_config("yolov7x", 128, 1, test_onnx::kYolov7Output); }
// YOLOv7's cfg/baseline Scaled-YOLOv4: YOLOv7 blocks with a plain Detect head, exported as "output".
TEST(OnnxExport, Yolov4CspMatchesOnnxRuntime) { check_config("yolov4-csp", 64, 1, test_onnx::kYolov7Output); }

// Every YOLOv7 block in one small network, including those no shipped config uses (Shortcut, ReOrg,
// SP) and RepConv in its three forms: identity branch, grouped with identity, stride 2 (no identity).
TEST(OnnxExport, Yolov7BlocksMatchOnnxRuntime) {
  const char* yaml = R"(
nc: 3
depth_multiple: 1.0
width_multiple: 1.0
anchors: [[10,13, 16,30], [30,61, 62,45]]
backbone:
  [[-1, 1, ReOrg, []],                                     # 0  12 ch, /2
   [-1, 1, Conv, [16, 3, 1, None, 1, nn.LeakyReLU(0.1)]],  # 1
   [-1, 1, RepConv, [16, 3, 1]],                           # 2  identity branch
   [-1, 1, RepConv, [16, 3, 1, None, 2]],                  # 3  grouped
   [[-1, 1], 1, Shortcut, [1]],                            # 4
   [-1, 1, MP, []],                                        # 5  /4
   [-1, 1, SP, [5]],                                       # 6
   [-1, 1, RepConv, [32, 3, 2]],                           # 7  /8, no identity
   [-1, 1, SPPCSPC, [32]],                                 # 8
  ]
head:
  [[-1, 1, Conv, [32, 3, 2]],                              # 9  /16
   [[8, 9], 1, IDetect, [nc, anchors]]]                    # 10
)";
  check_yaml_network(yaml, "v7blocks", 5, test_onnx::kYolov7Output);
}

// The P6 models' blocks: DownC (default and explicit pool size) and an IAuxDetect head, whose auxiliary
// maps (layers 4 and 5, used only by the training loss) are left out of the graph.
TEST(OnnxExport, Yolov7P6BlocksMatchOnnxRuntime) {
  const char* yaml = R"(
nc: 3
depth_multiple: 1.0
width_multiple: 1.0
anchors: [[10,13, 16,30], [30,61, 62,45]]
backbone:
  [[-1, 1, Conv, [16, 3, 2]],         # 0  /2
   [-1, 1, DownC, [32]],              # 1  /4
   [-1, 1, DownC, [48, 2]],           # 2  /8
   [-1, 1, Conv, [32, 3, 2]],         # 3  /16
  ]
head:
  [[2, 1, Conv, [24, 1, 1]],          # 4  auxiliary /8
   [3, 1, Conv, [24, 1, 1]],          # 5  auxiliary /16
   [[2, 3, 4, 5], 1, IAuxDetect, [nc, anchors]]]  # 6
)";
  auto model = check_yaml_network(yaml, "p6blocks", 6, test_onnx::kYolov7Output);
  ASSERT_TRUE(model->head().aux());
  test::TempDir dir;
  OnnxExportOptions o;
  o.img = 64;
  export_onnx(*model, dir.file("p6.onnx"), o);
  std::ifstream file(dir.file("p6.onnx"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), {});
  EXPECT_EQ(bytes.find("model.4."), std::string::npos) << "an auxiliary branch was exported";
  EXPECT_EQ(bytes.find("model.6.m2"), std::string::npos);
  EXPECT_NE(bytes.find("model.3."), std::string::npos);
}

// YOLOv5's hub modules: GhostConv, GhostBottleneck (strides 1 and 2), C3Ghost, DWConv.
TEST(OnnxExport, GhostBlocksMatchOnnxRuntime) {
  const char* yaml = R"(
nc: 3
depth_multiple: 1.0
width_multiple: 1.0
anchors: [[10,13, 16,30], [30,61, 62,45]]
backbone:
  [[-1, 1, GhostConv, [16, 3, 2]],        # 0  /2
   [-1, 1, DWConv, [32, 3, 2]],           # 1  /4
   [-1, 1, C3Ghost, [32]],                # 2
   [-1, 1, GhostBottleneck, [48, 3, 2]],  # 3  /8
   [-1, 1, GhostBottleneck, [48, 3, 1]],  # 4
   [-1, 1, GhostConv, [64, 3, 2]],        # 5  /16
  ]
head:
  [[[4, 5], 1, Detect, [nc, anchors]]]    # 6
)";
  check_yaml_network(yaml, "ghost", 7, test_onnx::kYolov5Output);
}

// YOLOv5's C3TR (models/hub/yolov5s-transformer.yaml), with one and two layers of 4 heads. At their
// initial weights the attention scores are ~0.01 and the softmax is nearly uniform, which would hide a
// wrong scale or head split: q and k are scaled up so that each position attends to a few others, and v
// and the output projection so that the attention outweighs the residual path.
TEST(OnnxExport, TransformerBlocksMatchOnnxRuntime) {
  const char* yaml = R"(
nc: 3
depth_multiple: 1.0
width_multiple: 1.0
anchors: [[10,13, 16,30], [30,61, 62,45]]
backbone:
  [[-1, 1, Conv, [16, 3, 2]],          # 0  /2
   [-1, 1, Conv, [32, 3, 2]],          # 1  /4
   [-1, 1, C3TR, [32]],                # 2  one layer, 16 channels
   [-1, 1, Conv, [64, 3, 2]],          # 3  /8
   [-1, 2, C3TR, [64]],                # 4  two layers
  ]
head:
  [[[2, 4], 1, Detect, [nc, anchors]]]  # 5
)";
  auto model = test_onnx::yaml_network(yaml, "transformer.yaml", 9);
  {
    torch::NoGradGuard no_grad;
    const auto ends = [](const std::string& key, const char* tail) { return key.find(tail) != std::string::npos; };
    for (auto& p : model->named_parameters()) {
      if (ends(p.key(), ".q.weight") || ends(p.key(), ".k.weight")) p.value().mul_(30);
      if (ends(p.key(), ".v.weight") || ends(p.key(), ".out_proj.weight")) p.value().mul_(5);
    }
  }
  check_against_onnxruntime(*model, "transformer", 64, 2, test_onnx::kYolov5Output);
}

// YOLOv7's cfg/baseline/ blocks: the CSP splits A, B, C with Darknet, Res and grouped ResX units, Res, ResX, Stem.
TEST(OnnxExport, CspBlocksMatchOnnxRuntime) {
  const char* yaml = R"(
nc: 3
depth_multiple: 1.0
width_multiple: 1.0
anchors: [[10,13, 16,30], [30,61, 62,45]]
backbone:
  [[-1, 1, Stem, [32]],                # 0  /4
   [-1, 2, BottleneckCSPA, [32]],      # 1
   [-1, 1, BottleneckCSPB, [32]],      # 2
   [-1, 1, BottleneckCSPC, [32]],      # 3
   [-1, 1, ResCSPA, [32]],             # 4
   [-1, 1, ResCSPB, [32]],             # 5
   [-1, 1, ResCSPC, [64]],             # 6
   [-1, 1, Conv, [64, 3, 2]],          # 7  /8
   [-1, 1, ResXCSPA, [128]],           # 8
   [-1, 1, ResXCSPB, [64]],            # 9
   [-1, 1, ResXCSPC, [128]],           # 10
   [-1, 1, Res, [128]],                # 11
   [-1, 1, ResX, [64]],                # 12
  ]
head:
  [[[6, 12], 1, IDetect, [nc, anchors]]]  # 13
)";
  check_yaml_network(yaml, "csp", 8, test_onnx::kYolov7Output);
}

// A layer type the exporter does not know (here a stand-in for nn.Upsample) stops the export with
// the module's YAML name and its layer, and writes nothing.
class TestUpsample : public models::Layer {
 public:
  at::Tensor forward(const at::Tensor& x) override { return at::upsample_nearest2d(x, {x.size(2) * 2, x.size(3) * 2}); }
};

TEST(OnnxExport, UnsupportedModuleNamesModuleAndLayer) {
  auto built = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")));
  auto layers = built->layers();
  auto info = built->layer_info();
  size_t up = 0;
  while (info.at(up).module != "nn.Upsample") ++up;
  layers[up] = std::make_shared<TestUpsample>();
  info[up].module = "TestUpsample";
  auto head = std::dynamic_pointer_cast<models::Detect>(layers.back());
  ASSERT_TRUE(head);
  models::YoloModel model("custom", 3, layers, info, head);
  test::TempDir dir;
  OnnxExportOptions o;
  o.img = 64;
  try {
    export_onnx(model, dir.file("model.onnx"), o);
    FAIL() << "expected kestrel::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("module TestUpsample (model." + std::to_string(up) + ") is not supported by the ONNX exporter"),
              std::string::npos) << msg;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("model.onnx")));
}

std::string export_error(models::YoloModel& model, const OnnxExportOptions& o) {
  test::TempDir dir;
  try {
    export_onnx(model, dir.file("model.onnx"), o);
  } catch (const Error& e) {
    EXPECT_FALSE(std::filesystem::exists(dir.file("model.onnx")));
    return e.what();
  }
  return "(no error)";
}

TEST(OnnxExport, BadOptionsNameTheOption) {
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")));
  OnnxExportOptions o;
  o.img = 100;
  std::string msg = export_error(*model, o);
  EXPECT_NE(msg.find("--img 100: must be a positive multiple of the model's largest stride 32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("e.g. 96 or 128"), std::string::npos) << msg;
  o.img = 64;
  o.opset = 10;
  msg = export_error(*model, o);
  EXPECT_NE(msg.find("--opset 10"), std::string::npos) << msg;
  o.opset = 17;
  o.batch = 0;
  msg = export_error(*model, o);
  EXPECT_NE(msg.find("--batch-size 0"), std::string::npos) << msg;
}

// HardSwish is an opset-14 operator: below 14 it is x * HardSigmoid(x) (alpha 1/6, beta 0.5), as torch.onnx
// writes it; both forms give LibTorch's output in onnxruntime.
TEST(OnnxExport, HardswishAtEveryOpset) {
  const char* yaml = R"(
nc: 1
depth_multiple: 1.0
width_multiple: 1.0
anchors: [[10,13, 16,30]]
backbone:
  [[-1, 1, Conv, [8, 3, 2, None, 1, nn.Hardswish()]],
   [-1, 1, Conv, [8, 3, 2]]]
head:
  [[[1], 1, Detect, [nc, anchors]]]
)";
  at::manual_seed(5);
  auto model = models::build_model(models::parse_model_config(yaml, "hs.yaml"));
  test_onnx::randomize_batch_norm(*model);
  for (int opset : {12, 14}) {
    at::Tensor x = at::rand({1, 3, 64, 64}) * 8 - 4;  // both sides of HardSwish's kinks at -3 and 3
    at::Tensor y = test_onnx::predict(*model, x);
    test::TempDir dir;
    OnnxExportOptions o;
    o.img = 64;
    o.opset = opset;
    export_onnx(*model, dir.file("model.onnx"), o, {{"names", "{0: 'a'}"}});
    test_onnx::CheckOptions check;
    check.output = test_onnx::kYolov5Output;
    const test::CommandResult r = test_onnx::run_onnxruntime(dir, {{x, y}}, check);
    EXPECT_EQ(r.exit_code, 0) << "opset " << opset << ":\n" << r.output;
  }
}

// export.py's --include onnx is accepted (as --format onnx).
TEST(OnnxExport, CliWritesOnnxNextToTheWeights) {
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), 2);
  test::TempDir dir;
  const std::string weights = dir.file("best.safetensors");
  models::save_model_weights(weights, *model, models::describe_config("yolov5n", {"cat", "dog"}));
  const test::CommandResult r =
      test::run_command(test::kestrel_binary() + " export --weights " + weights + " --img 64 --include onnx");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(std::filesystem::exists(dir.file("best.onnx"))) << r.output;
  const test::CommandResult py = test::run_python(
      "import onnx\nm = onnx.load('" + dir.file("best.onnx") +
      "')\nonnx.checker.check_model(m)\n"
      "print({p.key: p.value for p in m.metadata_props}['names'], m.opset_import[0].version,\n"
      "      [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim])\n");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  // export.py's metadata: str(model.names), a Python dict's text; its default opset, 12.
  EXPECT_NE(py.output.find("{0: 'cat', 1: 'dog'} 12 [1, 252, 7]"), std::string::npos) << py.output;
}

// Each opset's file carries the lowest IR version ONNX pairs with it (onnx.helper's own table): a
// runtime refuses a file whose IR version is newer than it knows (onnxruntime 1.9 stops at IR 7).
TEST(OnnxExport, IrVersionIsOnnxsOwnForEachOpset) {
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), 2);
  test::TempDir dir;
  std::string files;
  for (int opset = 11; opset <= 21; ++opset) {
    OnnxExportOptions o;
    o.img = 64;
    o.opset = opset;
    const std::string path = dir.file(std::to_string(opset) + ".onnx");
    export_onnx(*model, path, o);
    files += "'" + path + "', ";
  }
  const test::CommandResult py = test::run_python(
      "import onnx, onnx.helper as h\n"
      "for f in [" + files + "]:\n"
      "    m = onnx.load(f)\n"
      "    opset = m.opset_import[0].version\n"
      "    want = h.find_min_ir_version_for([h.make_opsetid('', opset)])\n"
      "    assert m.ir_version == want, (f, opset, m.ir_version, want)\n"
      "print('checked', len([" + files + "]))\n");
  EXPECT_EQ(py.exit_code, 0) << py.output;
  EXPECT_NE(py.output.find("checked 11"), std::string::npos) << py.output;
}

// The CLI's errors name the file or the option, and exit non-zero.
TEST(OnnxExport, CliErrorsNameTheFileOrOption) {
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), 2);
  test::TempDir dir;
  const std::string weights = dir.file("best.safetensors");
  models::save_model_weights(weights, *model, models::describe_config("yolov5n", {"cat", "dog"}));
  // check_img_size: a size off the stride is rounded up with upstream's warning (100 -> 128).
  test::CommandResult r = test::run_command(test::kestrel_binary() + " export --weights " + weights + " --img 100 -o " +
                                            dir.file("up.onnx"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("WARNING: --img-size 100 must be multiple of max stride 32, updating to 128"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("input images [1, 3, 128, 128]"), std::string::npos) << r.output;
  const std::string missing = dir.file("missing.safetensors");
  r = test::run_command(test::kestrel_binary() + " export --weights " + weights + " --include torchscript");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--include torchscript: not written"), std::string::npos) << r.output;
  r = test::run_command(test::kestrel_binary() + " export --weights " + missing);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(missing), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("best.onnx")));
}

}  // namespace
}  // namespace kestrel::exporting
