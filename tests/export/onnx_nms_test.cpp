// `kestrel export --end2end`: NMS in the graph. For onnxruntime (--max-wh): onnxruntime's run of the exported
// file (the project's Python) against kestrel's own detect-time NMS (eval::non_max_suppression, best class only)
// on the same images: the same detections per image, in the same order, boxes and scores within float32
// rounding. For TensorRT: the plugin node, its outputs and its inputs (see expect_tensorrt_graph).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "export/onnx_check.h"
#include "kestrel/core/error.h"
#include "kestrel/eval/nms.h"
#include "kestrel/export/onnx_export.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "test_support.h"

namespace kestrel::exporting {
namespace {

void write_floats(const std::string& path, const at::Tensor& t) {
  const at::Tensor c = t.to(at::kFloat).contiguous();
  std::ofstream(path, std::ios::binary).write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
}

// Smooth random images [batch, 3, size, size] (an 8 x 8 grid of random colours, upsampled, seeded): objects of a
// sort at every scale. Written to DIR/x.bin for the Python side.
at::Tensor smooth_images(const test::TempDir& dir, int64_t batch, int64_t size) {
  at::manual_seed(12);
  const at::Tensor x = at::upsample_bilinear2d(at::rand({batch, 3, 8, 8}), {size, size}, false);
  write_floats(dir.file("x.bin"), x);
  return x;
}

// The Python line that reads DIR/x.bin back as `x`, float32 [batch, 3, size, size].
std::string python_read_images(const test::TempDir& dir, int64_t batch, int64_t size) {
  return "x = np.fromfile('" + dir.file("x.bin") + "', np.float32).reshape(" + std::to_string(batch) + ", 3, " +
         std::to_string(size) + ", " + std::to_string(size) + ")\n";
}

// Runs DIR/model.onnx on DIR/x.bin ([B, 3, S, S] float32) and writes its output to DIR/y.bin; returns K.
int64_t run_onnxruntime(const test::TempDir& dir, int64_t batch, int64_t size) {
  const test::CommandResult r = test::run_python(
      "import numpy as np, onnx, onnxruntime as ort\n"
      "m = onnx.load('" + dir.file("model.onnx") + "'); onnx.checker.check_model(m, full_check=True)\n"
      "s = ort.InferenceSession(m.SerializeToString(), providers=['CPUExecutionProvider'])\n"
      "assert [o.name for o in s.get_outputs()] == ['output'], s.get_outputs()\n"
      + python_read_images(dir, batch, size) +
      "y = s.run(None, {'images': x})[0]\n"
      "assert y.ndim == 2 and y.shape[1] == 7, y.shape\n"
      "y.astype(np.float32).tofile('" + dir.file("y.bin") + "')\n"
      "print('ROWS', y.shape[0])\n");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find("ROWS ");
  if (at == std::string::npos) return -1;
  return std::stoll(r.output.substr(at + 5));
}

// A model whose output biases are perturbed, so that a random image gives many candidates of several
// classes with spread-out scores (a fresh model's priors make every score about 1e-3).
std::shared_ptr<models::YoloModel> scored_model(int nc) {
  at::manual_seed(11);
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), nc);
  torch::NoGradGuard no_grad;
  test_onnx::randomize_batch_norm(*model);  // features that vary with the image: no exact ties in the scores
  const int64_t na = model->head().num_anchors(), no = model->head().num_outputs();
  for (const auto& conv : model->head().output_convs()) {
    conv->bias.add_(at::randn_like(conv->bias) * 2.5);
    // A one-class model's class prior is 0.99998: move it well below 1, so that scoring by objectness alone
    // and by objectness x class differ.
    if (nc == 1) conv->bias.view({na, no}).narrow(1, 5, 1).sub_(12.0);
  }
  model->eval();
  return model;
}

