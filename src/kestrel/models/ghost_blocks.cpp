#include "kestrel/models/ghost_blocks.h"

#include <numeric>

#include <ATen/ATen.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>  // torch::nn::Identity

namespace kestrel::models {
namespace {

Activation none() {
  Activation a;
  a.kind = Activation::Kind::Identity;
  return a;
}

// YOLOv5's DWConv: a Conv with groups gcd(c1, c2).
std::shared_ptr<Conv> make_dwconv(int64_t c1, int64_t c2, int64_t k, int64_t s, Activation act) {
  return std::make_shared<Conv>(ConvOptions{c1, c2, k, s, -1, std::gcd(c1, c2), 1, act});
}

}  // namespace

GhostConv::GhostConv(int64_t c1, int64_t c2, int64_t k, int64_t s, int64_t g, Activation act) {
  const int64_t c_ = c2 / 2;
  cv1 = register_module("cv1", std::make_shared<Conv>(ConvOptions{c1, c_, k, s, -1, g, 1, act}));
  cv2 = register_module("cv2", std::make_shared<Conv>(ConvOptions{c_, c_, 5, 1, -1, c_, 1, act}));
}

at::Tensor GhostConv::forward(const at::Tensor& x) {
  const at::Tensor y = cv1->forward(x);
  return at::cat({y, cv2->forward(y)}, 1);
}

void GhostConv::fuse() {
  cv1->fuse();
  cv2->fuse();
}

GhostBottleneck::GhostBottleneck(int64_t c1, int64_t c2, int64_t k, int64_t s, Activation act) {
  const int64_t c_ = c2 / 2;
  // Indices as upstream's nn.Sequential: conv.0, conv.1 (the strided depth-wise, or an Identity), conv.2.
  auto conv = register_module("conv", torch::nn::Sequential());
  ghost1_ = std::make_shared<GhostConv>(c1, c_, 1, 1, 1, act);
  conv->push_back(ghost1_);
  if (s == 2) {
    dw_ = make_dwconv(c_, c_, k, s, none());
    conv->push_back(dw_);
  } else {
    conv->push_back(torch::nn::Identity());
  }
  ghost2_ = std::make_shared<GhostConv>(c_, c2, 1, 1, 1, none());
  conv->push_back(ghost2_);
  if (s == 2) {
    auto shortcut = register_module("shortcut", torch::nn::Sequential());
    shortcut_dw_ = make_dwconv(c1, c1, k, s, none());
    shortcut_conv_ = std::make_shared<Conv>(ConvOptions{c1, c2, 1, 1, -1, 1, 1, none()});
    shortcut->push_back(shortcut_dw_);
    shortcut->push_back(shortcut_conv_);
  }
}

at::Tensor GhostBottleneck::forward(const at::Tensor& x) {
  at::Tensor y = ghost1_->forward(x);
  if (dw_) y = dw_->forward(y);
  y = ghost2_->forward(y);
  return y + (shortcut_dw_ ? shortcut_conv_->forward(shortcut_dw_->forward(x)) : x);
}

void GhostBottleneck::fuse() {
  ghost1_->fuse();
  ghost2_->fuse();
  for (auto* c : {dw_.get(), shortcut_dw_.get(), shortcut_conv_.get()})
    if (c) c->fuse();
}

C3Ghost::C3Ghost(int64_t c1, int64_t c2, int64_t n, double e, Activation act)
    : convs_(*this, c1, c2, static_cast<int64_t>(c2 * e), act) {
  const auto hidden = static_cast<int64_t>(c2 * e);
  auto list = register_module("m", torch::nn::ModuleList());
  for (int64_t i = 0; i < n; ++i) {
    m_.push_back(std::make_shared<GhostBottleneck>(hidden, hidden, 3, 1, act));
    list->push_back(m_.back());
  }
}

at::Tensor C3Ghost::forward(const at::Tensor& x) {
  at::Tensor y = convs_.cv1->forward(x);
  for (auto& b : m_) y = b->forward(y);
  return convs_.merge(y, x);
}

void C3Ghost::fuse() {
  convs_.fuse();
  for (auto& b : m_) b->fuse();
}

}  // namespace kestrel::models
