// The YOLOv5 building blocks (also used by YOLOv3 and YOLOv7): Conv, Bottleneck, C3, SPP, SPPF, Focus,
// and the parameter-free layers Concat, Upsample, MaxPool2d, ZeroPad2d. Child names equal upstream's
// attribute names (conv, bn, cv1, m ...), so state-dict keys match one to one.
#pragma once
#include <string>
#include <vector>

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>

#include "kestrel/models/batch_norm.h"
#include "kestrel/models/layer.h"

namespace kestrel::models {

// The activations the configs name: nn.SiLU() (default), nn.LeakyReLU(slope), nn.ReLU(), nn.Hardswish(),
// nn.Sigmoid(), nn.Identity().
struct Activation {
  enum class Kind { SiLU, LeakyReLU, ReLU, Hardswish, Sigmoid, Identity };
  Kind kind = Kind::SiLU;
  double slope = 0.01;   // LeakyReLU only
  bool inplace = false;  // as written; changes nothing here, shown in repr()

  at::Tensor operator()(const at::Tensor& x) const;
  std::string repr() const;  // torch's repr of the module, as upstream's layer table prints it
  // Throws kestrel::Error (message without location; the builder adds it) for unknown names.
  static Activation parse(const std::string& text);
};

struct ConvOptions {
  int64_t c1, c2, k = 1, s = 1, p = -1, g = 1, d = 1;  // p = -1: autopad
  Activation act;
};

// Conv2d (no bias) + BatchNorm2d + activation. Keys: conv.weight, bn.{weight,bias,running_*,num_batches_tracked}.
class Conv : public Layer {
 public:
  explicit Conv(const ConvOptions& o);
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;

  // Batch norm + SiLU as one operation in training (batch_norm_silu.h) where it has a kernel for the input.
  void set_fused_batch_norm_silu(bool on) { fused_bn_silu_ = on; }

  // Read-only views for exporters.
  const torch::nn::Conv2d& conv2d() const { return conv; }
  bool has_batch_norm() const { return !bn.is_empty(); }
  const Activation& activation() const { return act_; }

 private:
  torch::nn::Conv2d conv{nullptr};
  BatchNorm2d bn{nullptr};
  Activation act_;
  bool fused_bn_silu_ = false;
};

// Conv::set_fused_batch_norm_silu on every Conv inside `module` (`--fused-bn-silu`); returns how many
// have batch norm and SiLU (the ones it applies to).
int set_fused_batch_norm_silu(torch::nn::Module& module, bool on);

// cv2(cv1(x)) (+ x when shortcut and c1 == c2). Hidden width c2 * e.
class Bottleneck : public Layer {
 public:
  Bottleneck(int64_t c1, int64_t c2, bool shortcut = true, int64_t g = 1, double e = 0.5, Activation act = {});
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;

  const Conv& first() const { return *cv1; }
  const Conv& second() const { return *cv2; }
  bool shortcut() const { return add_; }

 private:
  std::shared_ptr<Conv> cv1, cv2;
  bool add_;
};

// C3's three convolutions, registered on their owner as cv1 and cv2 (1x1, c1 -> c_) and cv3 (1x1, 2 c_ -> c2).
// C3 and its variants (C3Ghost, C3TR) differ only in the m that runs between cv1 and the concatenation.
struct C3Convs {
  C3Convs(torch::nn::Module& owner, int64_t c1, int64_t c2, int64_t c_, const Activation& act);
  at::Tensor merge(const at::Tensor& m_out, const at::Tensor& x) const { return cv3->forward(at::cat({m_out, cv2->forward(x)}, 1)); }
  void fuse() const;
  std::shared_ptr<Conv> cv1, cv2, cv3;
};

// CSP bottleneck with 3 convolutions: cv3(cat(m(cv1(x)), cv2(x))), m = n Bottlenecks of width c2 * e.
class C3 : public Layer {
 public:
  C3(int64_t c1, int64_t c2, int64_t n = 1, bool shortcut = true, int64_t g = 1, double e = 0.5, Activation act = {});
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;

