// YOLOv7 blocks beyond the YOLOv5 set: SPPCSPC, RepConv, Shortcut, ReOrg, DownC. (MP and SP are MaxPool layers,
// ELAN is not a module: the YAML spells it out as Conv branches and a Concat.)
#pragma once
#include <torch/nn/modules/container/sequential.h>

#include "kestrel/models/common.h"

namespace kestrel::models {

// CSP spatial pyramid pooling: cv7(cat(cv6(cv5(cat(x1, pools(x1)))), cv2(x))), x1 = cv4(cv3(cv1(x))).
class SPPCSPC : public Layer {
 public:
  SPPCSPC(int64_t c1, int64_t c2, int64_t n = 1, bool shortcut = false, int64_t g = 1, double e = 0.5,
          std::vector<int64_t> ks = {5, 9, 13}, Activation act = {});
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;

  // Read-only views for exporters: cv1 ... cv7 (i = 1 ... 7) and the pool kernels.
  const Conv& conv(int i) const;
  const std::vector<int64_t>& kernels() const { return ks_; }

 private:
  std::shared_ptr<Conv> cv1, cv2, cv3, cv4, cv5, cv6, cv7;
  std::vector<int64_t> ks_;
};

// RepVGG block as trained: act(BN(conv3x3(x)) + BN(conv1x1(x)) + BN(x) [identity branch only when
// c1 == c2 and stride 1]). fuse() re-parameterises the three branches into one 3x3 conv with bias
// (upstream's rbr_reparam). Keys: rbr_identity.*, rbr_dense.{0,1}.*, rbr_1x1.{0,1}.*.
class RepConv : public Layer {
 public:
  RepConv(int64_t c1, int64_t c2, int64_t k = 3, int64_t s = 1, int64_t p = -1, int64_t g = 1, Activation act = {});
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;

  // Read-only views for exporters: the single conv with bias after fuse() (empty before), the activation.
  const torch::nn::Conv2d& reparam_conv() const { return rbr_reparam; }
  const Activation& activation() const { return act_; }

 private:
  BatchNorm2d rbr_identity{nullptr};
  torch::nn::Sequential rbr_dense{nullptr}, rbr_1x1{nullptr};
  torch::nn::Conv2d rbr_reparam{nullptr};
  Activation act_;
  int64_t c1_, c2_, k_, g_;
};

// The P6 models' downsampling (yolov7-e6, -d6, -e6e): cat(cv2(cv1(x)), cv3(maxpool_k(x))), cv1 a 1x1
// keeping c1 channels, cv2 a 3x3 with stride k to c2 / 2, cv3 a 1x1 to c2 / 2 after a k x k, stride-k pool.
class DownC : public Layer {
 public:
  DownC(int64_t c1, int64_t c2, int64_t k = 2, Activation act = {});
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;

  // Read-only views for exporters: cv1 ... cv3 (i = 1 ... 3) and the pool's kernel (= stride).
  const Conv& conv(int i) const;
  int64_t kernel() const { return k_; }

 private:
  std::shared_ptr<Conv> cv1, cv2, cv3;
  int64_t k_;
};

// x[0] + x[1].
class Shortcut : public Layer {
 public:
  at::Tensor forward(const at::Tensor& x) override { return x; }
  at::Tensor forward_inputs(const std::vector<at::Tensor>& xs) override { return xs.at(0) + xs.at(1); }
};

// Space-to-depth: [b, c, h, w] -> [b, 4c, h/2, w/2] (YOLOv7 P6 stems).
class ReOrg : public Layer {
 public:
  at::Tensor forward(const at::Tensor& x) override;
};

}  // namespace kestrel::models
