// --half: the graph's float tensors are float16 (weights, input, output); onnx.checker accepts it;
// onnxruntime (CPU) runs it and matches kestrel within float16 tolerance; and the same graph with its
// float16 weights cast back to float32 matches kestrel with those rounded weights to float32
// tolerance, which shows that the fp16 file is the fp32 graph with rounded weights, nothing else.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>

#include "export/onnx_check.h"
#include "kestrel/core/error.h"
#include "kestrel/export/onnx_export.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/weights_file.h"

namespace kestrel::exporting {
namespace {

// Against float32 arithmetic on the same rounded weights and input. onnxruntime's x86 CPU provider
// casts an fp16 graph to fp32 inside (Cast after the input, Cast before the output), so here the
// error is the output's rounding, at most 2^-11 = 4.9e-4 relative (measured: box 3e-4, score 4e-5).
// The bound leaves room for providers that compute in fp16 (GPUs, ARM), where every layer rounds.
constexpr double kFloat16Tolerance = 1e-2;

// Weights and buffers rounded to float16 and back, in place (the fused model the export wrote).
void round_to_half(models::YoloModel& model) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) p.copy_(p.to(at::kHalf).to(p.scalar_type()));
  for (auto& b : model.buffers())
    if (b.is_floating_point()) b.copy_(b.to(at::kHalf).to(b.scalar_type()));
}

void check_half(const std::string& config, const std::vector<std::vector<int64_t>>& shapes, bool dynamic,
                const std::string& output) {
  at::manual_seed(9);
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path(config)));
  test_onnx::randomize_batch_norm(*model);
  test::TempDir dir;
  OnnxExportOptions o;
  o.img = shapes[0][1];
  o.batch = shapes[0][0];
  o.dynamic = dynamic;
  o.half = true;
  export_onnx(*model, dir.file("model.onnx"), o);  // fuses the model in place
  round_to_half(*model);
  std::vector<test_onnx::Case> cases;
  for (const auto& s : shapes) {
    at::Tensor x = at::rand({s[0], 3, s[1], s[2]}).to(at::kHalf).to(at::kFloat);  // inputs exact in fp16
    cases.push_back({x, test_onnx::predict(*model, x)});
  }
  test_onnx::CheckOptions half;
  half.tol = kFloat16Tolerance;
  half.expect_half = true;
  half.output = output;
  const test::CommandResult r = test_onnx::run_onnxruntime(dir, cases, half);
  EXPECT_EQ(r.exit_code, 0) << config << " fp16:\n" << r.output;
  EXPECT_NE(r.output.find("float16 box_rel_err"), std::string::npos) << r.output;  // onnxruntime returned fp16
  std::cout << config << " fp16: " << r.output;
  test_onnx::CheckOptions cast_back;
  cast_back.cast_back = true;
  cast_back.output = half.output;
  const test::CommandResult back = test_onnx::run_onnxruntime(dir, cases, cast_back);
  EXPECT_EQ(back.exit_code, 0) << config << " fp16 cast back to fp32:\n" << back.output;
  std::cout << config << " fp16 weights cast back to fp32: " << back.output;
}

TEST(OnnxHalf, Yolov5nMatchesWithinFloat16Tolerance) { check_half("yolov5n", {{2, 128, 128}}, false, test_onnx::kYolov5Output); }
TEST(OnnxHalf, Yolov7MatchesWithinFloat16Tolerance) { check_half("yolov7", {{1, 128, 128}}, false, test_onnx::kYolov7Output); }
// --half with --dynamic: the grids are built in int64 (Range has no fp16 kernel) and cast to fp16.
TEST(OnnxHalf, Yolov7TinyDynamicMatchesWithinFloat16Tolerance) {
  check_half("yolov7-tiny", {{1, 96, 96}, {2, 128, 64}}, true, test_onnx::kYolov7Output);
}

TEST(OnnxHalf, WeightsBeyondFloat16AreAnError) {
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")));
  {
    torch::NoGradGuard no_grad;
    model->named_parameters()["model.0.conv.weight"].fill_(1e6);  // stays far beyond 65504 after BN folding
  }
  test::TempDir dir;
  OnnxExportOptions o;
  o.img = 64;
  o.half = true;
  try {
    export_onnx(*model, dir.file("model.onnx"), o);
    FAIL() << "expected kestrel::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--half: model.0.conv.weight holds values up to"), std::string::npos) << msg;
    EXPECT_NE(msg.find("beyond float16's range"), std::string::npos) << msg;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("model.onnx")));
}

TEST(OnnxHalf, CliWritesADynamicFloat16File) {
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), 2);
  test::TempDir dir;
  const std::string weights = dir.file("w.safetensors");
  models::save_model_weights(weights, *model, models::describe_config("yolov5n", {"cat", "dog"}));
  const std::string out = dir.file("out/m.onnx");
  const test::CommandResult r = test::run_command(test::kestrel_binary() + " export --weights " + weights +
                                                  " --img 64 --dynamic --half -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("float16, input images [batch, 3, height, width]"), std::string::npos) << r.output;
  const test::CommandResult py = test::run_python(
      "import onnx\nfrom onnx import TensorProto as T\nm = onnx.load('" + out + "')\nonnx.checker.check_model(m)\n"
      "v = m.graph.input[0].type.tensor_type\n"
      "print(T.DataType.Name(v.elem_type), [d.dim_param or d.dim_value for d in v.shape.dim])\n");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  EXPECT_NE(py.output.find("FLOAT16 ['batch', 3, 'height', 'width']"), std::string::npos) << py.output;
}

}  // namespace
}  // namespace kestrel::exporting
