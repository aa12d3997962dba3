#include "kestrel/export/onnx_graph.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include <ATen/ATen.h>

#include "kestrel/core/atomic_file.h"
#include "kestrel/core/error.h"
#include "onnx.pb.h"

namespace kestrel::exporting {
namespace {

// The lowest IR version that goes with an opset (onnx/helper.py VERSION_TABLE, find_min_ir_version_for):
// a runtime refuses a file whose IR version is newer than it knows, whatever the opset.
int64_t ir_version_for(int opset) {
  if (opset <= 11) return 6;
  if (opset <= 14) return 7;
  if (opset <= 18) return 8;
  if (opset <= 20) return 9;
  return 10;
}

constexpr float kFloat16Max = 65504.f;

// Raw little-endian bytes of a contiguous CPU tensor (x86 and ARM hosts are little-endian).
std::string raw_bytes(const at::Tensor& c) {
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()) * c.element_size());
}

}  // namespace

struct OnnxGraph::Proto {
  onnx::ModelProto model;
  onnx::GraphProto* graph = model.mutable_graph();
};

OnnxGraph::OnnxGraph(const std::string& name, int opset, bool half)
    : proto_(std::make_unique<Proto>()), opset_(opset), half_(half) {
  auto& m = proto_->model;
  m.set_ir_version(ir_version_for(opset));
  m.set_producer_name("kestrel");
  m.set_producer_version(KESTREL_VERSION);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  proto_->graph->set_name(name);
}

OnnxGraph::~OnnxGraph() = default;

std::string OnnxGraph::fresh(const std::string& stem) { return stem + "_" + std::to_string(counter_++); }

std::string OnnxGraph::weight(const std::string& name, const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kCPU, at::kFloat);
  if (half_) {
    const double max = c.numel() > 0 ? c.abs().max().item<double>() : 0.0;
    if (!(max <= kFloat16Max))
      fail("--half: ", name, " holds values up to ", max, ", beyond float16's range (65504); export it in float32");
    c = c.to(at::kHalf);
  }
  c = c.contiguous();
  auto* p = proto_->graph->add_initializer();
  p->set_name(name);
  p->set_data_type(half_ ? onnx::TensorProto::FLOAT16 : onnx::TensorProto::FLOAT);
  for (int64_t d : c.sizes()) p->add_dims(d);
  p->set_raw_data(raw_bytes(c));
  return name;
}

std::string OnnxGraph::shared_initializer(const std::string& stem, int data_type, const std::vector<int64_t>& dims,
                                          std::string raw) {
  std::string key = std::to_string(data_type) + "[";
  for (int64_t d : dims) key += std::to_string(d) + ",";
  key += "]" + raw;
  if (const auto it = shared_.find(key); it != shared_.end()) return it->second;
  const std::string name = fresh(stem);
  auto* p = proto_->graph->add_initializer();
  p->set_name(name);
  p->set_data_type(data_type);
  for (int64_t d : dims) p->add_dims(d);  // none: a 0-D tensor
  p->set_raw_data(std::move(raw));
  shared_.emplace(std::move(key), name);
  return name;
}

std::string OnnxGraph::constant(const std::string& stem, const std::vector<float>& v) {
  const int64_t n = static_cast<int64_t>(v.size());
  if (!half_) return float32s(stem, v);  // the same bytes as a float32 tensor
  for (float x : v)
    if (!(std::abs(x) <= kFloat16Max))
      fail("--half: the constant ", stem, " holds ", x, ", beyond float16's range (65504); export it in float32");
  return shared_initializer(stem, onnx::TensorProto::FLOAT16, {n}, raw_bytes(at::tensor(v, at::kFloat).to(at::kHalf)));
}

std::string OnnxGraph::float32s(const std::string& stem, const std::vector<float>& v, const std::vector<int64_t>& dims) {
  int64_t numel = 1;
  for (int64_t d : dims) numel *= d;
  if (!dims.empty() && numel != static_cast<int64_t>(v.size()))
    fail("onnx: the constant ", stem, " has ", v.size(), " values for dims of ", numel);
  return shared_initializer(stem, onnx::TensorProto::FLOAT, dims.empty() ? std::vector<int64_t>{static_cast<int64_t>(v.size())} : dims,
                            std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
}

std::string OnnxGraph::int64s(const std::string& stem, const std::vector<int64_t>& v) {
  return shared_initializer(stem, onnx::TensorProto::INT64, {static_cast<int64_t>(v.size())},
                            std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t)));
}

std::string OnnxGraph::int64_scalar(const std::string& stem, int64_t v) {
  return shared_initializer(stem, onnx::TensorProto::INT64, {},
                            std::string(reinterpret_cast<const char*>(&v), sizeof(v)));
}

