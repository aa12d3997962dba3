// ONNX export of YOLOv3/v5/v7 detectors (`kestrel export --format onnx`): the fused model (BN folded,
// RepConv re-parameterised, IDetect's implicit layers folded) as an ONNX graph with the head's decode
// included, like upstream's export: input "images" [batch, ch, height, width], output "output0"
// (YOLOv5's name; "output" for YOLOv7 models, as YOLOv7's export.py) [batch, N, nc + 5] (box centre x, y, w, h in input pixels, objectness, class probabilities), the
// tensor YoloModel::predict returns; with end2end, NMS follows in the graph (onnx_nms.h). Graph building
// lives in onnx_graph (protobuf), onnx_layers (body), onnx_detect (decode) and onnx_nms.
#pragma once
#include <map>
#include <string>

#include "kestrel/export/onnx_nms.h"
#include "kestrel/models/yolo_model.h"

namespace kestrel::exporting {

struct OnnxExportOptions {
  int64_t img = 640;     // square input size; a multiple of the model's largest stride
  int64_t batch = 1;     // batch size of a static graph
  int opset = 12;        // ONNX opset (11 ... 21); 12 as YOLOv5's export.py default and YOLOv7's fixed one
  bool dynamic = false;  // symbolic axes: images [batch, ch, height, width], output [batch, anchors, no];
                         // the decode builds its grids from Shape ops (upstream's --dynamic)
  bool dynamic_batch = false;  // only the batch axis symbolic (YOLOv7's --dynamic-batch): grids stay fixed
  bool half = false;     // float16 weights, input and output (upstream's --half); written from fp32 on
                         // any device: the graph is the same, only its float type changes
  bool end2end = false;  // NMS in the graph (YOLOv7's --end2end): for onnxruntime ([K, 7] "output") when
                         // nms.max_wh is set, else TensorRT's EfficientNMS_TRT (four outputs; onnx_nms.h)
  bool include_nms = false;  // YOLOv7's --include-nms: TensorRT's EfficientNMS_TRT on corner boxes (onnx_nms.h);
                             // not with end2end
  EndToEndOptions nms;   // the settings of either
};

// The output's name with --end2end for onnxruntime (YOLOv7's), for any model.
inline constexpr const char* kEndToEndOutput = "output";

// The decoded output's name without NMS: "output" for YOLOv7 models (YOLOv7's export.py), "output0"
// for YOLOv5 and YOLOv3 models (YOLOv5's export.py since v6.0; its deploy code asks for it by name).
std::string output_name(const models::YoloModel& model);

// Number of predictions for a square image of `img` pixels: na * (img / stride)^2 summed over the levels
// (25200 for a P5 model at 640).
int64_t num_predictions(const models::Detect& head, int64_t img);

// Fuses the model (in place) and writes the ONNX file to `path` (atomically).
// metadata: extra metadata_props (e.g. "names"); "stride" and "model" are always written.
// Throws kestrel::Error naming the option for bad options (--img not a multiple of the stride, --opset
// out of range, --half weights beyond float16) and naming the module and layer ("model.12") for
// layers the exporter does not cover; no file is written then.
void export_onnx(models::YoloModel& model, const std::string& path, const OnnxExportOptions& options,
                 const std::map<std::string, std::string>& metadata = {});

}  // namespace kestrel::exporting