void expect_same_detections(int nc, bool dynamic, bool yolov7_rule) {
  SCOPED_TRACE(testing::Message() << "nc " << nc << (dynamic ? ", dynamic" : ", static") << (yolov7_rule ? ", YOLOv7 rule" : ""));
  auto model = scored_model(nc);
  constexpr int64_t kBatch = 2, kSize = 128;
  test::TempDir dir;
  OnnxExportOptions o;
  o.img = kSize;
  o.batch = kBatch;
  o.dynamic = dynamic;
  o.end2end = true;
  o.nms.topk = 40;
  o.nms.conf_thres = 0.01;
  o.nms.iou_thres = 0.45;
  o.nms.objectness_only_single_class = yolov7_rule;
  o.nms.max_wh = 7680;  // given: NMS for onnxruntime
  export_onnx(*model, dir.file("model.onnx"), o);  // fuses the model: the reference below uses the same weights

  const at::Tensor x = smooth_images(dir, kBatch, kSize);
  eval::NmsOptions nms;
  nms.conf_thres = o.nms.conf_thres;
  nms.iou_thres = o.nms.iou_thres;
  nms.max_det = o.nms.topk;
  nms.yolov7 = yolov7_rule;  // (its 4096 class tiles only matter with several classes; used with nc 1 here)
  torch::NoGradGuard no_grad;
  const std::vector<at::Tensor> expected = eval::non_max_suppression(model->predict(x), nms);  // [n, 6] per image

  const int64_t k = run_onnxruntime(dir, kBatch, kSize);
  int64_t total = 0;
  for (const auto& e : expected) total += e.size(0);
  ASSERT_EQ(k, total);
  ASSERT_GT(total, 10) << "the case should keep detections in both images";
  at::Tensor y = at::empty({k, 7});
  std::ifstream(dir.file("y.bin"), std::ios::binary).read(static_cast<char*>(y.data_ptr()), static_cast<std::streamsize>(y.nbytes()));
  // Rows are grouped by image in order; within an image, near-equal scores may come in either order, so each
  // of kestrel's detections is looked up among the image's rows.
  int64_t first = 0;
  for (int64_t b = 0; b < kBatch; ++b) {
    const at::Tensor& e = expected[static_cast<size_t>(b)];
    EXPECT_GT(e.size(0), 0) << "image " << b;
    const at::Tensor rows = y.narrow(0, first, e.size(0));
    EXPECT_TRUE((rows.select(1, 0) == static_cast<float>(b)).all().item<bool>()) << "image " << b;
    std::vector<bool> used(static_cast<size_t>(e.size(0)), false);
    for (int64_t j = 0; j < e.size(0); ++j) {
      bool found = false;
      for (int64_t r = 0; r < rows.size(0) && !found; ++r) {
        if (used[static_cast<size_t>(r)]) continue;
        found = (rows[r].narrow(0, 1, 4) - e[j].narrow(0, 0, 4)).abs().max().item<double>() < 1e-3 &&
                rows[r][5].item<float>() == e[j][5].item<float>() &&
                std::abs(rows[r][6].item<float>() - e[j][4].item<float>()) < 1e-5;
        if (found) used[static_cast<size_t>(r)] = true;
      }
      EXPECT_TRUE(found) << "image " << b << ": kestrel's detection " << e[j] << " is not in onnxruntime's output";
    }
    first += e.size(0);
  }
}

TEST(OnnxEndToEnd, MatchesDetectNms) { expect_same_detections(3, false, false); }
TEST(OnnxEndToEnd, DynamicGraphMatchesDetectNms) { expect_same_detections(3, true, false); }
TEST(OnnxEndToEnd, Yolov7OneClassScoresByObjectness) { expect_same_detections(1, false, true); }

TEST(OnnxEndToEnd, BadSettingsAreErrors) {
  auto model = scored_model(3);
  test::TempDir dir;
  OnnxExportOptions o;
  o.img = 64;
  o.end2end = true;
  o.nms.max_wh = 7680;
  o.nms.topk = 0;
  EXPECT_NE(test::error_message([&] { export_onnx(*model, dir.file("a.onnx"), o); }).find("--topk-all 0"), std::string::npos);
  o.nms.topk = 10;
  o.nms.iou_thres = 1.5;
  EXPECT_NE(test::error_message([&] { export_onnx(*model, dir.file("a.onnx"), o); }).find("--iou-thres 1.5"), std::string::npos);
  o.nms.iou_thres = 0.5;
  o.nms.max_wh = -1;
  EXPECT_NE(test::error_message([&] { export_onnx(*model, dir.file("a.onnx"), o); }).find("--max-wh -1"), std::string::npos);
}

// The TensorRT variant (no max_wh). Only TensorRT runs EfficientNMS_TRT, so the test checks what kestrel decides:
// the node and its attributes (YOLOv7's ONNX_TRT values: models/experimental.py TRT_NMS/ONNX_TRT), the four
// outputs' names, types and shapes, and, running the graph up to the plugin in onnxruntime, that its two inputs
// are kestrel's predictions: boxes = centre x, y, w, h (box_coding 1), scores = objectness x class probability
// (objectness alone under YOLOv7's one-class rule).
struct TrtCase {
  int nc = 3;
  bool yolov7_rule = false;
  bool dynamic_batch = false;
  bool half = false;
  // --include-nms (YOLOv7's RegisterNMS): corner boxes (box_coding 0), class x objectness for every nc,
  // integer attributes as onnx-graphsurgeon writes them.
  bool include_nms = false;
};

