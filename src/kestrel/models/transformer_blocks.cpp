#include "kestrel/models/transformer_blocks.h"

#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/container/modulelist.h>

#include "kestrel/models/parameter_budget.h"

namespace kestrel::models {
namespace {

torch::nn::Linear make_linear(int64_t c, bool bias) {
  charge_parameters("Linear", {c, c + (bias ? 1 : 0)});
  return torch::nn::Linear(torch::nn::LinearOptions(c, c).bias(bias));
}

// torch.nn.MultiheadAttention(query, key, value) with its own parameters (in_proj [3c, c] + [3c], out_proj,
// the heads split from the channels, no dropout), written out: LibTorch's forward first compares query,
// key and value with torch::equal to choose a path, two device-to-host reads per layer and step on a GPU,
// which also break a CUDA graph capture. The steps are torch's for need_weights=True (C3TR's call, with
// batch_first False: never its fused path), so the result is bit-identical to upstream's:
// q * sqrt(1/d), bmm, softmax, bmm. q, k, v [L, b, c] -> [L, b, c].
at::Tensor multi_head_attention(const torch::nn::MultiheadAttentionImpl& ma, const at::Tensor& q, const at::Tensor& k,
                                const at::Tensor& v) {
  const int64_t L = q.size(0), b = q.size(1), c = q.size(2), heads = ma.options.num_heads(), d = c / heads;
  const std::vector<at::Tensor> w = ma.in_proj_weight.chunk(3, 0), bias = ma.in_proj_bias.chunk(3, 0);
  // [L, b, c] -> [L, b * heads, d] -> [b * heads, L, d] (torch's split)
  const auto project = [&](const at::Tensor& x, size_t i) {
    return at::linear(x, w[i], bias[i]).reshape({L, b * heads, d}).transpose(0, 1);
  };
  const at::Tensor scaled_q = project(q, 0) * std::sqrt(1.0 / static_cast<double>(d));
  const at::Tensor weights = at::softmax(at::bmm(scaled_q, project(k, 1).transpose(-2, -1)), -1);  // [b * heads, L, L]
  const at::Tensor attended = at::bmm(weights, project(v, 2));                                      // [b * heads, L, d]
  // [b * heads, L, d] -> [L, b * heads, d] -> [L * b, c], out_proj, -> [L, b, c]
  const at::Tensor merged = attended.transpose(0, 1).contiguous().view({L * b, c});
  return at::linear(merged, ma.out_proj->weight, ma.out_proj->bias).view({L, b, c});
}

}  // namespace

TransformerLayer::TransformerLayer(int64_t c, int64_t num_heads) {
  q = register_module("q", make_linear(c, false));
  k = register_module("k", make_linear(c, false));
  v = register_module("v", make_linear(c, false));
  charge_parameters("MultiheadAttention", {4 * c, c + 1});  // in_proj [3c, c] + [3c], out_proj [c, c] + [c]
  ma = register_module("ma", torch::nn::MultiheadAttention(torch::nn::MultiheadAttentionOptions(c, num_heads)));
  fc1 = register_module("fc1", make_linear(c, false));
  fc2 = register_module("fc2", make_linear(c, false));
}

at::Tensor TransformerLayer::forward(const at::Tensor& x) {
  const at::Tensor y = multi_head_attention(*ma, q->forward(x), k->forward(x), v->forward(x)) + x;
  return fc2->forward(fc1->forward(y)) + y;
}

TransformerBlock::TransformerBlock(int64_t c1, int64_t c2, int64_t num_heads, int64_t num_layers, Activation act)
    : c2_(c2) {
  if (c1 != c2) conv = register_module("conv", std::make_shared<Conv>(ConvOptions{c1, c2, 1, 1, -1, 1, 1, act}));
  linear = register_module("linear", make_linear(c2, true));  // a learned position embedding
  auto tr = register_module("tr", torch::nn::ModuleList());
  for (int64_t i = 0; i < num_layers; ++i) {
    layers_.push_back(std::make_shared<TransformerLayer>(c2, num_heads));
    tr->push_back(layers_.back());
  }
}

at::Tensor TransformerBlock::forward(const at::Tensor& input) {
  const at::Tensor x = conv ? conv->forward(input) : input;
  const int64_t b = x.size(0), h = x.size(2), w = x.size(3);
  at::Tensor p = x.flatten(2).permute({2, 0, 1});  // [h w, b, c2]
  p = p + linear->forward(p);
  for (auto& layer : layers_) p = layer->forward(p);
  return p.permute({1, 2, 0}).reshape({b, c2_, h, w});
}

void TransformerBlock::fuse() {
  if (conv) conv->fuse();
}

C3TR::C3TR(int64_t c1, int64_t c2, int64_t n, double e, Activation act)
    : convs_(*this, c1, c2, static_cast<int64_t>(c2 * e), act) {
  const auto hidden = static_cast<int64_t>(c2 * e);
  m = register_module("m", std::make_shared<TransformerBlock>(hidden, hidden, 4, n, act));
}

at::Tensor C3TR::forward(const at::Tensor& x) { return convs_.merge(m->forward(convs_.cv1->forward(x)), x); }

void C3TR::fuse() {
  convs_.fuse();
  m->fuse();
}

}  // namespace kestrel::models
