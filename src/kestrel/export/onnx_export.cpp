#include "kestrel/export/onnx_export.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <variant>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "kestrel/core/error.h"
#include "kestrel/models/common.h"
#include "kestrel/models/detect.h"
#include "onnx.pb.h"

namespace kestrel::exporting {
namespace {

using models::Activation;

// The IR version that goes with an opset (onnx/helper.py VERSION_TABLE).
int64_t ir_version_for(int opset) {
  if (opset <= 11) return 6;
  if (opset <= 13) return 7;
  if (opset <= 17) return 8;
  if (opset <= 20) return 9;
  return 10;
}

// Builds one onnx::GraphProto: unique value names, initializers, nodes.
class GraphBuilder {
 public:
  explicit GraphBuilder(onnx::GraphProto* graph) : g_(graph) {}

  std::string fresh(const std::string& stem) { return stem + "_" + std::to_string(counter_++); }

  std::string initializer(const std::string& name, const at::Tensor& t) {
    at::Tensor c = t.detach().to(at::kCPU, at::kFloat).contiguous();
    auto* p = g_->add_initializer();
    p->set_name(name);
    p->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : c.sizes()) p->add_dims(d);
    p->set_raw_data(std::string(static_cast<const char*>(c.data_ptr()), c.numel() * sizeof(float)));
    return name;
  }

  std::string int64s(const std::string& stem, const std::vector<int64_t>& v) {
    const std::string name = fresh(stem);
    auto* p = g_->add_initializer();
    p->set_name(name);
    p->set_data_type(onnx::TensorProto::INT64);
    p->add_dims(static_cast<int64_t>(v.size()));
    std::string raw(v.size() * sizeof(int64_t), '\0');
    if (!v.empty()) std::memcpy(raw.data(), v.data(), raw.size());  // little-endian hosts only (x86, ARM)
    p->set_raw_data(raw);
    return name;
  }

  std::string floats(const std::string& stem, const std::vector<float>& v) {
    return initializer(fresh(stem), at::tensor(v, at::kFloat));
  }

  struct Attr {
    std::string name;
    std::variant<int64_t, std::vector<int64_t>, float, std::string> value;
  };

  // Adds a node with one output; returns the output's name.
  std::string node(const std::string& op, const std::vector<std::string>& inputs, const std::vector<Attr>& attrs = {},
                   const std::string& output = "") {
    auto* n = g_->add_node();
    const std::string out = output.empty() ? fresh(op) : output;
    n->set_op_type(op);
    n->set_name(fresh("n_" + op));
    for (const auto& in : inputs) n->add_input(in);
    n->add_output(out);
    for (const auto& a : attrs) {
      auto* p = n->add_attribute();
      p->set_name(a.name);
      if (auto* i = std::get_if<int64_t>(&a.value)) {
        p->set_type(onnx::AttributeProto::INT);
        p->set_i(*i);
      } else if (auto* is = std::get_if<std::vector<int64_t>>(&a.value)) {
        p->set_type(onnx::AttributeProto::INTS);
        for (int64_t x : *is) p->add_ints(x);
      } else if (auto* f = std::get_if<float>(&a.value)) {
        p->set_type(onnx::AttributeProto::FLOAT);
        p->set_f(*f);
      } else {
        p->set_type(onnx::AttributeProto::STRING);
        p->set_s(std::get<std::string>(a.value));
      }
    }
    return out;
  }

  static void tensor_value_info(onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& shape) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : shape) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }

 private:
  onnx::GraphProto* g_;
  int64_t counter_ = 0;
};

class Exporter {
 public:
  Exporter(GraphBuilder& b, int opset) : b_(b), opset_(opset) {}

  std::string activation(const Activation& act, const std::string& x) {
    switch (act.kind) {
      case Activation::Kind::SiLU: return b_.node("Mul", {x, b_.node("Sigmoid", {x})});
      case Activation::Kind::LeakyReLU: return b_.node("LeakyRelu", {x}, {{"alpha", static_cast<float>(act.slope)}});
      case Activation::Kind::ReLU: return b_.node("Relu", {x});
      case Activation::Kind::Hardswish:
        if (opset_ < 14) fail("nn.Hardswish needs --opset 14 or newer");
        return b_.node("HardSwish", {x});
      case Activation::Kind::Sigmoid: return b_.node("Sigmoid", {x});
      case Activation::Kind::Identity: return x;
    }
    return x;
  }

