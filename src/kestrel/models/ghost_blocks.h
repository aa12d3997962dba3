// YOLOv5's Ghost blocks (models/hub/yolov5s-ghost.yaml; GhostNet, arXiv 1911.11907): half of a layer's
// channels from a convolution, the other half from a cheap depth-wise 5x5 on them. Child names follow
// upstream's (cv1, cv2, conv.i, shortcut.i, m.i), so state-dict keys match one to one.
#pragma once
#include <vector>

#include "kestrel/models/common.h"

namespace kestrel::models {

// cat(y, cv2(y)), y = cv1(x): cv1 a k x k Conv (stride s, groups g) to c2 / 2, cv2 a depth-wise 5x5 Conv.
class GhostConv : public Layer {
 public:
  GhostConv(int64_t c1, int64_t c2, int64_t k = 1, int64_t s = 1, int64_t g = 1, Activation act = {});
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;
  const Conv& conv1() const { return *cv1; }  // read-only views for exporters
  const Conv& conv2() const { return *cv2; }

 private:
  std::shared_ptr<Conv> cv1, cv2;
};

// conv(x) + shortcut(x): conv = GhostConv 1x1 to c2 / 2, [a depth-wise k x k Conv of stride 2, no
// activation, when s = 2], GhostConv 1x1 to c2 without activation; shortcut = x, or (s = 2) a depth-wise
// k x k Conv of stride 2 and a 1x1 Conv, both without activation. `act`: the activation of the first
// GhostConv (the model's default).
class GhostBottleneck : public Layer {
 public:
  GhostBottleneck(int64_t c1, int64_t c2, int64_t k = 3, int64_t s = 1, Activation act = {});
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;
  // Read-only views for exporters: the first and last GhostConv, the strided depth-wise Conv and the
  // shortcut's two Convs (null when s = 1).
  const GhostConv& ghost1() const { return *ghost1_; }
  const GhostConv& ghost2() const { return *ghost2_; }
  const Conv* depthwise() const { return dw_.get(); }
  const Conv* shortcut_depthwise() const { return shortcut_dw_.get(); }
  const Conv* shortcut_conv() const { return shortcut_conv_.get(); }

 private:
  std::shared_ptr<GhostConv> ghost1_, ghost2_;
  std::shared_ptr<Conv> dw_, shortcut_dw_, shortcut_conv_;
};

// C3 with n GhostBottlenecks of width c2 * e: cv3(cat(m(cv1(x)), cv2(x))).
class C3Ghost : public Layer {
 public:
  C3Ghost(int64_t c1, int64_t c2, int64_t n = 1, double e = 0.5, Activation act = {});
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;
  const Conv& conv1() const { return *convs_.cv1; }
  const Conv& conv2() const { return *convs_.cv2; }
  const Conv& conv3() const { return *convs_.cv3; }
  const std::vector<std::shared_ptr<GhostBottleneck>>& bottlenecks() const { return m_; }

 private:
  C3Convs convs_;
  std::vector<std::shared_ptr<GhostBottleneck>> m_;  // registered as "m" (upstream's nn.Sequential)
};

}  // namespace kestrel::models
