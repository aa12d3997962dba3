#include "kestrel/models/yolov7_blocks.h"

#include <array>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "kestrel/models/conv_ops.h"

namespace kestrel::models {

SPPCSPC::SPPCSPC(int64_t c1, int64_t c2, int64_t n, bool shortcut, int64_t g, double e, std::vector<int64_t> ks,
                 Activation act)
    : ks_(std::move(ks)) {
  const auto c_ = static_cast<int64_t>(2 * c2 * e);
  auto conv = [&](const char* name, int64_t in, int64_t out, int64_t k) {
    return register_module(name, std::make_shared<Conv>(ConvOptions{in, out, k, 1, -1, 1, 1, act}));
  };
  cv1 = conv("cv1", c1, c_, 1);
  cv2 = conv("cv2", c1, c_, 1);
  cv3 = conv("cv3", c_, c_, 3);
  cv4 = conv("cv4", c_, c_, 1);
  cv5 = conv("cv5", static_cast<int64_t>(ks_.size() + 1) * c_, c_, 1);
  cv6 = conv("cv6", c_, c_, 3);
  cv7 = conv("cv7", 2 * c_, c2, 1);
}

at::Tensor SPPCSPC::forward(const at::Tensor& x) {
  at::Tensor x1 = cv4->forward(cv3->forward(cv1->forward(x)));
  std::vector<at::Tensor> parts{x1};
  for (int64_t k : ks_) parts.push_back(at::max_pool2d(x1, {k, k}, {1, 1}, {k / 2, k / 2}));
  at::Tensor y1 = cv6->forward(cv5->forward(at::cat(parts, 1)));
  return cv7->forward(at::cat({y1, cv2->forward(x)}, 1));
}

const Conv& SPPCSPC::conv(int i) const {
  const std::array<const std::shared_ptr<Conv>*, 7> convs{&cv1, &cv2, &cv3, &cv4, &cv5, &cv6, &cv7};
  TORCH_CHECK(i >= 1 && i <= 7, "SPPCSPC::conv(", i, "): cv1 ... cv7");
  return **convs[static_cast<size_t>(i - 1)];
}

void SPPCSPC::fuse() {
  for (auto* c : {cv1.get(), cv2.get(), cv3.get(), cv4.get(), cv5.get(), cv6.get(), cv7.get()}) c->fuse();
}

DownC::DownC(int64_t c1, int64_t c2, int64_t k, Activation act) : k_(k) {
  cv1 = register_module("cv1", std::make_shared<Conv>(ConvOptions{c1, c1, 1, 1, -1, 1, 1, act}));
  cv2 = register_module("cv2", std::make_shared<Conv>(ConvOptions{c1, c2 / 2, 3, k, -1, 1, 1, act}));
  cv3 = register_module("cv3", std::make_shared<Conv>(ConvOptions{c1, c2 / 2, 1, 1, -1, 1, 1, act}));
}

at::Tensor DownC::forward(const at::Tensor& x) {
  return at::cat({cv2->forward(cv1->forward(x)), cv3->forward(at::max_pool2d(x, {k_, k_}, {k_, k_}))}, 1);
}

const Conv& DownC::conv(int i) const {
  const std::array<const std::shared_ptr<Conv>*, 3> convs{&cv1, &cv2, &cv3};
  TORCH_CHECK(i >= 1 && i <= 3, "DownC::conv(", i, "): cv1 ... cv3");
  return **convs[static_cast<size_t>(i - 1)];
}

void DownC::fuse() {
  for (auto* c : {cv1.get(), cv2.get(), cv3.get()}) c->fuse();
}

RepConv::RepConv(int64_t c1, int64_t c2, int64_t k, int64_t s, int64_t p, int64_t g, Activation act)
    : act_(act), c1_(c1), c2_(c2), k_(k), g_(g) {
  using torch::nn::Conv2dOptions;
  const int64_t pad = autopad(k, p);
  if (c1 == c2 && s == 1) rbr_identity = register_module("rbr_identity", make_batch_norm(c1));
  rbr_dense = register_module(
      "rbr_dense", torch::nn::Sequential(make_conv2d(Conv2dOptions(c1, c2, k).stride(s).padding(pad).groups(g).bias(false)),
                                         make_batch_norm(c2)));
  rbr_1x1 = register_module(
      "rbr_1x1", torch::nn::Sequential(make_conv2d(Conv2dOptions(c1, c2, 1).stride(s).padding(pad - k / 2).groups(g).bias(false)),
                                       make_batch_norm(c2)));
}

at::Tensor RepConv::forward(const at::Tensor& x) {
  if (rbr_reparam) return act_(run_conv(*rbr_reparam, x));
  auto branch = [&](torch::nn::Sequential& seq) {
    return seq[1]->as<BatchNorm2dImpl>()->forward(run_conv(*seq[0]->as<torch::nn::Conv2dImpl>(), x));
  };
  at::Tensor y = branch(rbr_dense) + branch(rbr_1x1);
  if (rbr_identity) y = y + rbr_identity->forward(x);
  return act_(y);
}

void RepConv::fuse() {
  if (rbr_reparam) return;
  torch::NoGradGuard no_grad;
  auto fold = [](torch::nn::Sequential& seq) {
    auto fused = fold_batch_norm(*seq[0]->as<torch::nn::Conv2dImpl>(), *seq[1]->as<torch::nn::BatchNorm2dImpl>());
    return std::make_pair(fused->weight.detach(), fused->bias.detach());
  };
  auto [w3, b3] = fold(rbr_dense);
  auto [w1, b1] = fold(rbr_1x1);
  // The 1x1 kernel sits in the centre of the k x k kernel.
  at::Tensor weight = w3 + at::constant_pad_nd(w1, {k_ / 2, k_ / 2, k_ / 2, k_ / 2}, 0);
  at::Tensor bias = b3 + b1;
  if (rbr_identity) {
    // identity as a k x k conv: weight 1 at the centre of channel i -> i (within its group), then its BN.
    const int64_t per_group = c1_ / g_;
    at::Tensor id = at::zeros_like(w3);
    for (int64_t i = 0; i < c1_; ++i) id[i][i % per_group][k_ / 2][k_ / 2] = 1.0;
    auto& bn = *rbr_identity;
    at::Tensor scale = bn.weight / at::sqrt(bn.running_var + bn.options.eps());
    weight = weight + id * scale.reshape({-1, 1, 1, 1});
    bias = bias + bn.bias - bn.running_mean * scale;
    unregister_module("rbr_identity");
    rbr_identity = nullptr;
  }
  auto conv = rbr_dense[0]->as<torch::nn::Conv2dImpl>();
  rbr_reparam = register_module("rbr_reparam", torch::nn::Conv2d(torch::nn::Conv2dOptions(c1_, c2_, k_)
                                                                     .stride(conv->options.stride())
                                                                     .padding(conv->options.padding())
                                                                     .groups(g_)
                                                                     .bias(true)));
  rbr_reparam->to(weight.device(), weight.scalar_type());
  rbr_reparam->weight.copy_(weight);
  rbr_reparam->bias.copy_(bias);
  unregister_module("rbr_dense");
  unregister_module("rbr_1x1");
  rbr_dense = nullptr;
  rbr_1x1 = nullptr;
}

at::Tensor ReOrg::forward(const at::Tensor& x) { return space_to_depth(x); }

}  // namespace kestrel::models