namespace {

void set_attributes(onnx::NodeProto* n, const std::vector<NodeAttr>& attrs) {
  for (const auto& a : attrs) {
    auto* p = n->add_attribute();
    p->set_name(a.name);
    if (const auto* i = std::get_if<int64_t>(&a.value)) {
      p->set_type(onnx::AttributeProto::INT);
      p->set_i(*i);
    } else if (const auto* is = std::get_if<std::vector<int64_t>>(&a.value)) {
      p->set_type(onnx::AttributeProto::INTS);
      for (int64_t x : *is) p->add_ints(x);
    } else if (const auto* f = std::get_if<float>(&a.value)) {
      p->set_type(onnx::AttributeProto::FLOAT);
      p->set_f(*f);
    } else {
      p->set_type(onnx::AttributeProto::STRING);
      p->set_s(std::get<std::string>(a.value));
    }
  }
}

}  // namespace

std::string OnnxGraph::node(const std::string& op, const std::vector<std::string>& inputs,
                            const std::vector<NodeAttr>& attrs, const std::string& output) {
  auto* n = proto_->graph->add_node();
  const std::string out = output.empty() ? fresh(op) : output;
  n->set_op_type(op);
  n->set_name(fresh("n_" + op));
  for (const auto& in : inputs) n->add_input(in);
  n->add_output(out);
  set_attributes(n, attrs);
  return out;
}

void OnnxGraph::custom_node(const std::string& domain, const std::string& op, const std::vector<std::string>& inputs,
                            const std::vector<std::string>& outputs, const std::vector<NodeAttr>& attrs) {
  auto& m = proto_->model;
  bool imported = false;
  for (const auto& o : m.opset_import()) imported = imported || o.domain() == domain;
  if (!imported) {
    auto* o = m.add_opset_import();
    o->set_domain(domain);
    o->set_version(1);
  }
  auto* n = proto_->graph->add_node();
  n->set_op_type(op);
  n->set_domain(domain);
  n->set_name(fresh("n_" + op));
  for (const auto& in : inputs) n->add_input(in);
  for (const auto& out : outputs) n->add_output(out);
  set_attributes(n, attrs);
}

std::string OnnxGraph::cast_to_model_type(const std::string& x) {
  const int64_t to = half_ ? onnx::TensorProto::FLOAT16 : onnx::TensorProto::FLOAT;
  return node("Cast", {x}, {{"to", to}});
}

std::string OnnxGraph::slice(const std::string& x, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                             const std::vector<int64_t>& axes, const std::vector<int64_t>& steps) {
  std::vector<std::string> in{x, int64s("starts", starts), int64s("ends", ends), int64s("axes", axes)};
  if (!steps.empty()) in.push_back(int64s("steps", steps));
  return node("Slice", in);
}

namespace {

void tensor_value_info(onnx::ValueInfoProto* v, const std::string& name, int elem_type, const std::vector<Dim>& shape) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  for (const Dim& d : shape) {
    auto* dim = tt->mutable_shape()->add_dim();
    if (const auto* size = std::get_if<int64_t>(&d)) dim->set_dim_value(*size);
    else dim->set_dim_param(std::get<std::string>(d));
  }
}

}  // namespace

void OnnxGraph::add_input(const std::string& name, const std::vector<Dim>& shape) {
  tensor_value_info(proto_->graph->add_input(), name, half_ ? onnx::TensorProto::FLOAT16 : onnx::TensorProto::FLOAT,
                    shape);
}

void OnnxGraph::add_output(const std::string& name, const std::vector<Dim>& shape, ElemType type) {
  const int elem = type == ElemType::int32 ? onnx::TensorProto::INT32
                   : half_                 ? onnx::TensorProto::FLOAT16
                                           : onnx::TensorProto::FLOAT;
  tensor_value_info(proto_->graph->add_output(), name, elem, shape);
}

void OnnxGraph::set_metadata(const std::map<std::string, std::string>& props) {
  proto_->model.clear_metadata_props();
  for (const auto& [k, v] : props) {
    auto* p = proto_->model.add_metadata_props();
    p->set_key(k);
    p->set_value(v);
  }
}

void OnnxGraph::save(const std::string& path) const {
  std::string bytes;
  if (!proto_->model.SerializeToString(&bytes)) fail(path, ": could not serialize the ONNX model");
  const std::filesystem::path target(path);
  // A folder as the output (or a name ending in '/') is refused before any folder is made for it.
  std::error_code ec;
  if (!target.has_filename() || std::filesystem::is_directory(target, ec))
    fail(path, ": names a folder; give the ONNX file's name (-o dir/model.onnx)");
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  write_file_atomic(path, {bytes}, Durability::kFlushed);
}

}  // namespace kestrel::exporting
