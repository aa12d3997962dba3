// Shared by the ONNX export tests: run an exported file in onnxruntime (the project's Python) on
// inputs kestrel also ran, and compare. Header-only (tests/CMakeLists.txt compiles *_test.cpp files).
#pragma once
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "kestrel/core/safetensors.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/yolo_model.h"
#include "test_support.h"

namespace kestrel::exporting::test_onnx {

// Reads DIR/model.onnx and DIR/io.safetensors (x0, y0, x1, y1, ...: inputs and kestrel's outputs);
// runs onnx.checker, prints the graph's input/output shapes and types, runs every case in one
// onnxruntime session and prints its errors; exit code 0 when all are within TOL.
//   box_rel: max |box diff| / max(1, max |box|)  (boxes are pixels, up to a few hundred)
//   score:   max |diff| of objectness and class probabilities (0 ... 1)
// CAST_BACK: run the graph with every float16 initializer, the input/output and Casts made float32
// (the fp16 graph's own arithmetic in fp32). EXPECT_HALF: every float initializer is float16 except
// Resize's scales/roi (which ONNX wants float32). OUTPUT: the graph's one output's name.
inline constexpr const char* kPythonCheck = R"PY(
import json, sys
import numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper, TensorProto as T
from safetensors.numpy import load_file
m = onnx.load(DIR + '/model.onnx')
onnx.checker.check_model(m, full_check=True)
meta = {p.key: p.value for p in m.metadata_props}
dims = lambda v: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
elem = lambda v: T.DataType.Name(v.type.tensor_type.elem_type)
print('input', dims(m.graph.input[0]), elem(m.graph.input[0]), 'output', dims(m.graph.output[0]), elem(m.graph.output[0]))
resize_inputs = {i for n in m.graph.node if n.op_type == 'Resize' for i in n.input[1:]}
kinds = {}
for t in m.graph.initializer:
    k = T.DataType.Name(t.data_type) + ('(resize)' if t.name in resize_inputs else '')
    kinds[k] = kinds.get(k, 0) + 1
print('initializers', json.dumps(kinds, sort_keys=True))
if EXPECT_HALF:
    assert elem(m.graph.input[0]) == 'FLOAT16' and elem(m.graph.output[0]) == 'FLOAT16'
    assert kinds.get('FLOAT', 0) == 0 and kinds.get('FLOAT16', 0) > 0, kinds
if CAST_BACK:
    for i, t in enumerate(m.graph.initializer):
        if t.data_type == T.FLOAT16:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    for v in list(m.graph.input) + list(m.graph.output):
        if v.type.tensor_type.elem_type == T.FLOAT16: v.type.tensor_type.elem_type = T.FLOAT
    for n in m.graph.node:
        for a in n.attribute:
            if n.op_type == 'Cast' and a.name == 'to' and a.i == T.FLOAT16: a.i = T.FLOAT
    onnx.checker.check_model(m)
sess = ort.InferenceSession(m.SerializeToString(), providers=['CPUExecutionProvider'])
assert [i.name for i in sess.get_inputs()] == ['images'], sess.get_inputs()
assert [o.name for o in sess.get_outputs()] == [OUTPUT], sess.get_outputs()
in_type = np.float16 if sess.get_inputs()[0].type == 'tensor(float16)' else np.float32
io = load_file(DIR + '/io.safetensors')
ok, k = True, 0
while f'x{k}' in io:
    x, ref = io[f'x{k}'], io[f'y{k}']
    y = sess.run(None, {'images': x.astype(in_type)})[0]
    out_type = str(y.dtype)
    y = y.astype(np.float32)
    assert y.shape == ref.shape, (y.shape, ref.shape)
    box = float(np.abs(y[..., :4] - ref[..., :4]).max() / max(1.0, float(np.abs(ref[..., :4]).max())))
    score = float(np.abs(y[..., 4:] - ref[..., 4:]).max())
    print('case', k, 'input', list(x.shape), 'output', list(y.shape), out_type, 'box_rel_err', box, 'score_err', score)
    ok = ok and box < TOL and score < TOL and np.isfinite(y).all()
    k += 1
assert k > 0
print('meta', json.dumps(meta, sort_keys=True))
sys.exit(0 if ok else 1)
)PY";

struct Case {
  at::Tensor x, y;  // images [b, 3, h, w], kestrel's predict() [b, N, no]
};

struct CheckOptions {
  double tol = 1e-3;
  bool cast_back = false;
  bool expect_half = false;
  std::string output = "output0";  // the output's expected name
};

// The names upstream's exports give the output, by the repository a model comes from: YOLOv7's
// export.py "output" (yolov7*, its baseline yolov4-csp / yolor, networks of its blocks), YOLOv5's "output0".
inline constexpr const char* kYolov7Output = "output";
inline constexpr const char* kYolov5Output = "output0";

// Writes the cases next to DIR/model.onnx and runs kPythonCheck.
inline test::CommandResult run_onnxruntime(const test::TempDir& dir, const std::vector<Case>& cases,
                                           const CheckOptions& o = {}) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (size_t k = 0; k < cases.size(); ++k) {
    tensors.emplace_back("x" + std::to_string(k), cases[k].x.contiguous());
    tensors.emplace_back("y" + std::to_string(k), cases[k].y.contiguous());
  }
  save_safetensors(dir.file("io.safetensors"), tensors);
  auto py_bool = [](bool b) { return std::string(b ? "True" : "False"); };
  return test::run_python("DIR = '" + dir.path() + "'\nTOL = " + std::to_string(o.tol) + "\nCAST_BACK = " +
                          py_bool(o.cast_back) + "\nEXPECT_HALF = " + py_bool(o.expect_half) + "\nOUTPUT = '" + o.output + "'\n" +
                          kPythonCheck);
}

// BN statistics and affine parameters away from their defaults, so that fusing is exercised. Finds
// every BN by its running_mean buffer (Conv's "bn", RepConv's "rbr_dense.1", "rbr_identity" ...).
inline void randomize_batch_norm(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  auto params = model.named_parameters();
  auto buffers = model.named_buffers();
  for (auto& b : buffers) {
    const std::string& key = b.key();
    const std::string suffix = "running_mean";
    if (key.size() < suffix.size() || key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string prefix = key.substr(0, key.size() - suffix.size());
    b.value().normal_(0, 0.2);
    buffers[prefix + "running_var"].uniform_(0.5, 2.0);
    params[prefix + "weight"].uniform_(0.5, 1.5);
    params[prefix + "bias"].normal_(0, 0.2);
  }
}

// A network written for a test (its YAML text; source names it in errors), built after seeding torch's
// generator with `seed`, its BN randomised. In training mode, as build_model leaves it.
inline std::shared_ptr<models::YoloModel> yaml_network(const std::string& yaml, const std::string& source, uint64_t seed) {
  at::manual_seed(seed);
  auto model = models::build_model(models::parse_model_config(yaml, source));
  randomize_batch_norm(*model);
  return model;
}

// kestrel's own decoded output in eval mode: [b, N, no].
inline at::Tensor predict(models::YoloModel& model, const at::Tensor& x) {
  torch::NoGradGuard no_grad;
  model.eval();
  return model.predict(x);
}

}  // namespace kestrel::exporting::test_onnx
