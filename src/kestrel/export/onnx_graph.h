// An ONNX model under construction: unique value names, initializers, nodes, graph inputs/outputs and
// metadata, saved as one onnx.ModelProto. The interface has no protobuf types: only onnx_graph.cpp
// includes the generated onnx.pb.h (it needs the system protobuf headers ahead of the older copy inside
// the torch wheel, see CMakeLists.txt).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <ATen/core/Tensor.h>

namespace kestrel::exporting {

// A tensor dimension in a graph input/output: a fixed size, or a named symbolic one ("batch").
using Dim = std::variant<int64_t, std::string>;

struct NodeAttr {
  std::string name;
  std::variant<int64_t, std::vector<int64_t>, float, std::string> value;
};

class OnnxGraph {
 public:
  // half: the model's float tensors (weights, activations, graph input and output) are float16;
  // otherwise float32. Control tensors (shapes, Resize scales) keep their own types either way.
  OnnxGraph(const std::string& name, int opset, bool half);
  ~OnnxGraph();
  OnnxGraph(const OnnxGraph&) = delete;
  OnnxGraph& operator=(const OnnxGraph&) = delete;

  int opset() const { return opset_; }
  bool half() const { return half_; }

  std::string fresh(const std::string& stem);  // a value name not used before

  // A float tensor of the model (weights, grids, anchors, arithmetic constants) in the model's
  // precision; `name` is used as given (the state-dict key keeps weights recognisable). Throws when a
  // value does not fit float16 (|x| > 65504) in a half graph.
  std::string weight(const std::string& name, const at::Tensor& t);
  // Arithmetic and control constants. Equal ones (same type, shape and bytes) are one initializer,
  // named after the first stem asked for: the graph holds what onnx-simplifier would leave of it.
  std::string constant(const std::string& stem, const std::vector<float>& v);  // 1-D, model precision
  // Always float32; 1-D unless dims (row-major, their product = v.size()) are given.
  std::string float32s(const std::string& stem, const std::vector<float>& v, const std::vector<int64_t>& dims = {});
  std::string int64s(const std::string& stem, const std::vector<int64_t>& v);  // 1-D
  std::string int64_scalar(const std::string& stem, int64_t v);                // 0-D (Range, Gather)

  // Adds a node with one output; returns the output's name (`output`, or a fresh one).
  std::string node(const std::string& op, const std::vector<std::string>& inputs,
                   const std::vector<NodeAttr>& attrs = {}, const std::string& output = "");
  // A node of an operator set other than ONNX's (e.g. TensorRT's plugins, domain "TRT"), with the given
  // output names; the domain is imported at version 1.
  void custom_node(const std::string& domain, const std::string& op, const std::vector<std::string>& inputs,
                   const std::vector<std::string>& outputs, const std::vector<NodeAttr>& attrs);
  std::string cast_to_model_type(const std::string& x);  // Cast to float32 / float16
  // Slice with constant starts/ends/axes (and steps); ends may be INT64_MAX for "to the end".
  std::string slice(const std::string& x, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                    const std::vector<int64_t>& axes, const std::vector<int64_t>& steps = {});

  // Graph input / output with the given shape, of the model's float type (or int32: counts, class ids).
  enum class ElemType { model_float, int32 };
  void add_input(const std::string& name, const std::vector<Dim>& shape);
  void add_output(const std::string& name, const std::vector<Dim>& shape, ElemType type = ElemType::model_float);
  void set_metadata(const std::map<std::string, std::string>& props);

  // Serializes the model and writes it to `path` atomically (a .tmp file renamed into place).
  void save(const std::string& path) const;

 private:
  // A constant initializer, or the equal one made before (key: type, dims and bytes).
  std::string shared_initializer(const std::string& stem, int data_type, const std::vector<int64_t>& dims, std::string raw);

  struct Proto;  // holds the onnx::ModelProto
  std::unique_ptr<Proto> proto_;
  std::map<std::string, std::string> shared_;  // constant key -> initializer name
  int opset_;
  bool half_;
  int64_t counter_ = 0;
};

}  // namespace kestrel::exporting
