#include "kestrel/models/csp_blocks.h"

#include <array>

#include <ATen/ATen.h>

namespace kestrel::models {

namespace {

std::shared_ptr<Conv> add_conv(torch::nn::Module& owner, const char* name, int64_t c1, int64_t c2, int64_t k,
                               int64_t s, int64_t g, const Activation& act) {
  return owner.register_module(name, std::make_shared<Conv>(ConvOptions{c1, c2, k, s, -1, g, 1, act}));
}

template <size_t N>
const Conv& nth_conv(const std::array<const std::shared_ptr<Conv>*, N>& convs, int i, const char* owner) {
  TORCH_CHECK(i >= 1 && i <= static_cast<int>(N) && *convs[static_cast<size_t>(i - 1)], owner, "::conv(", i,
              "): no such convolution");
  return **convs[static_cast<size_t>(i - 1)];
}

}  // namespace

// ---- ResBottleneck ---------------------------------------------------------------------------

ResBottleneck::ResBottleneck(int64_t c1, int64_t c2, bool shortcut, int64_t g, double e, Activation act)
    : add_(shortcut && c1 == c2) {
  const auto c_ = static_cast<int64_t>(c2 * e);
  cv1 = add_conv(*this, "cv1", c1, c_, 1, 1, 1, act);
  cv2 = add_conv(*this, "cv2", c_, c_, 3, 1, g, act);
  cv3 = add_conv(*this, "cv3", c_, c2, 1, 1, 1, act);
}

at::Tensor ResBottleneck::forward(const at::Tensor& x) {
  at::Tensor y = cv3->forward(cv2->forward(cv1->forward(x)));
  return add_ ? x + y : y;
}

void ResBottleneck::fuse() {
  for (auto* c : {cv1.get(), cv2.get(), cv3.get()}) c->fuse();
}

const Conv& ResBottleneck::conv(int i) const {
  return nth_conv(std::array<const std::shared_ptr<Conv>*, 3>{&cv1, &cv2, &cv3}, i, "ResBottleneck");
}

// ---- CspBlock ----------------------------------------------------------------------------------

CspBlock::CspBlock(CspSplit split, CspUnit unit, int64_t c1, int64_t c2, int64_t n, bool shortcut, int64_t g,
                   double e, Activation act)
    : split_(split) {
  const auto c_ = split == CspSplit::B ? c2 : static_cast<int64_t>(c2 * e);
  // Registration order = upstream's: the convolutions first, then m.
  cv1 = add_conv(*this, "cv1", c1, c_, 1, 1, 1, act);
  cv2 = add_conv(*this, "cv2", split == CspSplit::B ? c_ : c1, c_, 1, 1, 1, act);
  if (split == CspSplit::C) {
    cv3 = add_conv(*this, "cv3", c_, c_, 1, 1, 1, act);
    cv4 = add_conv(*this, "cv4", 2 * c_, c2, 1, 1, 1, act);
  } else {
    cv3 = add_conv(*this, "cv3", 2 * c_, c2, 1, 1, 1, act);
  }
  auto list = register_module("m", torch::nn::ModuleList());
  for (int64_t i = 0; i < n; ++i) {
    switch (unit) {
      case CspUnit::Darknet: m_.push_back(std::make_shared<Bottleneck>(c_, c_, shortcut, g, 1.0, act)); break;
      case CspUnit::Res: m_.push_back(std::make_shared<ResBottleneck>(c_, c_, shortcut, g, 0.5, act)); break;
      case CspUnit::ResX: m_.push_back(std::make_shared<ResBottleneck>(c_, c_, shortcut, g, 1.0, act)); break;
    }
    list->push_back(m_.back());
  }
}

at::Tensor CspBlock::run_units(at::Tensor y) {
  for (auto& unit : m_) y = unit->forward(y);
  return y;
}

at::Tensor CspBlock::forward(const at::Tensor& x) {
  switch (split_) {
    case CspSplit::A: return cv3->forward(at::cat({run_units(cv1->forward(x)), cv2->forward(x)}, 1));
    case CspSplit::B: {
      const at::Tensor x1 = cv1->forward(x);
      return cv3->forward(at::cat({run_units(x1), cv2->forward(x1)}, 1));
    }
    case CspSplit::C: return cv4->forward(at::cat({cv3->forward(run_units(cv1->forward(x))), cv2->forward(x)}, 1));
  }
  return x;
}

void CspBlock::fuse() {
  for (auto* c : {cv1.get(), cv2.get(), cv3.get(), cv4.get()})
    if (c) c->fuse();
  for (auto& unit : m_) unit->fuse();
}

const Conv& CspBlock::conv(int i) const {
  return nth_conv(std::array<const std::shared_ptr<Conv>*, 4>{&cv1, &cv2, &cv3, &cv4}, i, "CspBlock");
}

// ---- Stem --------------------------------------------------------------------------------------

Stem::Stem(int64_t c1, int64_t c2, Activation act) {
  const int64_t c_ = c2 / 2;
  cv1 = add_conv(*this, "cv1", c1, c_, 3, 2, 1, act);
  cv2 = add_conv(*this, "cv2", c_, c_, 1, 1, 1, act);
  cv3 = add_conv(*this, "cv3", c_, c_, 3, 2, 1, act);
  cv4 = add_conv(*this, "cv4", 2 * c_, c2, 1, 1, 1, act);
}

at::Tensor Stem::forward(const at::Tensor& x) {
  const at::Tensor y = cv1->forward(x);
  return cv4->forward(at::cat({cv3->forward(cv2->forward(y)), at::max_pool2d(y, {2, 2}, {2, 2})}, 1));
}

void Stem::fuse() {
  for (auto* c : {cv1.get(), cv2.get(), cv3.get(), cv4.get()}) c->fuse();
}

const Conv& Stem::conv(int i) const {
  return nth_conv(std::array<const std::shared_ptr<Conv>*, 4>{&cv1, &cv2, &cv3, &cv4}, i, "Stem");
}

}  // namespace kestrel::models
