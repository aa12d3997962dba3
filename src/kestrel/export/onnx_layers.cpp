#include "kestrel/export/onnx_layers.h"

#include <cmath>
#include <limits>
#include <utility>

#include "kestrel/core/error.h"
#include "kestrel/models/csp_blocks.h"
#include "kestrel/models/ghost_blocks.h"
#include "kestrel/models/transformer_blocks.h"
#include "kestrel/models/yolov7_blocks.h"

namespace kestrel::exporting {

using models::Activation;

std::string OnnxLayers::activation(const Activation& act, const std::string& x) {
  switch (act.kind) {
    case Activation::Kind::SiLU: return g_.node("Mul", {x, g_.node("Sigmoid", {x})});
    case Activation::Kind::LeakyReLU: return g_.node("LeakyRelu", {x}, {{"alpha", static_cast<float>(act.slope)}});
    case Activation::Kind::ReLU: return g_.node("Relu", {x});
    case Activation::Kind::Hardswish:
      // HardSwish is an opset-14 operator; before it x * HardSigmoid(x) with alpha 1/6, beta 0.5 (what
      // torch.onnx writes for nn.Hardswish there).
      if (g_.opset() < 14)
        return g_.node("Mul", {x, g_.node("HardSigmoid", {x}, {{"alpha", 1.0f / 6.0f}, {"beta", 0.5f}})});
      return g_.node("HardSwish", {x});
    case Activation::Kind::Sigmoid: return g_.node("Sigmoid", {x});
    case Activation::Kind::Identity: return x;
  }
  return x;
}

std::string OnnxLayers::conv2d(const torch::nn::Conv2dImpl& conv, const std::string& x, const std::string& prefix) {
  const auto& o = conv.options;
  const auto* pad = std::get_if<torch::ExpandingArray<2>>(&o.padding());
  if (pad == nullptr) fail(prefix, ": 'valid'/'same' padding is not supported by the ONNX exporter");
  const auto k = o.kernel_size(), s = o.stride(), d = o.dilation();
  std::vector<std::string> inputs{x, g_.weight(prefix + ".weight", conv.weight)};
  if (conv.bias.defined()) inputs.push_back(g_.weight(prefix + ".bias", conv.bias));
  return g_.node("Conv", inputs,
                 {{"kernel_shape", std::vector<int64_t>{k->at(0), k->at(1)}},
                  {"strides", std::vector<int64_t>{s->at(0), s->at(1)}},
                  {"pads", std::vector<int64_t>{(*pad)->at(0), (*pad)->at(1), (*pad)->at(0), (*pad)->at(1)}},
                  {"dilations", std::vector<int64_t>{d->at(0), d->at(1)}},
                  {"group", static_cast<int64_t>(o.groups())}});
}

std::string OnnxLayers::conv(const models::Conv& c, const std::string& x, const std::string& prefix) {
  if (c.has_batch_norm()) fail(prefix, ": batch norm not fused (the exporter expects YoloModel::fuse() first)");
  return activation(c.activation(), conv2d(*c.conv2d(), x, prefix + ".conv"));
}

std::string OnnxLayers::maxpool(const std::string& x, int64_t k, int64_t s, int64_t p) {
  return g_.node("MaxPool", {x},
                 {{"kernel_shape", std::vector<int64_t>{k, k}},
                  {"strides", std::vector<int64_t>{s, s}},
                  {"pads", std::vector<int64_t>{p, p, p, p}}});
}

std::string OnnxLayers::concat(const std::vector<std::string>& xs) {
  return g_.node("Concat", xs, {{"axis", int64_t{1}}});
}

// [b, c, h, w] -> [b, 4c, h/2, w/2]: the pixel phases (0,0), (1,0), (0,1), (1,1) as models::space_to_depth.
std::string OnnxLayers::space_to_depth(const std::string& x) {
  const int64_t end = std::numeric_limits<int64_t>::max();
  std::vector<std::string> parts;
  for (auto [r, c] : {std::pair<int64_t, int64_t>{0, 0}, {1, 0}, {0, 1}, {1, 1}})
    parts.push_back(g_.slice(x, {r, c}, {end, end}, {2, 3}, {2, 2}));
  return concat(parts);
}

std::string OnnxLayers::bottleneck(const models::Bottleneck& b, const std::string& x, const std::string& prefix) {
  const std::string y = conv(b.second(), conv(b.first(), x, prefix + ".cv1"), prefix + ".cv2");
  return b.shortcut() ? g_.node("Add", {x, y}) : y;
}

std::string OnnxLayers::layer(models::Layer& l, const std::vector<std::string>& xs, const std::string& prefix,
                              const std::string& module) {
  using namespace models;
  const std::string& x = xs.at(0);
  if (auto* c = dynamic_cast<Conv*>(&l)) return conv(*c, x, prefix);
  if (auto* bn = dynamic_cast<Bottleneck*>(&l)) return bottleneck(*bn, x, prefix);
  if (auto* c3 = dynamic_cast<C3*>(&l)) {
    std::string y = conv(c3->conv1(), x, prefix + ".cv1");
    for (size_t i = 0; i < c3->bottlenecks().size(); ++i)
      y = bottleneck(*c3->bottlenecks()[i], y, prefix + ".m." + std::to_string(i));
    return conv(c3->conv3(), concat({y, conv(c3->conv2(), x, prefix + ".cv2")}), prefix + ".cv3");
  }
  if (auto* sppf = dynamic_cast<SPPF*>(&l)) {
    const int64_t k = sppf->kernel();
    const std::string y0 = conv(sppf->conv1(), x, prefix + ".cv1");
    const std::string y1 = maxpool(y0, k, 1, k / 2), y2 = maxpool(y1, k, 1, k / 2), y3 = maxpool(y2, k, 1, k / 2);
    return conv(sppf->conv2(), concat({y0, y1, y2, y3}), prefix + ".cv2");
  }
  if (auto* spp = dynamic_cast<SPP*>(&l)) {
    const std::string y = conv(spp->conv1(), x, prefix + ".cv1");
    std::vector<std::string> parts{y};
    for (int64_t k : spp->kernels()) parts.push_back(maxpool(y, k, 1, k / 2));
    return conv(spp->conv2(), concat(parts), prefix + ".cv2");
  }
  if (auto* focus = dynamic_cast<Focus*>(&l)) return conv(focus->conv_layer(), space_to_depth(x), prefix + ".conv");
  if (auto* cat = dynamic_cast<Concat*>(&l)) return g_.node("Concat", xs, {{"axis", cat->dim()}});
  if (auto* up = dynamic_cast<Upsample*>(&l)) {
    // Nearest, integer scale: output pixel i reads input floor(i / s), as torch's 'nearest'.
    const auto s = static_cast<float>(up->scale());
    const std::string roi = g_.opset() < 13 ? g_.float32s("roi", {}) : "";  // optional from opset 13
    return g_.node("Resize", {x, roi, g_.float32s("scales", {1.f, 1.f, s, s})},
                   {{"mode", std::string("nearest")},
                    {"coordinate_transformation_mode", std::string("asymmetric")},
                    {"nearest_mode", std::string("floor")}});
  }
  if (auto* mp = dynamic_cast<MaxPool*>(&l)) return maxpool(x, mp->kernel(), mp->stride(), mp->padding());
  if (auto* zp = dynamic_cast<ZeroPad*>(&l)) {
    const auto& p = zp->padding();  // [left, right, top, bottom]
    if (p.size() != 4) fail(prefix, ": ZeroPad2d with ", p.size(), " values is not supported by the ONNX exporter");
    return g_.node("Pad", {x, g_.int64s("pads", {0, 0, p[2], p[0], 0, 0, p[3], p[1]})},
                   {{"mode", std::string("constant")}});
  }
  if (auto* rep = dynamic_cast<Repeat*>(&l)) {
    std::string y = x;
    for (size_t i = 0; i < rep->layers().size(); ++i)
      y = layer(*rep->layers()[i], {y}, prefix + "." + std::to_string(i), module);
    return y;
  }
  std::string y = yolov7_layer(l, xs, prefix);
  if (y.empty()) y = ghost_layer(l, x, prefix);
  if (y.empty()) y = transformer_layer(l, x, prefix);
  if (y.empty())
    fail("module ", module, " (", prefix, ") is not supported by the ONNX exporter yet (supported: Conv, DWConv, C3, "
         "Bottleneck, SPP, SPPF, Focus, GhostConv, GhostBottleneck, C3Ghost, C3TR, Concat, nn.Upsample, MaxPool2d/MP/SP, "
         "ZeroPad2d, SPPCSPC, RepConv, DownC, BottleneckCSPA/B/C, ResCSPA/B/C, ResXCSPA/B/C, Res, ResX, Stem, "
         "Shortcut, ReOrg, Detect, IDetect, IAuxDetect)");
  return y;
}

// YOLOv5's Ghost blocks (models/ghost_blocks.h); "" for any other layer.
std::string OnnxLayers::ghost_layer(models::Layer& l, const std::string& x, const std::string& prefix) {
  using namespace models;
  const auto ghost = [&](const GhostConv& gc, const std::string& in, const std::string& p) {
    const std::string y = conv(gc.conv1(), in, p + ".cv1");
    return concat({y, conv(gc.conv2(), y, p + ".cv2")});
  };
  const auto bottleneck = [&](const GhostBottleneck& b, const std::string& in, const std::string& p) {
    std::string y = ghost(b.ghost1(), in, p + ".conv.0");
    if (b.depthwise()) y = conv(*b.depthwise(), y, p + ".conv.1");
    y = ghost(b.ghost2(), y, p + ".conv.2");
    const std::string skip = b.shortcut_conv()
                                 ? conv(*b.shortcut_conv(), conv(*b.shortcut_depthwise(), in, p + ".shortcut.0"),
                                        p + ".shortcut.1")
                                 : in;
    return g_.node("Add", {y, skip});
  };
  if (auto* gc = dynamic_cast<GhostConv*>(&l)) return ghost(*gc, x, prefix);
  if (auto* gb = dynamic_cast<GhostBottleneck*>(&l)) return bottleneck(*gb, x, prefix);
  if (auto* c3 = dynamic_cast<C3Ghost*>(&l)) {
    std::string y = conv(c3->conv1(), x, prefix + ".cv1");
    for (size_t i = 0; i < c3->bottlenecks().size(); ++i) y = bottleneck(*c3->bottlenecks()[i], y, prefix + ".m." + std::to_string(i));
    return conv(c3->conv3(), concat({y, conv(c3->conv2(), x, prefix + ".cv2")}), prefix + ".cv3");
  }
  return "";
}

// A CSP block's unit: a Darknet Bottleneck, or a ResBottleneck cv3(cv2(cv1(x))) (+ x).
std::string OnnxLayers::csp_unit(models::Layer& unit, const std::string& x, const std::string& prefix) {
  using namespace models;
  if (auto* b = dynamic_cast<Bottleneck*>(&unit)) return bottleneck(*b, x, prefix);
  auto& res = dynamic_cast<ResBottleneck&>(unit);
  std::string y = x;
  for (int i = 1; i <= 3; ++i) y = conv(res.conv(i), y, prefix + ".cv" + std::to_string(i));
  return res.shortcut() ? g_.node("Add", {x, y}) : y;
}

// x [..., c_in] -> x W^T (+ b): a torch Linear on the last axis.
std::string OnnxLayers::linear(const torch::nn::Linear& l, const std::string& x, const std::string& name) {
  std::string y = g_.node("MatMul", {x, g_.weight(name + ".weight_t", l->weight.t().contiguous())});
  return l->bias.defined() ? g_.node("Add", {y, g_.weight(name + ".bias", l->bias)}) : y;
}

// YOLOv5's C3TR (models/transformer_blocks.h); "" for any other layer. The block runs batch-first,
// positions p [b, h w, c]: the same arithmetic as torch's sequence-first layout, with the attention split
// into its heads as torch's MultiheadAttention does (in_proj rows q | k | v, scores scaled by 1/sqrt(d)).
std::string OnnxLayers::transformer_layer(models::Layer& l, const std::string& x, const std::string& prefix) {
  using namespace models;
  auto* c3 = dynamic_cast<C3TR*>(&l);
  if (c3 == nullptr) return "";
  const TransformerBlock& block = c3->block();
  const std::string m = prefix + ".m";
  std::string x0 = conv(c3->conv1(), x, prefix + ".cv1");
  if (block.conv_layer()) x0 = conv(*block.conv_layer(), x0, m + ".conv");
  const int64_t c = block.position_embedding()->weight.size(0);
  const std::string shape = g_.node("Shape", {x0});
  std::string p = g_.node("Transpose", {g_.node("Reshape", {x0, g_.int64s("shape", {0, c, -1})})},
                          {{"perm", std::vector<int64_t>{0, 2, 1}}});
  p = g_.node("Add", {p, linear(block.position_embedding(), p, m + ".linear")});
  for (size_t i = 0; i < block.layers().size(); ++i) {
    const TransformerLayer& layer = *block.layers()[i];
    const std::string lp = m + ".tr." + std::to_string(i);
    const auto& ma = layer.attention();
    const int64_t heads = ma->options.num_heads(), d = c / heads;
    // in_proj_weight [3c, c], in_proj_bias [3c]: rows 0..c-1 project q, then k, then v.
    const auto project = [&](const std::string& in, int part, const std::vector<int64_t>& perm) {
      const at::Tensor w = ma->in_proj_weight.narrow(0, part * c, c), b = ma->in_proj_bias.narrow(0, part * c, c);
      const std::string name = lp + ".ma.in_proj." + "qkv"[part];
      std::string y = g_.node("Add", {g_.node("MatMul", {in, g_.weight(name + ".weight_t", w.t().contiguous())}),
                                      g_.weight(name + ".bias", b.contiguous())});
      y = g_.node("Reshape", {y, g_.int64s("heads", {0, 0, heads, d})});  // [b, L, H, d]
      return g_.node("Transpose", {y}, {{"perm", perm}});
    };
    const std::string q = project(linear(layer.query(), p, lp + ".q"), 0, {0, 2, 1, 3});    // [b, H, L, d]
    const std::string kt = project(linear(layer.key(), p, lp + ".k"), 1, {0, 2, 3, 1});     // [b, H, d, L]
    const std::string v = project(linear(layer.value(), p, lp + ".v"), 2, {0, 2, 1, 3});    // [b, H, L, d]
    const std::string scores = g_.node("Mul", {g_.node("MatMul", {q, kt}), g_.constant("scale", {1.f / std::sqrt(float(d))})});
    const std::string attention = g_.node("Softmax", {scores}, {{"axis", int64_t{3}}});     // [b, H, L, L]
    std::string o = g_.node("Transpose", {g_.node("MatMul", {attention, v})}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
    o = g_.node("Reshape", {o, g_.int64s("merge", {0, 0, c})});                              // [b, L, c]
    o = g_.node("Add", {g_.node("MatMul", {o, g_.weight(lp + ".ma.out_proj.weight_t", ma->out_proj->weight.t().contiguous())}),
                        g_.weight(lp + ".ma.out_proj.bias", ma->out_proj->bias)});
    const std::string y = g_.node("Add", {o, p});
    p = g_.node("Add", {linear(layer.feed_forward2(), linear(layer.feed_forward1(), y, lp + ".fc1"), lp + ".fc2"), y});
  }
  const std::string out = g_.node("Reshape", {g_.node("Transpose", {p}, {{"perm", std::vector<int64_t>{0, 2, 1}}}), shape});
  return conv(c3->conv3(), concat({out, conv(c3->conv2(), x, prefix + ".cv2")}), prefix + ".cv3");
}

// YOLOv7's blocks; "" for any other layer.
std::string OnnxLayers::yolov7_layer(models::Layer& l, const std::vector<std::string>& xs, const std::string& prefix) {
  using namespace models;
  const std::string& x = xs.at(0);
  if (auto* sppcspc = dynamic_cast<SPPCSPC*>(&l)) {
    // cv7(cat(cv6(cv5(cat(x1, pools(x1)))), cv2(x))), x1 = cv4(cv3(cv1(x))); the pools keep h, w.
    auto cv = [&](int i, const std::string& in) {
      return conv(sppcspc->conv(i), in, prefix + ".cv" + std::to_string(i));
    };
    const std::string x1 = cv(4, cv(3, cv(1, x)));
    std::vector<std::string> parts{x1};
    for (int64_t k : sppcspc->kernels()) parts.push_back(maxpool(x1, k, 1, k / 2));
    const std::string y1 = cv(6, cv(5, concat(parts)));
    return cv(7, concat({y1, cv(2, x)}));
  }
  if (auto* rep = dynamic_cast<RepConv*>(&l)) {
    // fuse() has folded the 3x3, 1x1 and identity branches (each with its BN) into one 3x3 conv with bias.
    if (rep->reparam_conv().is_empty())
      fail(prefix, ": RepConv not re-parameterised (the exporter expects YoloModel::fuse() first)");
    return activation(rep->activation(), conv2d(*rep->reparam_conv(), x, prefix + ".rbr_reparam"));
  }
  if (auto* down = dynamic_cast<DownC*>(&l)) {
    // cat(cv2(cv1(x)), cv3(maxpool_k(x))).
    auto cv = [&](int i, const std::string& in) { return conv(down->conv(i), in, prefix + ".cv" + std::to_string(i)); };
    const int64_t k = down->kernel();
    return concat({cv(2, cv(1, x)), cv(3, maxpool(x, k, k, 0))});
  }
  if (auto* csp = dynamic_cast<CspBlock*>(&l)) {
    // A: cv3(cat(m(cv1(x)), cv2(x))); B: cv3(cat(m(x1), cv2(x1))), x1 = cv1(x); C: cv4(cat(cv3(m(cv1(x))), cv2(x))).
    auto cv = [&](int i, const std::string& in) { return conv(csp->conv(i), in, prefix + ".cv" + std::to_string(i)); };
    const std::string x1 = cv(1, x);
    std::string y = x1;
    for (size_t i = 0; i < csp->units().size(); ++i) y = csp_unit(*csp->units()[i], y, prefix + ".m." + std::to_string(i));
    switch (csp->split()) {
      case CspSplit::A: return cv(3, concat({y, cv(2, x)}));
      case CspSplit::B: return cv(3, concat({y, cv(2, x1)}));
      case CspSplit::C: return cv(4, concat({cv(3, y), cv(2, x)}));
    }
  }
  if (auto* res = dynamic_cast<ResBottleneck*>(&l)) return csp_unit(*res, x, prefix);
  if (auto* stem = dynamic_cast<Stem*>(&l)) {
    // cv4(cat(cv3(cv2(y)), maxpool_2x2(y))), y = cv1(x).
    auto cv = [&](int i, const std::string& in) { return conv(stem->conv(i), in, prefix + ".cv" + std::to_string(i)); };
    const std::string y = cv(1, x);
    return cv(4, concat({cv(3, cv(2, y)), maxpool(y, 2, 2, 0)}));
  }
  if (dynamic_cast<Shortcut*>(&l) != nullptr) return g_.node("Add", {xs.at(0), xs.at(1)});
  if (dynamic_cast<ReOrg*>(&l) != nullptr) return space_to_depth(x);
  return "";
}

}  // namespace kestrel::exporting
