// ONNX export of YOLOv3/v5 detectors (`kestrel export --format onnx`): the fused model as an ONNX
// graph written with protobuf from the vendored third_party/onnx/onnx.proto. Like upstream's export,
// the graph includes the head's decode: input "images" [batch, ch, img, img] float32, output
// "output0" [batch, N, nc + 5] (box centre x, y, w, h in input pixels, objectness, class
// probabilities), the same tensor YoloModel::predict returns. Sizes are static (grids and anchors
// are initializers for the chosen image size).
#pragma once
#include <map>
#include <string>

#include "kestrel/models/yolo_model.h"

namespace kestrel::exporting {

struct OnnxExportOptions {
  int64_t img = 640;    // square input size; a multiple of the model's largest stride
  int64_t batch = 1;    // fixed batch size
  int opset = 17;       // default ONNX opset (11 ... 21)
};

// Fuses the model (conv + BN folded, in place) and writes the ONNX file to `path` (atomically).
// metadata: extra metadata_props (e.g. "names"); "stride" and "model" are always written.
// Throws kestrel::Error naming the module and layer index for layers the exporter does not cover
// (YOLOv7's ELAN/RepConv/SPPCSPC blocks, ...), and for bad options.
void export_onnx(models::YoloModel& model, const std::string& path, const OnnxExportOptions& options,
                 const std::map<std::string, std::string>& metadata = {});

}  // namespace kestrel::exporting