  std::string conv2d(const torch::nn::Conv2dImpl& conv, const std::string& x, const std::string& prefix) {
    const auto& o = conv.options;
    const auto* pad = std::get_if<torch::ExpandingArray<2>>(&o.padding());
    if (pad == nullptr) fail(prefix, ": 'valid'/'same' padding is not supported by the ONNX exporter");
    const auto k = o.kernel_size(), s = o.stride(), d = o.dilation();
    std::vector<std::string> inputs{x, b_.initializer(prefix + ".weight", conv.weight)};
    if (conv.bias.defined()) inputs.push_back(b_.initializer(prefix + ".bias", conv.bias));
    return b_.node("Conv", inputs,
                   {{"kernel_shape", std::vector<int64_t>{k->at(0), k->at(1)}},
                    {"strides", std::vector<int64_t>{s->at(0), s->at(1)}},
                    {"pads", std::vector<int64_t>{(*pad)->at(0), (*pad)->at(1), (*pad)->at(0), (*pad)->at(1)}},
                    {"dilations", std::vector<int64_t>{d->at(0), d->at(1)}},
                    {"group", static_cast<int64_t>(o.groups())}});
  }

  std::string conv(const models::Conv& c, const std::string& x, const std::string& prefix) {
    if (c.has_batch_norm()) fail(prefix, ": batch norm not fused");
    return activation(c.activation(), conv2d(*c.conv2d(), x, prefix + ".conv"));
  }

  std::string maxpool(const std::string& x, int64_t k, int64_t s, int64_t p) {
    return b_.node("MaxPool", {x},
                   {{"kernel_shape", std::vector<int64_t>{k, k}},
                    {"strides", std::vector<int64_t>{s, s}},
                    {"pads", std::vector<int64_t>{p, p, p, p}}});
  }

  std::string slice(const std::string& x, std::vector<int64_t> starts, std::vector<int64_t> ends,
                    std::vector<int64_t> axes, std::vector<int64_t> steps = {}) {
    std::vector<std::string> in{x, b_.int64s("starts", starts), b_.int64s("ends", ends), b_.int64s("axes", axes)};
    if (!steps.empty()) in.push_back(b_.int64s("steps", steps));
    return b_.node("Slice", in);
  }