  const Conv& conv1() const { return *convs_.cv1; }
  const Conv& conv2() const { return *convs_.cv2; }
  const Conv& conv3() const { return *convs_.cv3; }
  const std::vector<std::shared_ptr<Bottleneck>>& bottlenecks() const { return m_; }

 private:
  C3Convs convs_;
  std::vector<std::shared_ptr<Bottleneck>> m_;  // registered as the ModuleList "m"
};

// Spatial pyramid pooling: cv2(cat(x', maxpool_k(x') for k in ks)), x' = cv1(x) of width c1 / 2.
class SPP : public Layer {
 public:
  SPP(int64_t c1, int64_t c2, std::vector<int64_t> ks = {5, 9, 13}, Activation act = {});
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;

  const Conv& conv1() const { return *cv1; }
  const Conv& conv2() const { return *cv2; }
  const std::vector<int64_t>& kernels() const { return ks_; }

 private:
  std::shared_ptr<Conv> cv1, cv2;
  std::vector<int64_t> ks_;
};

// SPP-Fast: three chained k x k max pools, equal to SPP(k, 2k-1, 3k-2) at less cost.
class SPPF : public Layer {
 public:
  SPPF(int64_t c1, int64_t c2, int64_t k = 5, Activation act = {});
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;

  const Conv& conv1() const { return *cv1; }
  const Conv& conv2() const { return *cv2; }
  int64_t kernel() const { return k_; }

 private:
  std::shared_ptr<Conv> cv1, cv2;
  int64_t k_;
};

// Space-to-depth: [b, c, h, w] -> [b, 4c, h/2, w/2], the four pixel phases stacked as channels.
at::Tensor space_to_depth(const at::Tensor& x);

// space_to_depth then Conv; older YOLOv5 stems.
class Focus : public Layer {
 public:
  explicit Focus(ConvOptions o);
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;

  const Conv& conv_layer() const { return *conv; }

 private:
  std::shared_ptr<Conv> conv;
};

class Concat : public Layer {
 public:
  explicit Concat(int64_t dim = 1) : dim_(dim) {}
  at::Tensor forward(const at::Tensor& x) override { return x; }
  at::Tensor forward_inputs(const std::vector<at::Tensor>& xs) override;

  int64_t dim() const { return dim_; }

 private:
  int64_t dim_;
};

// nn.Upsample(None, scale, 'nearest').
class Upsample : public Layer {
 public:
  explicit Upsample(double scale) : scale_(scale) {}
  at::Tensor forward(const at::Tensor& x) override;

  double scale() const { return scale_; }

 private:
  double scale_;
};

// nn.MaxPool2d(k, s, p); also YOLOv7's MP (k = s = 2) and SP (k, s = 1, p = k / 2).
class MaxPool : public Layer {
 public:
  MaxPool(int64_t k, int64_t s, int64_t p) : k_(k), s_(s), p_(p) {}
  at::Tensor forward(const at::Tensor& x) override;

  int64_t kernel() const { return k_; }
  int64_t stride() const { return s_; }
  int64_t padding() const { return p_; }

 private:
  int64_t k_, s_, p_;
};

// nn.ZeroPad2d([left, right, top, bottom]).
class ZeroPad : public Layer {
 public:
  explicit ZeroPad(std::vector<int64_t> pad) : pad_(std::move(pad)) {}
  at::Tensor forward(const at::Tensor& x) override;

  const std::vector<int64_t>& padding() const { return pad_; }

 private:
  std::vector<int64_t> pad_;
};

// A row with number > 1 whose module does not take a repeat count: n copies applied in sequence,
// registered as 0..n-1 like nn.Sequential.
class Repeat : public Layer {
 public:
  explicit Repeat(const std::vector<std::shared_ptr<Layer>>& layers);
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;

  const std::vector<std::shared_ptr<Layer>>& layers() const { return layers_; }

 private:
  std::vector<std::shared_ptr<Layer>> layers_;
};

}  // namespace kestrel::models
