// Model YAML parsing and bad model files: every problem is a kestrel::Error that names the file and
// the problem (and the line where there is one), never a crash.
#include <gtest/gtest.h>

#include "kestrel/core/error.h"
#include "kestrel/models/common.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/yolo_model.h"
#include "test_support.h"

namespace kestrel::models {
namespace {

const char* kTinyHead = R"(
nc: 4
depth_multiple: 0.33
width_multiple: 0.25
anchors:
  - [10,13, 16,30, 33,23]
  - [30,61, 62,45, 59,119]
backbone:
  [[-1, 1, Conv, [64, 6, 2, 2]],
   [-1, 1, Conv, [128, 3, 2]],
   [-1, 3, C3, [128]],
   [-1, 1, Conv, [256, 3, 2]],
  ]
head:
  [[-1, 1, SPPF, [256, 5]],
   [[2, 4], 1, Detect, [nc, anchors]],
  ]
)";

// Builds the text with one line replaced, and returns the error message of building it.
std::string error_of(const std::string& yaml) {
  try {
    build_model(parse_model_config(yaml, "bad.yaml"));
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  auto pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return text.replace(pos, from.size(), to);
}

TEST(ModelConfig, ParsesKeysAndRows) {
  ModelConfig cfg = parse_model_config(kTinyHead, "tiny.yaml");
  EXPECT_EQ(cfg.nc, 4);
  EXPECT_DOUBLE_EQ(cfg.depth_multiple, 0.33);
  EXPECT_DOUBLE_EQ(cfg.width_multiple, 0.25);
  ASSERT_EQ(cfg.layers.size(), 6u);
  EXPECT_EQ(cfg.backbone_layers, 4);
  EXPECT_EQ(cfg.layers[2].module, "C3");
  EXPECT_EQ(cfg.layers[2].number, 3);
  EXPECT_EQ(cfg.layers[5].from, (std::vector<int>{2, 4}));
  EXPECT_TRUE(cfg.layers[5].from_is_list);
  EXPECT_EQ(cfg.layers[1].line, 10);  // 1-based line (line 1 is the empty first line) of "[-1, 1, Conv, [128, 3, 2]]"
  EXPECT_EQ(cfg.name(), "tiny");
}

TEST(ModelConfig, AppliesDepthAndWidthMultiples) {
  auto model = build_model(parse_model_config(kTinyHead, "tiny.yaml"));
  const auto& info = model->layer_info();
  // widths: make_divisible(64 * 0.25, 8) = 16, 128 * 0.25 = 32, 256 * 0.25 = 64; repeats: round(3 * 0.33) = 1
  EXPECT_EQ(info[0].out_channels, 16);
  EXPECT_EQ(info[1].out_channels, 32);
  EXPECT_EQ(info[2].number, 1);
  EXPECT_EQ(info[3].out_channels, 64);
  EXPECT_EQ(info[5].from, (std::vector<int>{2, 4}));
  EXPECT_EQ(model->head().num_outputs(), 9);
  EXPECT_EQ(model->head().strides(), (std::vector<double>{4, 8}));
}

TEST(ModelConfig, NcOverrideChangesTheHead) {
  auto model = build_model(parse_model_config(kTinyHead, "tiny.yaml"), 20);
  EXPECT_EQ(model->head().nc(), 20);
  EXPECT_EQ(model->head().num_outputs(), 25);
}

TEST(ModelConfigErrors, UnknownModule) {
  auto msg = error_of(replaced(kTinyHead, "SPPF, [256, 5]", "Frobnicate, [256]"));
  EXPECT_NE(msg.find("bad.yaml:15"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown module 'Frobnicate'"), std::string::npos) << msg;
  for (const char* known : {"C3Ghost", "ResXCSPC", "RepConv", "SPPCSPC", "nn.Upsample", "ReOrg", "IAuxDetect"})
    EXPECT_NE(msg.find(known), std::string::npos) << known << " missing from: " << msg;
}

TEST(ModelConfigErrors, WrongArgumentCount) {
  auto msg = error_of(replaced(kTinyHead, "SPPF, [256, 5]", "SPPF, [256, 5, 7, 9]"));
  EXPECT_NE(msg.find("bad.yaml:15: layer 4 (SPPF)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at most 2 arguments"), std::string::npos) << msg;
  msg = error_of(replaced(kTinyHead, "Detect, [nc, anchors]", "Detect, [nc]"));
  EXPECT_NE(msg.find("at least 2 arguments"), std::string::npos) << msg;
}

// A repeat count on a module that is not repeated (upstream would chain copies that fail at the first
// forward): an error, not silently one module. 6 x depth_multiple 0.33 = 2 repeats (2 would round to 1).
TEST(ModelConfigErrors, RepeatCountsOnlyWhereModulesRepeat) {
  const std::string concat = replaced(kTinyHead, "[-1, 1, SPPF, [256, 5]],", "[[-1, 2], 6, Concat, [1]],");
  auto msg = error_of(concat);
  EXPECT_NE(msg.find("bad.yaml:15: layer 4 (Concat): a repeat count > 1 is not supported"), std::string::npos) << msg;
  msg = error_of(replaced(kTinyHead, "[[2, 4], 1, Detect, [nc, anchors]]", "[[2, 4], 6, Detect, [nc, anchors]]"));
  EXPECT_NE(msg.find("(Detect): a repeat count > 1 is not supported for the detection head"), std::string::npos) << msg;
  msg = error_of(replaced(kTinyHead, "[-1, 1, SPPF, [256, 5]],", "[-1, 6, nn.Upsample, [None, 2, 'nearest']],"));
  EXPECT_NE(msg.find("a repeat count > 1 is not supported"), std::string::npos) << msg;
}

TEST(ModelConfigErrors, WrongArgumentType) {
  auto msg = error_of(replaced(kTinyHead, "[128, 3, 2]", "[128, three, 2]"));
  EXPECT_NE(msg.find("layer 1 (Conv): argument 2 must be an integer, got 'three'"), std::string::npos) << msg;
}

// Arguments LibTorch would take and fail on later with an unrelated message (a kernel of 0 gives "from is
// out of bounds for float" in the weight initialisation), an anchors key that is neither a list nor a
// number, and a negative padding (only None means automatic).
TEST(ModelConfigErrors, KernelStrideAnchorsAndPaddingOutOfRange) {
  auto msg = error_of(replaced(kTinyHead, "[128, 3, 2]", "[128, 0, 2]"));
  EXPECT_NE(msg.find("bad.yaml:10: layer 1 (Conv): convolution: kernel size must be in [1, 64], got 0"), std::string::npos) << msg;
  // a kernel of 999 would run the probe image for minutes
  msg = error_of(replaced(kTinyHead, "[128, 3, 2]", "[128, 999, 2]"));
  EXPECT_NE(msg.find("bad.yaml:10: layer 1 (Conv): convolution: kernel size must be in [1, 64], got 999"), std::string::npos) << msg;
  msg = error_of(replaced(kTinyHead, "[64, 6, 2, 2]", "[64, 6, 2, -2]"));
  EXPECT_NE(msg.find("layer 0 (Conv): convolution: padding must be in [0, 64] (or None: automatic), got -2"), std::string::npos) << msg;
  // 1000 took seconds and a gigabyte and a half before the stride check failed
  msg = error_of(replaced(kTinyHead, "[64, 6, 2, 2]", "[64, 6, 2, 1000]"));
  EXPECT_NE(msg.find("layer 0 (Conv): convolution: padding must be in [0, 64] (or None: automatic), got 1000"), std::string::npos)
      << msg;
  const std::string text = replaced(replaced(replaced(kTinyHead, "  - [10,13, 16,30, 33,23]\n", ""), "  - [30,61, 62,45, 59,119]\n", ""),
                                    "anchors:", "anchors: abc");
  msg = error_of(text);
  EXPECT_NE(msg.find("bad.yaml: 'anchors' must be a list of [w, h, ...] lists or an integer, got 'abc'"), std::string::npos) << msg;
}

TEST(ModelConfigErrors, MissingKeys) {
  for (const char* key : {"nc: 4\n", "depth_multiple: 0.33\n", "backbone:\n"}) {
    auto msg = error_of(replaced(kTinyHead, key, ""));
    EXPECT_NE(msg.find("bad.yaml"), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("missing key") != std::string::npos || msg.find("malformed YAML") != std::string::npos) << msg;
  }
  auto msg = error_of(replaced(kTinyHead, "anchors:\n  - [10,13, 16,30, 33,23]\n  - [30,61, 62,45, 59,119]\n", ""));
  EXPECT_NE(msg.find("has no 'anchors' key"), std::string::npos) << msg;
}

TEST(ModelConfigErrors, BadFromIndex) {
  auto msg = error_of(replaced(kTinyHead, "[[2, 4], 1, Detect", "[[2, 9], 1, Detect"));
  EXPECT_NE(msg.find("layer 5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'from' index 9 does not name an earlier layer"), std::string::npos) << msg;
  msg = error_of(replaced(kTinyHead, "[[-1, 1, Conv, [64, 6, 2, 2]]", "[[-2, 1, Conv, [64, 6, 2, 2]]"));
  EXPECT_NE(msg.find("layer 0: 'from' index -2 reaches before the first layer"), std::string::npos) << msg;
  msg = error_of(replaced(kTinyHead, "[-1, 1, Conv, [128, 3, 2]]", "[-7, 1, Conv, [128, 3, 2]]"));
  EXPECT_NE(msg.find("reaches before the first layer"), std::string::npos) << msg;
}

// Found reviewing the fuzz harness's checks: the builder divides widths by channel_multiple, gives layer 0
// `ch` input channels and rounds number * depth_multiple to int; 0, negative and .inf values passed the parser.
TEST(ModelConfigErrors, ChannelKeysAndMultiplesMustBeUsable) {
  auto parse_error_of = [](const std::string& yaml) -> std::string {
    try {
      parse_model_config(yaml, "bad.yaml");
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(parse_error_of(std::string("channel_multiple: 0") + kTinyHead), "bad.yaml:1: 'channel_multiple' must be >= 1, got 0");
  EXPECT_EQ(parse_error_of(std::string("ch: -3") + kTinyHead), "bad.yaml:1: 'ch' must be >= 1, got -3");
  EXPECT_EQ(parse_error_of(replaced(kTinyHead, "depth_multiple: 0.33", "depth_multiple: .inf")),
            "bad.yaml: depth_multiple and width_multiple must be numbers in (0, 100]");
  EXPECT_EQ(parse_error_of(replaced(kTinyHead, "depth_multiple: 0.33", "depth_multiple: 1e300")),
            "bad.yaml: depth_multiple and width_multiple must be numbers in (0, 100]");
  EXPECT_EQ(parse_error_of(replaced(kTinyHead, "depth_multiple: 0.33", "depth_multiple: .nan")),
            "bad.yaml: depth_multiple and width_multiple must be numbers in (0, 100]");
  EXPECT_EQ(parse_error_of(std::string("ch: 1\nchannel_multiple: 4") + kTinyHead), "(no error)");
}

TEST(ModelConfigErrors, MalformedRows) {
  auto msg = error_of(replaced(kTinyHead, "[-1, 1, Conv, [128, 3, 2]]", "[-1, 1, Conv]"));
  EXPECT_NE(msg.find("bad.yaml:10: layer 1: a layer is [from, number, module, args] (4 entries), got 3 entries"), std::string::npos) << msg;
  msg = error_of(replaced(kTinyHead, "[-1, 3, C3, [128]]", "[-1, 0, C3, [128]]"));
  EXPECT_NE(msg.find("'number' must be in [1, 1000], got 0"), std::string::npos) << msg;
  msg = error_of(replaced(kTinyHead, "[-1, 3, C3, [128]]", "[-1, 100000000, C3, [128]]"));  // would fill the memory
  EXPECT_NE(msg.find("'number' must be in [1, 1000], got 100000000"), std::string::npos) << msg;
  msg = error_of(replaced(kTinyHead, "[-1, 1, SPPF, [256, 5]]", "[-1, 1, SPPF, 256]"));
  EXPECT_NE(msg.find("'args' must be a list"), std::string::npos) << msg;
}

// A config (no weights file to bound it) builds under a cap of 1e9 parameter values, charged before each
// allocation: a layer 65536 wide (262144 x width_multiple 0.25) of 64 x 64 kernels on 16 inputs (4.3e9 values)
// is refused before it allocates.
// A width above 65536 channels is refused by itself: 2e9 output channels of a 1 x 1 kernel fit the
// budget after a 3-channel input, but not the stride probe's feature map.
TEST(ModelConfigErrors, HugeNetworksAreRefusedBeforeAllocating) {
  std::string msg = error_of(replaced(kTinyHead, "[128, 3, 2]", "[262144, 64, 2]"));
  EXPECT_NE(msg.find("bad.yaml:10: layer 1 (Conv): the network needs more than 1000000000 parameter values"), std::string::npos)
      << msg;
  // Tiny widths keep the parameter count low; 1000 x depth_multiple 100 was still 100,000 modules in one row.
  msg = error_of(replaced(replaced(kTinyHead, "depth_multiple: 0.33", "depth_multiple: 100"), "[-1, 3, C3, [128]]",
                          "[-1, 1000, C3, [128]]"));
  EXPECT_NE(msg.find("bad.yaml:11: layer 2 (C3): 1000 x depth_multiple 100 = 100000 repeats; at most 1000 per row"),
            std::string::npos) << msg;
  msg = error_of(replaced(kTinyHead, "[128, 3, 2]", "[2000000000, 1, 1]"));
  EXPECT_NE(msg.find("bad.yaml:10: layer 1 (Conv): output width "), std::string::npos) << msg;
  EXPECT_NE(msg.find(" exceeds 65536 channels"), std::string::npos) << msg;
}

// Anchors: a count per level is bounded (2^62 overflowed 2 k and crashed), sizes are finite and positive.
TEST(ModelConfigErrors, AnchorCountsAndSizesAreChecked) {
  const std::string counted = replaced(replaced(replaced(kTinyHead, "  - [10,13, 16,30, 33,23]\n", ""),
                                                "  - [30,61, 62,45, 59,119]\n", ""), "anchors:", "anchors: 4611686018427387904");
  std::string msg = error_of(counted);
  EXPECT_NE(msg.find("anchors per level must be in [1, 64], got 4611686018427387904"), std::string::npos) << msg;
  for (const char* bad : {"[10,13, 16,.nan, 33,23]", "[10,13, 16,-30, 33,23]", "[10,13, 16,0, 33,23]", "[10,13, 16,.inf, 33,23]"}) {
    msg = error_of(replaced(kTinyHead, "[10,13, 16,30, 33,23]", bad));
    EXPECT_NE(msg.find("anchor sizes must be pixels in (0, 1e6]"), std::string::npos) << bad << ": " << msg;
  }
  // Finite in double, infinite in the float32 the loss computes in: every loss would be NaN.
  msg = error_of(replaced(kTinyHead, "[10,13, 16,30, 33,23]", "[10,13, 16,1e300, 33,23]"));
  EXPECT_NE(msg.find("anchor sizes must be pixels in (0, 1e6], got 1e+300"), std::string::npos) << msg;
}

// An explicit None is upstream's default only where that default is None (a Conv's padding: autopad;
// MaxPool2d's stride: the kernel); where the module would fail on it upstream (nn.Conv2d(stride=None),
// nn.Upsample with neither size nor scale) it is an error naming the argument. As upstream, None as an
// activation is Identity and None as a shortcut flag is false.
TEST(ModelConfigErrors, NoneOnlyWhereUpstreamTakesIt) {
  auto msg = error_of(replaced(kTinyHead, "[128, 3, 2]", "[128, 3, None]"));
  EXPECT_NE(msg.find("bad.yaml:10: layer 1 (Conv): argument 3 is None"), std::string::npos) << msg;
  msg = error_of(replaced(kTinyHead, "SPPF, [256, 5]", "nn.Upsample, [None, None, 'nearest']"));
  EXPECT_NE(msg.find("bad.yaml:15: layer 4 (nn.Upsample): argument 2 is None"), std::string::npos) << msg;
  msg = error_of(replaced(kTinyHead, "[64, 6, 2, 2]", "[64, 6, 2, 2, None]"));
  EXPECT_NE(msg.find("layer 0 (Conv): argument 5 is None"), std::string::npos) << msg;

  const auto conv0 = [](const std::string& yaml) {
    auto model = build_model(parse_model_config(yaml, "ok.yaml"));
    return std::dynamic_pointer_cast<Conv>(model->layers()[0]);
  };
  auto conv = conv0(replaced(kTinyHead, "[64, 6, 2, 2]", "[64, 3, 2, None]"));  // autopad: 3 // 2 = 1
  ASSERT_TRUE(conv);
  EXPECT_EQ(conv->activation().kind, Activation::Kind::SiLU);
  conv = conv0(replaced(kTinyHead, "[64, 6, 2, 2]", "[64, 3, 2, None, 1, 1, None]"));
  ASSERT_TRUE(conv);
  EXPECT_EQ(conv->activation().kind, Activation::Kind::Identity);
  // MaxPool2d(2, stride=None): the stride is the kernel, 2
  EXPECT_NO_THROW(build_model(parse_model_config(replaced(kTinyHead, "SPPF, [256, 5]", "nn.MaxPool2d, [2, None, 0]"), "ok.yaml")));
}

// A padding that breaks the halvings (a 6x6 stride-2 Conv padded by 64 makes 256 -> 186 instead of 128):
// the levels' grids give strides 256 / 12 = 21.3 and 256 / 6 = 42.7; an error, not a model of fractional
// strides (the FLOP count at twice the largest stride then failed with LibTorch's bare message).
TEST(ModelConfigErrors, FractionalStridesAreRefused) {
  const std::string msg = error_of(replaced(kTinyHead, "[64, 6, 2, 2]", "[64, 6, 2, 64]"));
  EXPECT_NE(msg.find("bad.yaml: the detection levels' strides are "), std::string::npos) << msg;
  EXPECT_NE(msg.find("not whole numbers"), std::string::npos) << msg;
}

// Upsampling by 0, a negative, a huge or a NaN factor: named at its line, before the stride probe.
TEST(ModelConfigErrors, UpsampleFactorsOutOfRange) {
  const std::string yolo_head = replaced(kTinyHead, "[-1, 1, SPPF, [256, 5]],", "[-1, 1, nn.Upsample, [None, 2, 'nearest']],");
  for (const char* factor : {"0", "-2", "1e9", ".nan"}) {
    const std::string msg = error_of(replaced(yolo_head, "[None, 2, 'nearest']", std::string("[None, ") + factor + ", 'nearest']"));
    EXPECT_NE(msg.find("bad.yaml:15: layer 4 (nn.Upsample): scale_factor must be in (0, 64], got "), std::string::npos)
        << factor << ": " << msg;
  }
}

// YAML aliases make a few lines a value of millions of entries: the message shows its start only.
TEST(ModelConfigErrors, HugeArgumentValuesAreShortenedInMessages) {
  const std::string msg = error_of(test::yaml_alias_bomb(6) + replaced(kTinyHead, "[128, 3, 2]", "*a6"));
  EXPECT_NE(msg.find("layer 1 (Conv): argument 1 must be an integer, got '[[[[[1, 1, 1"), std::string::npos) << msg.substr(0, 300);
  EXPECT_LT(msg.size(), 400u);
  EXPECT_EQ(msg.substr(msg.size() - 4), "...'");
}

TEST(ModelConfigErrors, MalformedYaml) {
  auto msg = error_of(replaced(kTinyHead, "[-1, 1, Conv, [128, 3, 2]],", "[-1, 1, Conv, [128, 3, 2],"));
  EXPECT_NE(msg.find("bad.yaml:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed YAML"), std::string::npos) << msg;
  msg = error_of("nc: [1, 2\n");
  EXPECT_NE(msg.find("malformed YAML"), std::string::npos) << msg;
}

TEST(ModelConfigErrors, EmptyAndMissingFiles) {
  EXPECT_NE(error_of("").find("bad.yaml: the model file is empty"), std::string::npos);
  EXPECT_NE(error_of("# only a comment\n").find("the model file is empty"), std::string::npos);
  EXPECT_NE(error_of("- 1\n- 2\n").find("a model file is a YAML mapping"), std::string::npos);
  test::TempDir dir;
  try {
    load_model_config(dir.file("nope.yaml"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope.yaml: model file not found"), std::string::npos) << e.what();
  }
  try {
    load_model_config(dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
  // A bare name that is neither a file here nor a shipped config (upstream's yolov3-spp): the shipped ones listed.
  const std::string unknown = test::error_message([] { resolve_model_config_path("yolov3-spp.yaml"); });
  EXPECT_NE(unknown.find("yolov3-spp.yaml: no such file, and not a config kestrel ships ("), std::string::npos) << unknown;
  EXPECT_NE(unknown.find(", yolov3, yolov3-tiny, "), std::string::npos) << unknown;
  EXPECT_EQ(resolve_model_config_path("yolov3-tiny.yaml"), "configs/models/yolov3-tiny.yaml");
  // Upstream's own spellings, relative to its checkout, are the shipped copies ...
  EXPECT_EQ(resolve_model_config_path("models/yolov5n.yaml"), "configs/models/yolov5n.yaml");
  EXPECT_EQ(resolve_model_config_path("./models/yolov5n.yaml"), "configs/models/yolov5n.yaml");
  EXPECT_EQ(resolve_model_config_path("cfg/training/yolov7-tiny.yaml"), "configs/models/yolov7-tiny.yaml");
  EXPECT_EQ(resolve_model_config_path("models/yolov5n"), "configs/models/yolov5n.yaml");  // (no extension, as a bare name)
  EXPECT_NE(test::error_message([] { resolve_model_config_path("models/hub/yolov5s6.yaml"); })
                .find("YOLOv5's models/hub configs are not shipped"), std::string::npos);
  // ... any other missing path is an error: a mistyped path to the user's own modified file must not train the stock model.
  EXPECT_EQ(test::error_message([] { resolve_model_config_path("/nonexistent/custom/yolov5s.yaml"); }),
            "/nonexistent/custom/yolov5s.yaml: model config not found");
  EXPECT_EQ(test::error_message([] { resolve_model_config_path("models/yolov5s6.yaml"); }),
            "models/yolov5s6.yaml: model config not found (kestrel ships no yolov5s6.yaml)");
  // YOLOv7's deploy files have other heads than the training configs shipped: named, not swapped.
  EXPECT_NE(test::error_message([] { resolve_model_config_path("cfg/deploy/yolov7-tiny.yaml"); })
                .find("YOLOv7's deploy configs are not shipped: train with cfg/training/yolov7-tiny.yaml"), std::string::npos);
}

TEST(ModelConfigErrors, HeadMustBeLast) {
  auto msg = error_of(replaced(kTinyHead, "[[2, 4], 1, Detect, [nc, anchors]],", "[[2, 4], 1, Detect, [nc, anchors]],\n   [-1, 1, Conv, [8, 1, 1]],"));
  EXPECT_NE(msg.find("the detection head must be the last layer"), std::string::npos) << msg;
  msg = error_of(replaced(kTinyHead, "[[2, 4], 1, Detect, [nc, anchors]],", "[-1, 1, Conv, [8, 1, 1]],"));
  EXPECT_NE(msg.find("the last layer must be the detection head"), std::string::npos) << msg;
}

TEST(ModelConfigErrors, AnchorLevelsMustMatchTheHeadInputs) {
  auto msg = error_of(replaced(kTinyHead, "[[2, 4], 1, Detect", "[[1, 2, 4], 1, Detect"));
  EXPECT_NE(msg.find("2 anchor levels but the head reads 3 feature maps"), std::string::npos) << msg;
}

TEST(ModelConfigErrors, UnknownActivation) {
  auto msg = error_of(replaced(kTinyHead, "[128, 3, 2]", "[128, 3, 2, None, 1, nn.Swishy()]"));
  EXPECT_NE(msg.find("unsupported activation 'nn.Swishy()'"), std::string::npos) << msg;
  msg = error_of(replaced(kTinyHead, "[128, 3, 2]", "[128, 3, 2, None, 1, nn.Mish()]"));  // torch's, not kestrel's
  EXPECT_NE(msg.find("bad.yaml:10: layer 1 (Conv): unsupported activation 'nn.Mish()'"), std::string::npos) << msg;
  // A list as the file's default activation was read as "" (SiLU) without a word.
  // Empty or null is the default, as upstream's `if act:` (imported checkpoints may carry `activation: null`).
  for (const char* none : {"activation:\n", "activation: null\n", "activation: ~\n"})
    EXPECT_EQ(error_of(replaced(kTinyHead, "nc: 4\n", std::string("nc: 4\n") + none)), "(no error)") << none;
  msg = error_of(replaced(kTinyHead, "nc: 4\n", "nc: 4\nactivation: [1, 2]\n"));
  EXPECT_NE(msg.find("bad.yaml:3: 'activation' must be a module such as nn.SiLU(), got a list or mapping"), std::string::npos) << msg;
}

// Activations are read as Python calls torch.nn's classes: positional or keyword arguments (upstream eval()s
// the text), e.g. nn.LeakyReLU(negative_slope=0.1) or nn.SiLU(inplace=True); what torch would refuse is refused.
TEST(ModelConfig, ActivationsTakeTorchsArguments) {
  EXPECT_EQ(Activation::parse("nn.SiLU(inplace=True)").kind, Activation::Kind::SiLU);
  EXPECT_EQ(Activation::parse("nn.ReLU(True)").kind, Activation::Kind::ReLU);
  EXPECT_EQ(Activation::parse("nn.Hardswish()").kind, Activation::Kind::Hardswish);
  EXPECT_EQ(Activation::parse("nn.Identity(1, x=2)").kind, Activation::Kind::Identity);  // nn.Identity ignores them
  EXPECT_DOUBLE_EQ(Activation::parse("nn.LeakyReLU()").slope, 0.01);  // torch's default
  EXPECT_DOUBLE_EQ(Activation::parse("nn.LeakyReLU(0.1)").slope, 0.1);
  EXPECT_DOUBLE_EQ(Activation::parse("nn.LeakyReLU(negative_slope=0.2)").slope, 0.2);
  EXPECT_DOUBLE_EQ(Activation::parse("torch.nn.LeakyReLU(0.1, inplace=True)").slope, 0.1);
  EXPECT_DOUBLE_EQ(Activation::parse("nn.LeakyReLU(inplace=False, negative_slope=-1e-1,)").slope, -0.1);
  const auto refused = [](const char* text) { return test::error_message([&] { Activation::parse(text); }); };
  EXPECT_NE(refused("nn.Sigmoid(True)").find("nn.Sigmoid takes 0 arguments"), std::string::npos);
  EXPECT_NE(refused("nn.SiLU(True, True)").find("nn.SiLU takes 1 argument"), std::string::npos);
  EXPECT_NE(refused("nn.ReLU(slope=1)").find("nn.ReLU has no argument 'slope'"), std::string::npos);
  EXPECT_NE(refused("nn.LeakyReLU(0.1, negative_slope=0.2)").find("argument 'negative_slope' given twice"), std::string::npos);
  EXPECT_NE(refused("nn.LeakyReLU(inplace=True, 0.1)").find("a positional argument follows a keyword argument"), std::string::npos);
  EXPECT_NE(refused("nn.LeakyReLU(nan)").find("negative_slope must be a finite number, got 'nan'"), std::string::npos);
  EXPECT_NE(refused("nn.LeakyReLU(0.1x)").find("negative_slope must be a finite number, got '0.1x'"), std::string::npos);
  EXPECT_NE(refused("nn.SiLU(inplace=yes)").find("inplace must be True or False, got 'yes'"), std::string::npos);
  EXPECT_NE(refused("nn.SiLU").find("is not of the form nn.Name(...)"), std::string::npos);
  // without nn., upstream's eval fails: its layer gets nn.Identity, silently; refused here, with what to write
  EXPECT_NE(refused("LeakyReLU(0.1)").find("activation 'LeakyReLU(0.1)' lacks the nn. prefix"), std::string::npos);
  EXPECT_NE(refused("LeakyReLU(0.1)").find("write nn.LeakyReLU(...), or None for no activation"), std::string::npos);
  // a bounded length: std::regex recursed once per character (50,000 spaces overflowed the stack)
  EXPECT_NE(refused(("nn.LeakyReLU(0.1" + std::string(50000, ' ') + ")").c_str()).find("is 50017 characters long; at most 256"),
            std::string::npos);
}

// The layer table's arguments as upstream's parse_model prints them (Python's repr of the list after eval):
// strings quoted, activations as torch's modules print, `anchors: k` as the placeholder lists per input map.
TEST(ModelConfig, LayerTableArgumentsReadAsUpstreamsTable) {
  std::string yaml = replaced(kTinyHead, "[128, 3, 2]", "[128, 3, 2, None, 1, 'nn.LeakyReLU(0.1, inplace=True)']");  // quoted: YAML splits at the comma
  yaml = replaced(yaml, "SPPF, [256, 5]", "nn.Upsample, [None, 1, 'nearest']");
  yaml = replaced(yaml, "anchors:\n  - [10,13, 16,30, 33,23]\n  - [30,61, 62,45, 59,119]\n", "anchors: 2\n");
  auto model = build_model(parse_model_config(yaml, "table.yaml"));
  const auto& info = model->layer_info();
  EXPECT_EQ(info[1].arguments, "[16, 32, 3, 2, None, 1, LeakyReLU(negative_slope=0.1, inplace=True)]");
  EXPECT_EQ(info[4].arguments, "[None, 1, 'nearest']");
  // numbers as Python prints them once evaluated: 0.50 -> 0.5, 2. -> 2.0, 1e-3 -> 0.001, +1 -> 1
  auto numbers = build_model(parse_model_config(replaced(replaced(kTinyHead, "[-1, 3, C3, [128]]", "[-1, 3, C3, [128, True, +1, 0.50]]"),
                                                         "SPPF, [256, 5]", "nn.Upsample, [None, 2., 'nearest']"), "numbers.yaml"));
  EXPECT_EQ(numbers->layer_info()[2].arguments, "[32, 32, 1, True, 1, 0.5]");
  EXPECT_EQ(numbers->layer_info()[4].arguments, "[None, 2.0, 'nearest']");
  EXPECT_EQ(info[5].arguments, "[4, [[0, 1, 2, 3], [0, 1, 2, 3]], [32, 64]]");
  EXPECT_EQ(Activation::parse("nn.SiLU()").repr(), "SiLU()");
  EXPECT_EQ(Activation::parse("nn.ReLU(inplace=True)").repr(), "ReLU(inplace=True)");
  EXPECT_EQ(Activation::parse("nn.LeakyReLU()").repr(), "LeakyReLU(negative_slope=0.01)");
  EXPECT_EQ(Activation::parse("nn.Hardswish(True)").repr(), "Hardswish()");  // torch shows no inplace for it
}

// v7.0's autopad pads a convolution by half its dilated extent d(k - 1) + 1, rounded down (YOLOv7's k // 2 is
// the same at d = 1): an even kernel is padded too, k = 2 by 1, and a 256 input to a 2x2 stride-2 Conv gives 129.
TEST(ModelConfig, AutopadHalvesTheDilatedKernel) {
  const auto padding = [](int64_t k, int64_t d) {
    ConvOptions o{4, 4, k, 1};
    o.d = d;
    return (*std::get_if<torch::ExpandingArray<2>>(&Conv(o).conv2d()->options.padding()))->at(0);
  };
  EXPECT_EQ(padding(1, 1), 0);
  EXPECT_EQ(padding(2, 1), 1);
  EXPECT_EQ(padding(3, 1), 1);
  EXPECT_EQ(padding(4, 1), 2);
  EXPECT_EQ(padding(2, 2), 1);  // extent 3
  EXPECT_EQ(padding(3, 2), 2);  // extent 5
  EXPECT_EQ(padding(5, 3), 6);  // extent 13
}

// A ratio that Python's int() refuses (int(128 * nan)) or that overflows a width is an error naming the row.
TEST(ModelConfigErrors, NonFiniteRatiosAreRefused) {
  for (const char* e : {".nan", ".inf", "-.inf", "1e300"}) {
    const std::string msg = error_of(replaced(kTinyHead, "[-1, 3, C3, [128]]", std::string("[-1, 3, C3, [128, True, 1, ") + e + "]]"));
    EXPECT_NE(msg.find("bad.yaml:11: layer 2 (C3): argument 4 must be a finite number of at most 1e6"), std::string::npos) << msg;
  }
  // 9e18 x 2 is past int64's range: the width saturates at 2^62 rather than overflowing the conversion
  const std::string wide = replaced(kTinyHead, "width_multiple: 0.25", "width_multiple: 2");
  const std::string msg = error_of(replaced(wide, "[128, 3, 2]", "[9000000000000000000, 3, 2]"));
  EXPECT_NE(msg.find("layer 1 (Conv): output width 4611686018427387904 (after width_multiple 2) exceeds 65536"), std::string::npos) << msg;
}

// A number in place of the head's `nc` must be the model's class count (after a dataset's override): a head
// of 3 classes trained on 80 never saw classes 3..79, and its weights said 80.
TEST(ModelConfigErrors, HeadClassCountMustBeTheModels) {
  auto msg = error_of(replaced(kTinyHead, "Detect, [nc, anchors]", "Detect, [3, anchors]"));
  EXPECT_NE(msg.find("bad.yaml:16: layer 5 (Detect): the head's class count 3 is not the model's nc 4; write nc"),
            std::string::npos) << msg;
  msg = error_of(replaced(kTinyHead, "Detect, [nc, anchors]", "Detect, [0, anchors]"));
  EXPECT_NE(msg.find("the head's class count 0 is not the model's nc 4"), std::string::npos) << msg;
  const std::string literal = replaced(kTinyHead, "Detect, [nc, anchors]", "Detect, [4, anchors]");
  EXPECT_EQ(build_model(parse_model_config(literal, "ok.yaml"))->head().nc(), 4);  // the same number is fine
  try {
    build_model(parse_model_config(literal, "ok.yaml"), 80);
    ADD_FAILURE() << "a dataset of 80 classes built a head of 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the head's class count 4 is not the model's nc 80 (the dataset's)"), std::string::npos)
        << e.what();
  }
}

// Arguments LibTorch itself refuses (with c10::Error, which carried no file or line) are reported with
// the config line: groups that are not positive or do not divide the widths when the layer is built,
// a zero stride and feature maps that do not line up when the probe image runs through.
TEST(ModelConfigErrors, ArgumentsLibTorchRefusesNameTheLine) {
  auto msg = error_of(replaced(kTinyHead, "[128, 3, 2]", "[128, 3, 2, None, 0]"));  // groups 0
  EXPECT_NE(msg.find("bad.yaml:10: layer 1 (Conv): "), std::string::npos) << msg;
  msg = error_of(replaced(kTinyHead, "[128, 3, 2]", "[128, 3, 2, None, 3]"));  // 16 input channels, 3 groups
  EXPECT_NE(msg.find("bad.yaml:10: layer 1 (Conv): "), std::string::npos) << msg;
  EXPECT_NE(msg.find("divisible by groups"), std::string::npos) << msg;
  msg = error_of(replaced(kTinyHead, "[128, 3, 2]", "[128, 3, 0]"));  // stride 0: refused when the layer is built
  EXPECT_NE(msg.find("bad.yaml:10: layer 1 (Conv): convolution: stride must be in [1, 64], got 0"), std::string::npos) << msg;
  // Concatenating the 1/4 map (layer 1) with the 1/8 map (layer 3): the spatial sizes differ.
  msg = error_of(replaced(kTinyHead, "[-1, 1, SPPF, [256, 5]],", "[[1, 3], 1, Concat, [1]],"));
  EXPECT_NE(msg.find("bad.yaml: the network cannot run a 256 x 256 probe image"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kestrel::models
