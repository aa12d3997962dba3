#include "kestrel/export/onnx_detect.h"

#include <ATen/ATen.h>

namespace kestrel::exporting {
namespace {

// Shapes of one level's tensors: the Reshape target of the raw conv output and the cell grid.
struct LevelGrid {
  std::string reshape;  // int64 [5]: [0 (= keep batch), na, no, ny, nx]
  std::string grid;     // [1, 1, ny, nx, 2] model type: (x, y) cell index - 0.5
};

// Static: ny, nx from the image size; both tensors are initializers.
LevelGrid static_grid(OnnxGraph& g, int64_t na, int64_t no, int64_t ny, int64_t nx, const std::string& prefix) {
  auto yx = at::meshgrid({at::arange(ny, at::kFloat), at::arange(nx, at::kFloat)}, "ij");
  at::Tensor grid = at::stack({yx[1], yx[0]}, 2).view({1, 1, ny, nx, 2}) - 0.5;
  return {g.int64s("shape", {0, na, no, ny, nx}), g.weight(g.fresh(prefix + ".grid"), grid)};
}

// Dynamic: ny, nx read from the raw level p [b, na * no, ny, nx] at run time.
LevelGrid dynamic_grid(OnnxGraph& g, int64_t na, int64_t no, const std::string& p) {
  const std::string shape = g.node("Shape", {p});                 // int64 [4]: b, na * no, ny, nx
  const std::string hw = g.slice(shape, {2}, {4}, {0});           // int64 [2]: ny, nx
  const std::string reshape = g.node("Concat", {g.int64s("shape", {0, na, no}), hw}, {{"axis", int64_t{0}}});
  // cell indices 0 .. n-1 (Range takes 0-D int64 start/limit/delta), in the model's float type
  auto cells = [&](int64_t axis, const std::vector<int64_t>& view) {
    const std::string n = g.node("Gather", {shape, g.int64_scalar("axis", axis)}, {{"axis", int64_t{0}}});
    const std::string r = g.node("Range", {g.int64_scalar("zero", 0), n, g.int64_scalar("one", 1)});
    return g.node("Reshape", {g.cast_to_model_type(r), g.int64s("shape", view)});
  };
  const std::string gx = cells(3, {1, 1, 1, -1, 1}), gy = cells(2, {1, 1, -1, 1, 1});
  const std::string full =  // int64 [5]: 1, 1, ny, nx, 1
      g.node("Concat", {g.int64s("shape", {1, 1}), hw, g.int64s("shape", {1})}, {{"axis", int64_t{0}}});
  const std::string grid = g.node("Concat", {g.node("Expand", {gx, full}), g.node("Expand", {gy, full})},
                                  {{"axis", int64_t{4}}});  // [1, 1, ny, nx, 2]
  return {reshape, g.node("Sub", {grid, g.constant("half", {0.5f})})};
}

}  // namespace

std::string decode_detections(OnnxGraph& g, const models::Detect& head, const std::vector<std::string>& levels,
                              const std::string& prefix, const DecodeOptions& o, const std::string& output) {
  const int64_t na = head.num_anchors(), no = head.num_outputs();
  const at::Tensor anchors = head.anchors().detach().to(at::kCPU, at::kFloat);  // [nl, na, 2] grid units
  const std::string two = g.constant("two", {2.f});
  std::vector<std::string> decoded;
  for (int64_t i = 0; i < head.num_levels(); ++i) {
    const double stride = head.strides()[i];
    const std::string& raw = levels.at(static_cast<size_t>(i));
    const int64_t n = o.img / static_cast<int64_t>(stride);
    const LevelGrid lg = o.dynamic ? dynamic_grid(g, na, no, raw)
                                   : static_grid(g, na, no, n, n, prefix + ".m." + std::to_string(i));
    std::string p = g.node("Reshape", {raw, lg.reshape});                                  // [b, na, no, ny, nx]
    p = g.node("Transpose", {p}, {{"perm", std::vector<int64_t>{0, 1, 3, 4, 2}}});      // [b, na, ny, nx, no]
    const std::string y = g.node("Sigmoid", {p});
    const std::string xy = g.slice(y, {0}, {2}, {4}), wh = g.slice(y, {2}, {4}, {4}), rest = g.slice(y, {4}, {no}, {4});
    // xy = (2 s - 0.5 + cell) * stride; the grid holds cell - 0.5.
    std::string bxy = g.node("Add", {g.node("Mul", {xy, two}), lg.grid});
    bxy = g.node("Mul", {bxy, g.constant("stride", {static_cast<float>(stride)})});
    // wh = (2 s)^2 * anchor, anchors in pixels [1, na, 1, 1, 2]
    const at::Tensor anchor_px = (anchors[i] * stride).view({1, na, 1, 1, 2});
    const std::string wh2 = g.node("Mul", {wh, two});
    const std::string anchor = g.weight(g.fresh(prefix + ".anchor_grid"), anchor_px);
    const std::string bwh = g.node("Mul", {g.node("Mul", {wh2, wh2}), anchor});
    const std::string level = g.node("Concat", {bxy, bwh, rest}, {{"axis", int64_t{4}}});
    decoded.push_back(g.node("Reshape", {level, g.int64s("shape", {0, -1, no})}));      // [b, na * ny * nx, no]
  }
  return g.node("Concat", decoded, {{"axis", int64_t{1}}}, output);
}

}  // namespace kestrel::exporting
