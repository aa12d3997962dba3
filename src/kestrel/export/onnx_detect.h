// The detection head's decode as ONNX nodes, the same arithmetic as models::Detect::decode:
//   raw level [b, na * no, ny, nx] -> sigmoid -> xy = (2 s - 0.5 + cell) * stride, wh = (2 s)^2 * anchor
//   -> [b, na * ny * nx, no], levels concatenated to [b, N, no].
// Static graphs carry the cell grids as initializers for one image size; dynamic graphs build them
// from the level's Shape (Range over ny and nx), so one file serves any batch and image size.
#pragma once
#include <string>
#include <vector>

#include "kestrel/export/onnx_graph.h"
#include "kestrel/models/detect.h"

namespace kestrel::exporting {

struct DecodeOptions {
  bool dynamic = false;  // grids from Shape ops instead of initializers
  int64_t img = 640;     // static graphs: the square input size the grids are made for
};

// levels: the output convs' results, [b, na * no, ny_i, nx_i] per level (the head's level order).
// Returns `output`, the name given to the final Concat.
std::string decode_detections(OnnxGraph& g, const models::Detect& head, const std::vector<std::string>& levels,
                              const std::string& prefix, const DecodeOptions& options, const std::string& output);

}  // namespace kestrel::exporting
