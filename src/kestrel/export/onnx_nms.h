// Non-maximum suppression inside the exported graph (`kestrel export --end2end`, YOLOv7's export.py
// --end2end), in YOLOv7's two variants, chosen as there by --max-wh:
//
// onnxruntime (--max-wh N given): the decoded predictions [B, N, nc + 5] become the kept detections
// [K, 7] = (image index in the batch, x1, y1, x2, y2, class, score), through ONNX's standard
// NonMaxSuppression operator, which onnxruntime, TensorRT (8.5 and newer) and OpenVINO implement.
// The same rule as detect.py's NMS: score = objectness x best class probability (objectness alone for a
// YOLOv7 one-class model), best class only, boxes of different classes never suppress each other
// (each class shifted by max_wh pixels; 0: class-agnostic), at most topk detections per image, kept while
// score > conf_thres, suppressed when IoU > iou_thres. Rows are grouped by image, most confident first.
//
// TensorRT (no --max-wh): TensorRT's EfficientNMS_TRT plugin (domain "TRT") on boxes [B, N, 4] (centre
// x, y, w, h: box_coding 1) and scores [B, N, nc] (objectness x class probability, or objectness alone
// for a YOLOv7 one-class model). Its four outputs: num_dets int32 [B, 1], det_boxes [B, topk, 4] (x1, y1,
// x2, y2), det_scores [B, topk], det_classes int32 [B, topk]; the first num_dets rows of each image are
// valid. The plugin suppresses per class over every class above the threshold (not only the best one).
// Only TensorRT runs this graph; its attributes are those of YOLOv7's ONNX_TRT module.
//
// YOLOv7's --include-nms: the same plugin and outputs as its utils/add_nms.py RegisterNMS appends them to
// a --grid export, on what its Detect.convert feeds it: corner boxes x1, y1, x2, y2 (box_coding 0) and
// class probability x objectness for every nc (no one-class rule there).
#pragma once
#include <optional>
#include <string>

#include "kestrel/export/onnx_graph.h"

namespace kestrel::exporting {

struct EndToEndOptions {
  int64_t topk = 100;                 // YOLOv7's --topk-all: detections kept per image
  double iou_thres = 0.45;            // YOLOv7's --iou-thres
  double conf_thres = 0.25;           // YOLOv7's --conf-thres
  std::optional<double> max_wh;       // YOLOv7's --max-wh: per-class box shift for onnxruntime; unset: TensorRT
  bool objectness_only_single_class = false;  // YOLOv7's NMS for nc = 1: score = objectness

  bool tensorrt() const { return !max_wh.has_value(); }
};

// The TensorRT variant's graph outputs, in order.
inline constexpr const char* kTensorRtOutputs[] = {"num_dets", "det_boxes", "det_scores", "det_classes"};

// onnxruntime variant. decoded: [B, N, nc + 5] in the graph's model type. Returns `output`, [K, 7] in the
// model type; the suppression itself runs in float32 (NonMaxSuppression takes no float16).
std::string append_nms(OnnxGraph& g, const std::string& decoded, int64_t nc, const EndToEndOptions& o,
                       const std::string& output);

// TensorRT variant: the EfficientNMS_TRT node writing kTensorRtOutputs (in the model type: the plugin
// takes float16 as well as float32). The caller declares them as graph outputs.
void append_efficient_nms_trt(OnnxGraph& g, const std::string& decoded, int64_t nc, const EndToEndOptions& o);

// --include-nms: EfficientNMS_TRT on corner boxes and class x objectness scores, writing kTensorRtOutputs.
void append_include_nms_trt(OnnxGraph& g, const std::string& decoded, int64_t nc, const EndToEndOptions& o);

}  // namespace kestrel::exporting