  // One body layer; returns its output, or throws for modules the exporter does not cover.
  std::string layer(models::Layer& l, const std::vector<std::string>& xs, const std::string& prefix,
                    const std::string& module_name) {
    using namespace models;
    const std::string& x = xs.at(0);
    if (auto* c = dynamic_cast<Conv*>(&l)) return conv(*c, x, prefix);
    if (auto* bn = dynamic_cast<Bottleneck*>(&l)) return bottleneck(*bn, x, prefix);
    if (auto* c3 = dynamic_cast<C3*>(&l)) {
      std::string y = conv(c3->conv1(), x, prefix + ".cv1");
      for (size_t i = 0; i < c3->bottlenecks().size(); ++i)
        y = bottleneck(*c3->bottlenecks()[i], y, prefix + ".m." + std::to_string(i));
      const std::string y2 = conv(c3->conv2(), x, prefix + ".cv2");
      return conv(c3->conv3(), b_.node("Concat", {y, y2}, {{"axis", int64_t{1}}}), prefix + ".cv3");
    }
    if (auto* sppf = dynamic_cast<SPPF*>(&l)) {
      const int64_t k = sppf->kernel();
      const std::string y0 = conv(sppf->conv1(), x, prefix + ".cv1");
      const std::string y1 = maxpool(y0, k, 1, k / 2), y2 = maxpool(y1, k, 1, k / 2), y3 = maxpool(y2, k, 1, k / 2);
      return conv(sppf->conv2(), b_.node("Concat", {y0, y1, y2, y3}, {{"axis", int64_t{1}}}), prefix + ".cv2");
    }
    if (auto* spp = dynamic_cast<SPP*>(&l)) {
      const std::string y = conv(spp->conv1(), x, prefix + ".cv1");
      std::vector<std::string> parts{y};
      for (int64_t k : spp->kernels()) parts.push_back(maxpool(y, k, 1, k / 2));
      return conv(spp->conv2(), b_.node("Concat", parts, {{"axis", int64_t{1}}}), prefix + ".cv2");
    }
    if (auto* focus = dynamic_cast<Focus*>(&l)) {
      const int64_t end = std::numeric_limits<int64_t>::max();
      std::vector<std::string> parts;
      for (auto [r, c] : {std::pair<int64_t, int64_t>{0, 0}, {1, 0}, {0, 1}, {1, 1}})
        parts.push_back(slice(x, {r, c}, {end, end}, {2, 3}, {2, 2}));
      return conv(focus->conv_layer(), b_.node("Concat", parts, {{"axis", int64_t{1}}}), prefix + ".conv");
    }
    if (auto* concat = dynamic_cast<Concat*>(&l)) return b_.node("Concat", xs, {{"axis", concat->dim()}});
    if (auto* up = dynamic_cast<Upsample*>(&l)) {
      const auto s = static_cast<float>(up->scale());
      const std::string roi = opset_ < 13 ? b_.floats("roi", {}) : "";  // optional from opset 13
      return b_.node("Resize", {x, roi, b_.floats("scales", {1.f, 1.f, s, s})},
                     {{"mode", std::string("nearest")},
                      {"coordinate_transformation_mode", std::string("asymmetric")},
                      {"nearest_mode", std::string("floor")}});
    }
    if (auto* mp = dynamic_cast<MaxPool*>(&l)) return maxpool(x, mp->kernel(), mp->stride(), mp->padding());
    if (auto* zp = dynamic_cast<ZeroPad*>(&l)) {
      const auto& p = zp->padding();  // [left, right, top, bottom]
      if (p.size() != 4) fail(prefix, ": ZeroPad2d with ", p.size(), " values is not supported by the ONNX exporter");
      return b_.node("Pad", {x, b_.int64s("pads", {0, 0, p[2], p[0], 0, 0, p[3], p[1]})}, {{"mode", std::string("constant")}});
    }
    if (auto* rep = dynamic_cast<Repeat*>(&l)) {
      std::string y = x;
      for (size_t i = 0; i < rep->layers().size(); ++i)
        y = layer(*rep->layers()[i], {y}, prefix + "." + std::to_string(i), module_name);
      return y;
    }
    fail("module ", module_name, " (", prefix, ") is not supported by the ONNX exporter yet "
         "(supported: Conv, C3, Bottleneck, SPP, SPPF, Focus, Concat, nn.Upsample, MaxPool, ZeroPad2d, Detect)");
  }

  std::string bottleneck(const models::Bottleneck& b, const std::string& x, const std::string& prefix) {
    const std::string y = conv(b.second(), conv(b.first(), x, prefix + ".cv1"), prefix + ".cv2");
    return b.shortcut() ? b_.node("Add", {x, y}) : y;
  }

  // Head: output convs, then the decode of Detect::decode, concatenated to [batch, N, no].
  std::string detect(const models::Detect& head, const std::vector<std::string>& xs, const std::string& prefix,
                     int64_t batch, int64_t img, const std::string& output) {
    const int64_t na = head.num_anchors(), no = head.num_outputs();
    std::vector<std::string> levels;
    for (int64_t i = 0; i < head.num_levels(); ++i) {
      const double stride = head.strides()[i];
      const int64_t ny = img / static_cast<int64_t>(stride), nx = ny;
      std::string p = conv2d(*head.output_convs()[i], xs.at(i), prefix + ".m." + std::to_string(i));
      p = b_.node("Reshape", {p, b_.int64s("shape", {batch, na, no, ny, nx})});
      p = b_.node("Transpose", {p}, {{"perm", std::vector<int64_t>{0, 1, 3, 4, 2}}});
      const std::string y = b_.node("Sigmoid", {p});
      const std::string xy = slice(y, {0}, {2}, {4}), wh = slice(y, {2}, {4}, {4}), rest = slice(y, {4}, {no}, {4});
      // grid: cell corner - 0.5, [1, 1, ny, nx, 2] as (x, y); anchors in pixels [1, na, 1, 1, 2].
      auto yx = at::meshgrid({at::arange(ny, at::kFloat), at::arange(nx, at::kFloat)}, "ij");
      at::Tensor grid = at::stack({yx[1], yx[0]}, 2).view({1, 1, ny, nx, 2}) - 0.5;
      at::Tensor anchor_px = (head.anchors()[i].detach().to(at::kCPU, at::kFloat) * stride).view({1, na, 1, 1, 2});
      const std::string two = b_.floats("two", {2.f});
      std::string bxy = b_.node("Add", {b_.node("Mul", {xy, two}), b_.initializer(b_.fresh(prefix + ".grid"), grid)});
      bxy = b_.node("Mul", {bxy, b_.floats("stride", {static_cast<float>(stride)})});
      const std::string wh2 = b_.node("Mul", {wh, two});
      const std::string bwh = b_.node("Mul", {b_.node("Mul", {wh2, wh2}),
                                              b_.initializer(b_.fresh(prefix + ".anchor_grid"), anchor_px)});
      std::string level = b_.node("Concat", {bxy, bwh, rest}, {{"axis", int64_t{4}}});
      levels.push_back(b_.node("Reshape", {level, b_.int64s("shape", {batch, na * ny * nx, no})}));
    }
    return b_.node("Concat", levels, {{"axis", int64_t{1}}}, output);
  }

