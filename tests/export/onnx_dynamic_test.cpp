// --dynamic: one exported file, run by onnxruntime at several batch sizes and image sizes (square and
// not), gives what YoloModel::predict gives for each; the graph's axes carry upstream's names.
#include <gtest/gtest.h>

#include <iostream>

#include "export/onnx_check.h"
#include "kestrel/export/onnx_export.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "test_support.h"

namespace kestrel::exporting {
namespace {

// config: a shipped name or a YAML file.
void check_dynamic(const std::string& config, const std::vector<std::vector<int64_t>>& shapes, const std::string& output) {
  at::manual_seed(7);
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path(config)));
  test_onnx::randomize_batch_norm(*model);
  std::vector<test_onnx::Case> cases;
  for (const auto& s : shapes) {
    at::Tensor x = at::rand({s[0], 3, s[1], s[2]});
    cases.push_back({x, test_onnx::predict(*model, x)});
  }
  test::TempDir dir;
  OnnxExportOptions o;
  o.img = 64;  // the nominal size: no case uses it
  o.dynamic = true;
  export_onnx(*model, dir.file("model.onnx"), o);
  test_onnx::CheckOptions check;
  check.output = output;
  const test::CommandResult r = test_onnx::run_onnxruntime(dir, cases, check);
  EXPECT_EQ(r.exit_code, 0) << config << ":\n" << r.output;
  EXPECT_NE(r.output.find("input ['batch', 3, 'height', 'width'] FLOAT output ['batch', 'anchors', "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("case " + std::to_string(shapes.size() - 1) + " "), std::string::npos) << r.output;
  std::cout << config << ": " << r.output;
}

// (batch, height, width): two batch sizes, two square sizes and a non-square one.
TEST(OnnxDynamic, Yolov5nOneFileServesBatchAndImageSizes) {
  check_dynamic("yolov5n", {{1, 128, 128}, {3, 96, 96}, {2, 64, 160}}, test_onnx::kYolov5Output);
}
TEST(OnnxDynamic, Yolov7TinyOneFileServesBatchAndImageSizes) {
  check_dynamic("yolov7-tiny", {{1, 96, 96}, {2, 128, 128}, {1, 160, 64}}, test_onnx::kYolov7Output);
}

// C3TR's positions come from the run-time shape (h w of each level), batch-first.
TEST(OnnxDynamic, TransformerOneFileServesBatchAndImageSizes) {
  test::TempDir dir;
  test::write_file(dir.file("tr.yaml"), R"(
nc: 3
depth_multiple: 1.0
width_multiple: 1.0
anchors: [[10,13, 16,30]]
backbone:
  [[-1, 1, Conv, [16, 3, 2]],
   [-1, 1, Conv, [32, 3, 2]],
   [-1, 2, C3TR, [32]],
  ]
head:
  [[[2], 1, Detect, [nc, anchors]]]
)");
  check_dynamic(dir.file("tr.yaml"), {{1, 64, 64}, {2, 32, 96}}, test_onnx::kYolov5Output);
}

}  // namespace
}  // namespace kestrel::exporting
