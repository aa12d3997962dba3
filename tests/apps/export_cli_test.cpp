// kestrel export --end2end picks YOLOv7's variant as its export.py does: without --max-wh, TensorRT's
// EfficientNMS_TRT plugin (outputs num_dets, det_boxes, det_scores, det_classes); with --max-wh N, ONNX
// NonMaxSuppression for onnxruntime (output [K, 7]). The graphs themselves: tests/export/onnx_nms_test.cpp.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include <string>
#include <utility>
#include <vector>

#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/weights_file.h"
#include "kestrel/models/yolo_model.h"
#include "export/onnx_check.h"
#include "test_support.h"

namespace kestrel {
namespace {

// The graph's outputs "name:TYPE[dims]" and its NMS node, as the project's onnx reads them.
std::string describe_onnx(const std::string& path) {
  const test::CommandResult r = test::run_python(
      "import onnx\n"
      "from onnx import TensorProto as T\n"
      "m = onnx.load('" + path + "')\n"
      "dims = lambda v: ','.join(str(d.dim_param or d.dim_value) for d in v.type.tensor_type.shape.dim)\n"
      "print(' '.join(f'{v.name}:{T.DataType.Name(v.type.tensor_type.elem_type)}[{dims(v)}]' for v in m.graph.output))\n"
      "print('NODES', sorted({n.op_type for n in m.graph.node if 'NonMax' in n.op_type or 'NMS' in n.op_type}))\n");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

TEST(ExportCli, End2EndVariantFollowsMaxWh) {
  test::TempDir dir;
  const std::string config = "yolov5n";
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path(config)), 3);
  models::save_model_weights(dir.file("w.safetensors"), *model, models::describe_config(config, {"a", "b", "c"}));
  const std::string base = test::kestrel_binary() + " export --weights " + dir.file("w.safetensors") + " --img 64";

