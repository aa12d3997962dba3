// ONNX export: the exported graph, run by onnxruntime (the project's Python), gives what
// YoloModel::predict gives on the same input; onnx.checker accepts the file; the CLI writes it.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "kestrel/core/error.h"
#include "kestrel/core/safetensors.h"
#include "kestrel/export/onnx_export.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/weights_file.h"
#include "test_support.h"

namespace kestrel::exporting {
namespace {

// Reads DIR/model.onnx and DIR/io.safetensors ("x", kestrel's "y"); checks the model, runs it in
// onnxruntime and prints the errors; exit code 0 when within tolerance.
constexpr const char* kPythonCheck = R"PY(
import json, sys
import numpy as np, onnx, onnxruntime as ort
from safetensors.numpy import load_file
m = onnx.load(DIR + '/model.onnx')
onnx.checker.check_model(m, full_check=True)
meta = {p.key: p.value for p in m.metadata_props}
io = load_file(DIR + '/io.safetensors')
sess = ort.InferenceSession(DIR + '/model.onnx', providers=['CPUExecutionProvider'])
assert [i.name for i in sess.get_inputs()] == ['images'], sess.get_inputs()
assert [o.name for o in sess.get_outputs()] == ['output0'], sess.get_outputs()
y = sess.run(None, {'images': io['x']})[0]
ref = io['y']
assert y.shape == ref.shape, (y.shape, ref.shape)
box_err = float(np.abs(y[..., :4] - ref[..., :4]).max() / max(1.0, float(np.abs(ref[..., :4]).max())))
score_err = float(np.abs(y[..., 4:] - ref[..., 4:]).max())
print('shape', y.shape, 'box_rel_err', box_err, 'score_err', score_err, 'meta', json.dumps(meta))
sys.exit(0 if box_err < 1e-3 and score_err < 1e-3 else 1)
)PY";

// BN statistics and affine parameters away from their defaults, so that fusing is exercised.
void randomize_batch_norm(models::YoloModel& model) {
  torch::NoGradGuard no_grad;
  for (auto& b : model.named_buffers()) {
    if (b.key().find("running_mean") != std::string::npos) b.value().normal_(0, 0.2);
    if (b.key().find("running_var") != std::string::npos) b.value().uniform_(0.5, 2.0);
  }
  for (auto& p : model.named_parameters()) {
    if (p.key().find(".bn.weight") != std::string::npos) p.value().uniform_(0.5, 1.5);
    if (p.key().find(".bn.bias") != std::string::npos) p.value().normal_(0, 0.2);
  }
}

void check_against_onnxruntime(const std::string& config, int64_t img, int64_t batch) {
  at::manual_seed(3);
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path(config)));
  randomize_batch_norm(*model);
  model->eval();
  at::Tensor x = at::rand({batch, 3, img, img});
  at::Tensor y;
  {
    torch::NoGradGuard no_grad;
    y = model->predict(x);  // unfused: the export's fusing is checked too
  }
  test::TempDir dir;
  OnnxExportOptions o;
  o.img = img;
  o.batch = batch;
  export_onnx(*model, dir.file("model.onnx"), o, {{"names", "[\"a\"]"}});
  save_safetensors(dir.file("io.safetensors"), {{"x", x}, {"y", y}});
  const test::CommandResult r = test::run_python("DIR = '" + dir.path() + "'\n" + kPythonCheck);
  EXPECT_EQ(r.exit_code, 0) << config << ":\n" << r.output;
  EXPECT_NE(r.output.find("box_rel_err"), std::string::npos) << r.output;
  std::cout << config << ": " << r.output;  // the measured errors, for the log
  EXPECT_NE(r.output.find("\"stride\": \"32\""), std::string::npos) << r.output;
}

TEST(OnnxExport, Yolov5nMatchesOnnxRuntime) { check_against_onnxruntime("yolov5n", 128, 2); }
TEST(OnnxExport, Yolov5sMatchesOnnxRuntime) { check_against_onnxruntime("yolov5s", 160, 1); }
TEST(OnnxExport, Yolov7TinyMatchesOnnxRuntime) { check_against_onnxruntime("yolov7-tiny", 128, 1); }

TEST(OnnxExport, UnsupportedModuleNamesModuleAndLayer) {
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov7")));
  test::TempDir dir;
  OnnxExportOptions o;
  o.img = 64;
  try {
    export_onnx(*model, dir.file("model.onnx"), o);
    FAIL() << "expected kestrel::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("not supported by the ONNX exporter"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(model."), std::string::npos) << msg;
    std::cout << msg << "\n";
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("model.onnx")));
}

TEST(OnnxExport, RejectsImageSizeNotAMultipleOfTheStride) {
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")));
  test::TempDir dir;
  OnnxExportOptions o;
  o.img = 100;
  EXPECT_THROW(export_onnx(*model, dir.file("model.onnx"), o), Error);
}

TEST(OnnxExport, CliWritesOnnxNextToTheWeights) {
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), 2);
  test::TempDir dir;
  const std::string weights = dir.file("best.safetensors");
  models::save_model_weights(weights, *model, models::describe_config("yolov5n", {"cat", "dog"}));
  const test::CommandResult r =
      test::run_command(test::kestrel_binary() + " export --weights " + weights + " --img 64 --opset 13");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(std::filesystem::exists(dir.file("best.onnx"))) << r.output;
  const test::CommandResult py = test::run_python(
      "import onnx\nm = onnx.load('" + dir.file("best.onnx") +
      "')\nonnx.checker.check_model(m)\n"
      "print({p.key: p.value for p in m.metadata_props}['names'], m.opset_import[0].version,\n"
      "      [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim])\n");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  EXPECT_NE(py.output.find("[\"cat\",\"dog\"] 13 [1, 252, 7]"), std::string::npos) << py.output;
}

}  // namespace
}  // namespace kestrel::exporting