 private:
  GraphBuilder& b_;
  int opset_;
};

}  // namespace

void export_onnx(models::YoloModel& model, const std::string& path, const OnnxExportOptions& o,
                 const std::map<std::string, std::string>& metadata) {
  if (o.opset < 11 || o.opset > 21) fail("--opset ", o.opset, ": kestrel writes opsets 11 to 21");
  if (o.batch < 1) fail("--batch-size must be at least 1");
  const int64_t max_stride = model.max_stride();
  for (double s : model.head().strides())
    if (o.img % static_cast<int64_t>(s) != 0 || o.img <= 0)
      fail("--img ", o.img, " must be a positive multiple of the model's largest stride ", max_stride);
  torch::NoGradGuard no_grad;
  model.fuse();

  onnx::ModelProto proto;
  proto.set_ir_version(ir_version_for(o.opset));
  proto.set_producer_name("kestrel");
  proto.set_producer_version(KESTREL_VERSION);
  auto* opset = proto.add_opset_import();
  opset->set_domain("");
  opset->set_version(o.opset);
  auto* graph = proto.mutable_graph();
  graph->set_name(model.name());
  GraphBuilder b(graph);
  Exporter e(b, o.opset);

  const std::string input = "images", output = "output0";
  GraphBuilder::tensor_value_info(graph->add_input(), input, {o.batch, model.in_channels(), o.img, o.img});

  const auto& layers = model.layers();
  const auto& info = model.layer_info();
  const size_t body = layers.size() - 1;
  std::vector<std::string> outs(layers.size());
  std::string previous = input;
  auto source = [&](int f, size_t i) { return f < 0 || f == static_cast<int>(i) - 1 ? previous : outs.at(f); };
  for (size_t i = 0; i < body; ++i) {
    std::vector<std::string> xs;
    for (int f : info[i].from) xs.push_back(source(f, i));
    outs[i] = e.layer(*layers[i], xs, "model." + std::to_string(i), info[i].module);
    previous = outs[i];
  }
  std::vector<std::string> features;
  for (int f : info[body].from) features.push_back(source(f, body));
  if (model.head().implicit() && !model.fused()) fail("model.", body, ": IDetect implicit layers not fused");
  e.detect(model.head(), features, "model." + std::to_string(body), o.batch, o.img, output);

  int64_t n = 0;
  for (double s : model.head().strides()) n += model.head().num_anchors() * (o.img / static_cast<int64_t>(s)) * (o.img / static_cast<int64_t>(s));
  GraphBuilder::tensor_value_info(graph->add_output(), output, {o.batch, n, model.head().num_outputs()});

  std::map<std::string, std::string> props = metadata;
  props["stride"] = std::to_string(max_stride);
  props["model"] = model.name();
  for (const auto& [k, v] : props) {
    auto* p = proto.add_metadata_props();
    p->set_key(k);
    p->set_value(v);
  }

  std::string bytes;
  if (!proto.SerializeToString(&bytes)) fail(path, ": could not serialize the ONNX model");
  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(path, ": cannot write (", std::strerror(errno), ")");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) fail(path, ": write failed");
  }
  std::filesystem::rename(tmp, target);
}

}  // namespace kestrel::exporting
