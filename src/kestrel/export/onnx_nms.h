// Non-maximum suppression inside the exported graph (`kestrel export --end2end`, YOLOv7's export.py
// --end2end for onnxruntime): the decoded predictions [B, N, nc + 5] become the kept detections
// [K, 7] = (image index in the batch, x1, y1, x2, y2, class, score), through ONNX's standard
// NonMaxSuppression operator, which onnxruntime, TensorRT (8.5 and newer) and OpenVINO implement.
// The same rule as detect.py's NMS: score = objectness x best class probability (objectness alone for a
// YOLOv7 one-class model), best class only, boxes of different classes never suppress each other
// (each class shifted by max_wh pixels), at most topk detections per image, kept while score >
// conf_thres, suppressed when IoU > iou_thres. Rows are grouped by image, most confident first.
#pragma once
#include <string>

#include "kestrel/export/onnx_graph.h"

namespace kestrel::exporting {

struct EndToEndOptions {
  int64_t topk = 100;         // YOLOv7's --topk-all: detections kept per image
  double iou_thres = 0.45;    // YOLOv7's --iou-thres
  double conf_thres = 0.25;   // YOLOv7's --conf-thres
  double max_wh = 7680;       // per-class box shift (YOLOv7's --max-wh; YOLOv5's NMS uses 7680)
  bool objectness_only_single_class = false;  // YOLOv7's NMS for nc = 1: score = objectness
};

// decoded: [B, N, nc + 5] in the graph's model type. Returns `output`, [K, 7] in the model type; the
// suppression itself runs in float32 (NonMaxSuppression takes no float16).
std::string append_nms(OnnxGraph& g, const std::string& decoded, int64_t nc, const EndToEndOptions& o,
                       const std::string& output);

}  // namespace kestrel::exporting
