#include "kestrel/export/onnx_nms.h"

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace kestrel::exporting {
namespace {

constexpr int64_t kEnd = INT64_MAX;

// Scores [B, N, nc] from predictions x [B, N, nc + 5]: objectness x class probability (objectness alone,
// [B, N, 1], for YOLOv7's one-class rule when `one_class_rule`).
std::string class_scores(OnnxGraph& g, const std::string& x, int64_t nc, bool one_class_rule) {
  const std::string obj = g.slice(x, {4}, {5}, {2});  // [B, N, 1]
  if (nc == 1 && one_class_rule) return obj;
  return g.node("Mul", {g.slice(x, {5}, {kEnd}, {2}), obj});
}

// Corner boxes [B, N, 4] from predictions x [B, N, ...]: [cx, cy, w, h] @ [[1, 0, 1, 0], [0, 1, 0, 1],
// [-1/2, 0, 1/2, 0], [0, -1/2, 0, 1/2]], the matrix in float32 or (model_type) in the graph's float type.
std::string corner_boxes(OnnxGraph& g, const std::string& x, bool model_type) {
  const std::vector<float> to_corners{1, 0, 1, 0, 0, 1, 0, 1, -0.5f, 0, 0.5f, 0, 0, -0.5f, 0, 0.5f};
  const std::string matrix = model_type ? g.weight(g.fresh("to_corners"), at::tensor(to_corners).view({4, 4}))
                                        : g.float32s("to_corners", to_corners, {4, 4});
  return g.node("MatMul", {g.slice(x, {0}, {4}, {2}), matrix});
}

}  // namespace

std::string append_nms(OnnxGraph& g, const std::string& decoded, int64_t nc, const EndToEndOptions& o,
                       const std::string& output) {
  constexpr int64_t kFloat = 1;  // onnx::TensorProto::FLOAT
  const std::string x = g.half() ? g.node("Cast", {decoded}, {{"to", kFloat}}) : decoded;  // [B, N, no] float32

  const std::string scores = class_scores(g, x, nc, o.objectness_only_single_class);  // [B, N, nc]
  // Best class and its score (the first of equal maxima). [B, N, 1] each
  const std::string cls = g.node("ArgMax", {scores}, {{"axis", int64_t{2}}, {"keepdims", int64_t{1}}});
  const std::string score = g.node("GatherElements", {scores, cls}, {{"axis", int64_t{2}}});
  const std::string cls_f = g.node("Cast", {cls}, {{"to", kFloat}});

  const std::string corners = corner_boxes(g, x, /*model_type=*/false);  // [B, N, 4]

  // One suppression over all classes, each class moved into its own max_wh-wide tile.
  const float max_wh = static_cast<float>(o.max_wh.value_or(0.0));
  const std::string shifted = g.node("Add", {corners, g.node("Mul", {cls_f, g.float32s("max_wh", {max_wh})})});
  const std::string selected = g.node(
      "NonMaxSuppression",
      {shifted, g.node("Transpose", {score}, {{"perm", std::vector<int64_t>{0, 2, 1}}}), g.int64s("topk", {o.topk}),
       g.float32s("iou_thres", {static_cast<float>(o.iou_thres)}),
       g.float32s("conf_thres", {static_cast<float>(o.conf_thres)})});  // [K, 3]: image, 0, box

  // Gather the kept rows: (image, box) pairs index the [B, N, ...] tensors. [K, 2]
  const std::string image_box = g.node("Gather", {selected, g.int64s("image_box", {0, 2})}, {{"axis", int64_t{1}}});
  const std::string image = g.node("Cast", {g.node("Gather", {selected, g.int64s("image", {0})}, {{"axis", int64_t{1}}})},
                                   {{"to", kFloat}});  // [K, 1]
  const std::string rows = g.node("Concat",
                                  {image, g.node("GatherND", {corners, image_box}), g.node("GatherND", {cls_f, image_box}),
                                   g.node("GatherND", {score, image_box})},
                                  {{"axis", int64_t{1}}}, g.half() ? "" : output);  // [K, 7]
  if (g.half()) return g.node("Cast", {rows}, {{"to", int64_t{10}}}, output);  // onnx::TensorProto::FLOAT16
  return rows;
}

void append_efficient_nms_trt(OnnxGraph& g, const std::string& decoded, int64_t nc, const EndToEndOptions& o) {
  const std::string boxes = g.slice(decoded, {0}, {4}, {2});  // [B, N, 4]: centre x, y, w, h
  const std::string scores = class_scores(g, decoded, nc, o.objectness_only_single_class);  // [B, N, nc]
  // YOLOv7's ONNX_TRT passes background_class and box_coding as one-element tuples, which torch.onnx
  // writes as lists (INTS); TensorRT reads either form. Written as upstream's files have them.
  g.custom_node("TRT", "EfficientNMS_TRT", {boxes, scores},
                {kTensorRtOutputs[0], kTensorRtOutputs[1], kTensorRtOutputs[2], kTensorRtOutputs[3]},
                {{"background_class", std::vector<int64_t>{-1}},
                 {"box_coding", std::vector<int64_t>{1}},
                 {"iou_threshold", static_cast<float>(o.iou_thres)},
                 {"max_output_boxes", o.topk},
                 {"plugin_version", std::string("1")},
                 {"score_activation", int64_t{0}},
                 {"score_threshold", static_cast<float>(o.conf_thres)}});
}

void append_include_nms_trt(OnnxGraph& g, const std::string& decoded, int64_t nc, const EndToEndOptions& o) {
  const std::string boxes = corner_boxes(g, decoded, /*model_type=*/true);  // [B, N, 4]
  const std::string scores = class_scores(g, decoded, nc, /*one_class_rule=*/false);  // [B, N, nc]
  // RegisterNMS's attributes as onnx-graphsurgeon writes them: plain integers, score_activation False as 0.
  g.custom_node("TRT", "EfficientNMS_TRT", {boxes, scores},
                {kTensorRtOutputs[0], kTensorRtOutputs[1], kTensorRtOutputs[2], kTensorRtOutputs[3]},
                {{"plugin_version", std::string("1")},
                 {"background_class", int64_t{-1}},
                 {"max_output_boxes", o.topk},
                 {"score_threshold", static_cast<float>(o.conf_thres)},
                 {"iou_threshold", static_cast<float>(o.iou_thres)},
                 {"score_activation", int64_t{0}},
                 {"box_coding", int64_t{0}}});
}

}  // namespace kestrel::exporting
