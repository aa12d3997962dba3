// kestrel export --end2end picks YOLOv7's variant as its export.py does: without --max-wh, TensorRT's
// EfficientNMS_TRT plugin (outputs num_dets, det_boxes, det_scores, det_classes); with --max-wh N, ONNX
// NonMaxSuppression for onnxruntime (output [K, 7]). The graphs themselves: tests/export/onnx_nms_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>

#include <string>

#include "kestrel/models/model_config.h"
#include "kestrel/models/weights_file.h"
#include "kestrel/models/yolo_model.h"
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
// written, but for --simplify (onnx-simplifier, not part of kestrel) and the weights: two equal sizes,
// --grid accepted (kestrel's graph always has the decode). Two different sizes are an error naming them.
TEST(ExportCli, Yolov7ReadmeCommand) {
  test::TempDir dir;
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov7-tiny")), 3);
  models::save_model_weights(dir.file("w.safetensors"), *model, models::describe_config("yolov7-tiny", {"a", "b", "c"}));
  const std::string base = test::kestrel_binary() + " export --weights " + dir.file("w.safetensors");
  auto r = test::run_command(base + " --grid --end2end --topk-all 100 --iou-thres 0.65 --conf-thres 0.35 --img-size 64 64"
                             " --max-wh 64 --out " + dir.file("v7.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("input images [1, 3, 64, 64]"), std::string::npos) << r.output;
  const std::string d = describe_onnx(dir.file("v7.onnx"));
  EXPECT_NE(d.find("output:FLOAT[detections,7]"), std::string::npos) << d;
  r = test::run_command(base + " --img-size 64 96 --out " + dir.file("bad.onnx"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--img-size 64 96: kestrel's static graphs are square"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad.onnx")));
}

}  // namespace
}  // namespace kestrel