void expect_tensorrt_graph(const TrtCase& c) {
  SCOPED_TRACE(testing::Message() << "nc " << c.nc << (c.yolov7_rule ? ", YOLOv7 rule" : "")
                                  << (c.dynamic_batch ? ", dynamic batch" : "") << (c.half ? ", half" : "")
                                  << (c.include_nms ? ", --include-nms" : ""));
  auto model = scored_model(c.nc);
  constexpr int64_t kBatch = 2, kSize = 128, kTopk = 37;
  test::TempDir dir;
  OnnxExportOptions o;
  o.img = kSize;
  o.batch = c.dynamic_batch ? 1 : kBatch;  // a dynamic-batch graph is run with 2 images all the same
  o.dynamic_batch = c.dynamic_batch;
  o.half = c.half;
  o.end2end = !c.include_nms;
  o.include_nms = c.include_nms;
  o.nms.topk = kTopk;
  o.nms.conf_thres = 0.3;
  o.nms.iou_thres = 0.6;
  o.nms.objectness_only_single_class = c.yolov7_rule;
  export_onnx(*model, dir.file("model.onnx"), o);

  const at::Tensor x = smooth_images(dir, kBatch, kSize);
  const std::string b = c.dynamic_batch ? "'batch'" : std::to_string(kBatch);
  const std::string f = c.half ? "'FLOAT16'" : "'FLOAT'";
  const test::CommandResult r = test::run_python(
      "import numpy as np, onnx, onnxruntime as ort\n"
      "from onnx import helper, TensorProto as T\n"
      "m = onnx.load('" + dir.file("model.onnx") + "'); onnx.checker.check_model(m)\n"
      "nms = [n for n in m.graph.node if n.op_type == 'EfficientNMS_TRT']\n"
      "assert len(nms) == 1 and nms[0].domain == 'TRT', nms\n"
      "n = nms[0]\n"
      "assert [(o.domain, o.version) for o in m.opset_import if o.domain == 'TRT'] == [('TRT', 1)], m.opset_import\n"
      "a = {x.name: helper.get_attribute_value(x) for x in n.attribute}\n"
      "want = {'background_class': " + (c.include_nms ? "-1" : "[-1]") + ", 'box_coding': " +
      (c.include_nms ? "0" : "[1]") + ", 'max_output_boxes': " + std::to_string(kTopk) + ",\n"
      "        'plugin_version': b'1', 'score_activation': 0}\n"
      "assert {k: a[k] for k in want} == want, a\n"
      "assert abs(a['iou_threshold'] - 0.6) < 1e-7 and abs(a['score_threshold'] - 0.3) < 1e-7, a\n"
      "assert sorted(a) == sorted(list(want) + ['iou_threshold', 'score_threshold']), a\n"
      "names = ['num_dets', 'det_boxes', 'det_scores', 'det_classes']\n"
      "assert list(n.output) == names and [v.name for v in m.graph.output] == names\n"
      "dims = lambda v: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]\n"
      "elem = lambda v: T.DataType.Name(v.type.tensor_type.elem_type)\n"
      "got = [(elem(v), dims(v)) for v in m.graph.output]\n"
      "B, K, F = " + b + ", " + std::to_string(kTopk) + ", " + f + "\n"
      "assert got == [('INT32', [B, 1]), (F, [B, K, 4]), (F, [B, K]), ('INT32', [B, K])], got\n"
      "assert elem(m.graph.input[0]) == F and dims(m.graph.input[0])[0] == B, m.graph.input[0]\n"
      "# The graph up to the plugin: its inputs become the outputs.\n"
      "boxes, scores = n.input\n"
      "m.graph.node.remove(n)\n"
      "del m.graph.output[:]\n"
      "ft = T.FLOAT16 if F == 'FLOAT16' else T.FLOAT\n"
      "m.graph.output.extend([helper.make_tensor_value_info(boxes, ft, None), helper.make_tensor_value_info(scores, ft, None)])\n"
      "keep = [o for o in m.opset_import if o.domain != 'TRT']\n"
      "del m.opset_import[:]; m.opset_import.extend(keep)\n"
      "s = ort.InferenceSession(m.SerializeToString(), providers=['CPUExecutionProvider'])\n"
      + python_read_images(dir, kBatch, kSize) +
      "bx, sc = s.run(None, {'images': x.astype(np.float16 if F == 'FLOAT16' else np.float32)})\n"
      "print('SHAPES', bx.shape, sc.shape)\n"
      "bx.astype(np.float32).tofile('" + dir.file("boxes.bin") + "')\n"
      "sc.astype(np.float32).tofile('" + dir.file("scores.bin") + "')\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  torch::NoGradGuard no_grad;
  const at::Tensor pred = model->predict(x);  // [B, N, nc + 5], the fused model the file was written from
  const at::Tensor centre = pred.narrow(2, 0, 2), size = pred.narrow(2, 2, 2);
  const at::Tensor want_boxes = c.include_nms ? at::cat({centre - size / 2, centre + size / 2}, 2) : pred.narrow(2, 0, 4);
  const at::Tensor obj = pred.narrow(2, 4, 1);
  const at::Tensor want_scores = c.nc == 1 && c.yolov7_rule && !c.include_nms ? obj : pred.narrow(2, 5, c.nc) * obj;
  EXPECT_NE(r.output.find("SHAPES (" + std::to_string(kBatch) + ", " + std::to_string(pred.size(1)) + ", 4) (" +
                          std::to_string(kBatch) + ", " + std::to_string(pred.size(1)) + ", " +
                          std::to_string(want_scores.size(2)) + ")"),
            std::string::npos)
      << r.output;
  auto read = [&](const std::string& name, const at::Tensor& like) {
    at::Tensor t = at::empty_like(like).contiguous();
    std::ifstream(dir.file(name), std::ios::binary).read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
    return t;
  };
  const at::Tensor boxes = read("boxes.bin", want_boxes), scores = read("scores.bin", want_scores);
  // float32: rounding only; float16 (the whole network in half): a few units of its 1e-3 resolution.
  const double box_tol = c.half ? 0.05 : 1e-3, score_tol = c.half ? 2e-2 : 1e-5;
  EXPECT_LT((boxes - want_boxes).abs().max().item<double>() / std::max(1.0, want_boxes.abs().max().item<double>()), box_tol);
  EXPECT_LT((scores - want_scores).abs().max().item<double>(), score_tol);
  if (c.nc == 1 && c.yolov7_rule && !c.include_nms) {  // the rule changes the scores: objectness x class would differ
    EXPECT_GT((scores - pred.narrow(2, 5, 1) * obj).abs().max().item<double>(), 0.05);
  }
}

TEST(OnnxEndToEndTensorRt, PluginInputsAreKestrelPredictions) { expect_tensorrt_graph({}); }
TEST(OnnxEndToEndTensorRt, DynamicBatchAndYolov7OneClassRule) {
  TrtCase c;
  c.nc = 1;
  c.yolov7_rule = true;
  c.dynamic_batch = true;
  expect_tensorrt_graph(c);
}
TEST(OnnxEndToEndTensorRt, HalfGraphFeedsThePluginFloat16) {
  TrtCase c;
  c.half = true;
  expect_tensorrt_graph(c);
}

TEST(OnnxIncludeNms, PluginOnCornerBoxes) {
  TrtCase c;
  c.include_nms = true;
  expect_tensorrt_graph(c);
}
// YOLOv7's Detect.convert multiplies by objectness for one class too; a dynamic-batch half graph.
TEST(OnnxIncludeNms, OneClassDynamicBatchHalf) {
  TrtCase c;
  c.include_nms = true;
  c.nc = 1;
  c.yolov7_rule = true;  // set by kestrel export for YOLOv7 models; --include-nms ignores it as upstream
  c.dynamic_batch = true;
  c.half = true;
  expect_tensorrt_graph(c);
}

TEST(OnnxIncludeNms, ContradictingOptionsAreErrors) {
  auto model = scored_model(3);
  test::TempDir dir;
  OnnxExportOptions o;
  o.img = 64;
  o.include_nms = true;
  o.end2end = true;
  EXPECT_NE(test::error_message([&] { export_onnx(*model, dir.file("a.onnx"), o); }).find("choose one"), std::string::npos);
  o.end2end = false;
  o.nms.max_wh = 640;
  EXPECT_NE(test::error_message([&] { export_onnx(*model, dir.file("a.onnx"), o); }).find("--max-wh"), std::string::npos);
  o.nms.max_wh.reset();
  o.nms.topk = 0;
  EXPECT_NE(test::error_message([&] { export_onnx(*model, dir.file("a.onnx"), o); }).find("--topk-all 0"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.onnx")));
}

}  // namespace
}  // namespace kestrel::exporting