  auto r = test::run_command(base + " --end2end --topk-all 50 --dynamic-batch --out " + dir.file("trt.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("TensorRT EfficientNMS_TRT"), std::string::npos) << r.output;
  std::string d = describe_onnx(dir.file("trt.onnx"));
  EXPECT_NE(d.find("num_dets:INT32[batch,1] det_boxes:FLOAT[batch,50,4] det_scores:FLOAT[batch,50] "
                   "det_classes:INT32[batch,50]"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("NODES ['EfficientNMS_TRT']"), std::string::npos) << d;

  r = test::run_command(base + " --end2end --max-wh 640 --out " + dir.file("ort.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  d = describe_onnx(dir.file("ort.onnx"));
  EXPECT_NE(d.find("output:FLOAT[detections,7]"), std::string::npos) << d;
  EXPECT_NE(d.find("NODES ['NonMaxSuppression']"), std::string::npos) << d;

  // --dynamic-batch without NMS: only the batch axis is symbolic; 3 anchors x (8² + 4² + 2²) cells = 252 predictions at 64 px, nc + 5 = 8.
  r = test::run_command(base + " --dynamic-batch --out " + dir.file("plain.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  d = describe_onnx(dir.file("plain.onnx"));
  EXPECT_NE(d.find("output0:FLOAT[batch,252,8]"), std::string::npos) << d;

  r = test::run_command(base + " --end2end --max-wh -5 --out " + dir.file("bad.onnx"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--max-wh -5"), std::string::npos) << r.output;
}

// The command YOLOv7's README gives (--grid --end2end ... --img-size 640 640 --max-wh 640) works as
// written, but for the weights: two equal sizes, --grid accepted (kestrel's graph always has the decode),
// --simplify too (see OnnxSimplifierFindsNothingToSimplify). Two different sizes are an error naming them.
TEST(ExportCli, Yolov7ReadmeCommand) {
  test::TempDir dir;
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov7-tiny")), 3);
  models::save_model_weights(dir.file("w.safetensors"), *model, models::describe_config("yolov7-tiny", {"a", "b", "c"}));
  const std::string base = test::kestrel_binary() + " export --weights " + dir.file("w.safetensors");
  auto r = test::run_command(base + " --grid --end2end --topk-all 100 --iou-thres 0.65 --conf-thres 0.35 --img-size 64 64"
                             " --max-wh 64 --simplify --out " + dir.file("v7.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("input images [1, 3, 64, 64]"), std::string::npos) << r.output;
  const std::string d = describe_onnx(dir.file("v7.onnx"));
  EXPECT_NE(d.find("output:FLOAT[detections,7]"), std::string::npos) << d;
  // The README's TensorRT export for its deploy examples: --grid --include-nms (here at 64 px).
  r = test::run_command(base + " --grid --include-nms --img-size 64 64 --out " + dir.file("trt.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string trt = describe_onnx(dir.file("trt.onnx"));
  EXPECT_NE(trt.find("num_dets:INT32[1,1] det_boxes:FLOAT[1,100,4] det_scores:FLOAT[1,100] det_classes:INT32[1,100]"),
            std::string::npos) << trt;
  EXPECT_NE(trt.find("NODES ['EfficientNMS_TRT']"), std::string::npos) << trt;
  r = test::run_command(base + " --include-nms --end2end --out " + dir.file("bad.onnx"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("choose one"), std::string::npos) << r.output;
  r = test::run_command(base + " --img-size 64 96 --out " + dir.file("bad.onnx"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--img-size 64 96: kestrel's static graphs are square"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad.onnx")));
  // Each size is rounded to the stride before they are compared (export.py: 50 and 64 are both 64), and
  // --dynamic takes two sizes (export.py traces at them); the imgsz metadata keeps both.
  r = test::run_command(base + " --img-size 50 64 --out " + dir.file("rounded.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("WARNING: --img-size 50 must be multiple of max stride 32, updating to 64"), std::string::npos) << r.output;
  // Static: the output's row count, na * sum((64 / s)^2) = 3 * (64 + 16 + 4) = 252 for strides 8, 16, 32.
  EXPECT_NE(r.output.find("output output [1, 252, 8]\n"), std::string::npos) << r.output;
  r = test::run_command(base + " --dynamic --img-size 64 96 --out " + dir.file("wide.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const test::CommandResult meta = test::run_python(
      "import onnx\nm = onnx.load('" + dir.file("wide.onnx") + "')\nprint({p.key: p.value for p in m.metadata_props}['imgsz'])\n");
  EXPECT_NE(meta.output.find("[64,96]"), std::string::npos) << meta.output;
}

// export.py's --simplify runs onnx-simplifier over the graph. kestrel's graphs are written in the form it
// produces (shapes folded, equal constants shared), so --simplify is accepted and does nothing: checked
// here by running onnx-simplifier (onnxsim, installed by setup for the tests) over kestrel's exports,
// static, dynamic, half and with NMS, and finding the same nodes and initializers afterwards.
TEST(ExportCli, OnnxSimplifierFindsNothingToSimplify) {
  test::TempDir dir;
  const std::vector<std::pair<std::string, std::string>> exports{
      {"yolov5n", "--img 64"},
      {"yolov5n", "--img 64 --dynamic --half --simplify"},
      {"yolov7-tiny", "--img 64 --dynamic-batch"},
      {"yolov7-tiny", "--img 64 --end2end --max-wh 64"},
      {"yolor-p6", "--img 128"}};
  std::string files;
  for (size_t i = 0; i < exports.size(); ++i) {
    const auto& [config, args] = exports[i];
    auto model = models::build_model(models::load_model_config(models::resolve_model_config_path(config)), 3);
    // Trained-like batch norms: at initialisation every folded bias is zero, and equal biases would be shared.
    exporting::test_onnx::randomize_batch_norm(*model);
    const std::string weights = dir.file(config + ".safetensors"), onnx = dir.file(std::to_string(i) + ".onnx");
    models::save_model_weights(weights, *model, models::describe_config(config, {"a", "b", "c"}));
    const auto r = test::run_command(test::kestrel_binary() + " export --weights " + weights + " " + args + " --out " + onnx);
    ASSERT_EQ(r.exit_code, 0) << config << " " << args << "\n" << r.output;
    files += "'" + onnx + "', ";
  }
  const auto r = test::run_python(R"(
import onnx, onnxsim
for path in [)" + files + R"(]:
    model = onnx.load(path)
    simple, ok = onnxsim.simplify(model)
    nodes = lambda m: [(n.op_type, list(n.input), list(n.output)) for n in m.graph.node]
    inits = lambda m: sorted(t.name for t in m.graph.initializer)
    print(path.rsplit('/', 1)[1], 'checked' if ok else 'check failed',
          'same nodes' if nodes(simple) == nodes(model) else 'nodes %d -> %d' % (len(model.graph.node), len(simple.graph.node)),
          'same initializers' if inits(simple) == inits(model) else
          'initializers %d -> %d' % (len(model.graph.initializer), len(simple.graph.initializer)))
)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (size_t i = 0; i < exports.size(); ++i)
    EXPECT_NE(r.output.find(std::to_string(i) + ".onnx checked same nodes same initializers"), std::string::npos)
        << exports[i].first << " " << exports[i].second << ":\n" << r.output;
}

// YOLOv7's plain export as its README writes it (--device 0 for --half): the output is named "output",
// as YOLOv7's export.py names it (YOLOv5's "output0" above). An output path that is the weights file
// itself is refused before anything is written: the trained weights stay as they were.
TEST(ExportCli, Yolov7NamesItsOutputAndTheWeightsAreNeverOverwritten) {
  test::TempDir dir;
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov7-tiny")), 3);
  const std::string weights = dir.file("w.safetensors");
  models::save_model_weights(weights, *model, models::describe_config("yolov7-tiny", {"a", "b", "c"}));
  const std::string base = test::kestrel_binary() + " export --weights " + weights + " --img 64";
  auto r = test::run_command(base + " --device 0 --half --out " + dir.file("v7.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(describe_onnx(dir.file("v7.onnx")).find("output:FLOAT16[1,252,8]"), std::string::npos);

  const auto size = std::filesystem::file_size(weights);
  const auto time = std::filesystem::last_write_time(weights);
  r = test::run_command(base + " -o " + weights);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(weights + ": is the weights file being exported"), std::string::npos) << r.output;
  EXPECT_EQ(std::filesystem::file_size(weights), size);
  EXPECT_EQ(std::filesystem::last_write_time(weights), time);
  // The default output name of weights called *.onnx is the weights file too.
  std::filesystem::copy_file(weights, dir.file("w.onnx"));
  r = test::run_command(test::kestrel_binary() + " export --weights " + dir.file("w.onnx") + " --img 64");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("is the weights file being exported"), std::string::npos) << r.output;
  // A folder as the output is refused before a folder is made for it (a trailing '/' left an empty one).
  r = test::run_command(base + " -o " + dir.file("newdir/"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(dir.file("newdir/") + ": names a folder"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("newdir")));
}

// The console of export.py v7.0: the model with its output shape and file size (MiB), the format's start and
// success with the file written, then the closing block with the output folder. yolov5n at 64: 3 anchors over
// 8x8 + 4x4 + 2x2 cells = 252 predictions of 3 classes + 5.
TEST(ExportCli, ConsoleAsExportPy) {
  test::TempDir dir;
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), 3);
  const std::string weights = dir.file("w.safetensors");
  models::save_model_weights(weights, *model, models::describe_config("yolov5n", {"a", "b", "c"}));
  auto r = test::run_command(test::kestrel_binary() + " export --weights " + weights + " --img 64");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto mib = [](const std::string& path) {
    char text[32];
    std::snprintf(text, sizeof text, "(%.1f MB)", static_cast<double>(std::filesystem::file_size(path)) / 1048576.0);
    return std::string(text);
  };
  EXPECT_NE(r.output.find("\nPyTorch: starting from " + weights + " with output shape (1, 252, 8) " + mib(weights) +
                          "\n\nONNX: starting export with kestrel's ONNX writer (opset 12)...\nONNX: export success \u2705 "),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", saved as " + dir.file("w.onnx") + " " + mib(dir.file("w.onnx")) + "\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\n\nExport complete ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("s)\nResults saved to " + dir.path() + "\nVisualize:       https://netron.app\n"), std::string::npos)
      << r.output;
  // ultralytics/yolov3 v9.6.0's --train (a graph of the raw head outputs) is refused, with the reason.
  r = test::run_command(test::kestrel_binary() + " export --weights " + weights + " --img 64 --train");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--train: ultralytics/yolov3 v9.6.0's training-mode export"), std::string::npos) << r.output;
  // --dynamic-batch wins over --dynamic (YOLOv7's rule): two sizes are then named as its doing.
  r = test::run_command(test::kestrel_binary() + " export --weights " + weights + " --img 64 96 --dynamic --dynamic-batch");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--dynamic-batch (which wins over --dynamic, as YOLOv7's) fixes the height and width: give --dynamic "
                          "without it"), std::string::npos) << r.output;
  r = test::run_command(test::kestrel_binary() + " export --weights " + weights + " --img 64 96 --dynamic-batch");
  EXPECT_NE(r.output.find("--dynamic-batch fixes the height and width: give --dynamic without it"), std::string::npos) << r.output;
  // list flags given twice: refused (argparse keeps the last; CLI11 would join them)
  r = test::run_command(test::kestrel_binary() + " export --weights " + weights + " --img 64 --img 96");
  EXPECT_NE(r.output.find("--img: given more than once"), std::string::npos) << r.output;
}

// export.py's other formats and their options: as export.py (which writes each format asked for and
// ignores the options of the others), the ONNX file is written and a warning says how to make each other
// format from it; without onnx among the formats nothing is written and the error says so. --include is
// lowercased as export.py does; an unknown format is an error.
TEST(ExportCli, OtherFormatsAndTheirOptionsAreNamedWithTheWay) {
  test::TempDir dir;
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), 3);
  models::save_model_weights(dir.file("w.safetensors"), *model, models::describe_config("yolov5n", {"a", "b", "c"}));
  const std::string base = test::kestrel_binary() + " export --weights " + dir.file("w.safetensors") + " --img 64 --out " +
                           dir.file("w.onnx") + " ";
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"--include torchscript", "--include torchscript: not written (kestrel writes ONNX); kestrel's models are C++"},
      {"--include engine", "trtexec --onnx=" + dir.file("w.onnx") + " --saveEngine=" + dir.file("w.engine")},  // the file written
      {"--include openvino tflite", "ovc " + dir.file("w.onnx")},
      {"--include onnx mnn", "--include mnn: not one of export.py's formats"}};
  for (const auto& [args, message] : refused) {
    const auto r = test::run_command(base + args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(args.find("mnn") == std::string::npos ? "(--include onnx writes the ONNX file)" : "mnn"),
              std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir.file("w.onnx"))) << args;
  }
  // The upstream README's `--include torchscript onnx`, capitals, other formats' options: ONNX written, warnings.
  const auto r = test::run_command(base + "--include torchscript ONNX --int8 --workspace 8 --fp16 --inplace --data data/demo/demo.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("w.onnx")));
  for (const char* warning : {"WARNING: --include torchscript: not written", "WARNING: --int8 ignored: export.py's INT8",
                              "WARNING: --workspace ignored: a TensorRT engine option",
                              "WARNING: --fp16 ignored: YOLOv7's CoreML float16 option"})
    EXPECT_NE(r.output.find(warning), std::string::npos) << warning << "\n" << r.output;
}

}  // namespace
}  // namespace kestrel
