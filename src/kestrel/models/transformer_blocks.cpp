#include "kestrel/models/transformer_blocks.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/container/modulelist.h>

#include "kestrel/models/parameter_budget.h"

namespace kestrel::models {
namespace {

torch::nn::Linear make_linear(int64_t c, bool bias) {
  charge_parameters("Linear", {c, c + (bias ? 1 : 0)});
  return torch::nn::Linear(torch::nn::LinearOptions(c, c).bias(bias));
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
  // need_weights false: the attention output is the same, without averaging the weights over heads.
  const at::Tensor y = std::get<0>(ma->forward(q->forward(x), k->forward(x), v->forward(x), {}, /*need_weights=*/false)) + x;
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
