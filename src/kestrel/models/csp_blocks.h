// The CSP blocks of YOLOv7's cfg/baseline/ models (YOLOR-CSP, YOLOR-P6 ... D6, Scaled-YOLOv4 CSP, CSP-ResNet50
// and CSP-ResNeXt50): BottleneckCSPA/B/C with Darknet bottlenecks, ResCSPA/B/C with ResNet bottlenecks,
// ResXCSPA/B/C with grouped ResNeXt ones, the bottlenecks Res and ResX themselves, and CSP-ResNet's Stem.
// Child names follow upstream's (cv1 ... cv4, m.i), so state-dict keys match one to one.
#pragma once
#include <memory>
#include <vector>

#include "kestrel/models/common.h"

namespace kestrel::models {

// ResNet bottleneck (upstream's Res; ResX is the same with groups 32): cv3(cv2(cv1(x))) (+ x when shortcut and
// c1 == c2). cv1 1x1 c1 -> c_, cv2 3x3 c_ -> c_ with groups g, cv3 1x1 c_ -> c2; c_ = c2 * e.
class ResBottleneck : public Layer {
 public:
  ResBottleneck(int64_t c1, int64_t c2, bool shortcut = true, int64_t g = 1, double e = 0.5, Activation act = {});
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;

  const Conv& conv(int i) const;  // cv1 ... cv3 (i = 1 ... 3), read-only for exporters
  bool shortcut() const { return add_; }

 private:
  std::shared_ptr<Conv> cv1, cv2, cv3;
  bool add_;
};

// The three ways upstream splits a CSP stage (x: [b, c1, h, w] -> [b, c2, h, w]; m = n units of width c_):
//   A: cv3(cat(m(cv1(x)), cv2(x)))            c_ = c2 * e; cv1, cv2 1x1 from c1
//   B: cv3(cat(m(x1), cv2(x1))), x1 = cv1(x)  c_ = c2;     cv2 1x1 from c_
//   C: cv4(cat(cv3(m(cv1(x))), cv2(x)))       c_ = c2 * e; cv3 1x1 c_ -> c_
enum class CspSplit { A, B, C };

// The unit m repeats: Darknet = Bottleneck(c_, c_, e 1.0) (BottleneckCSP*), Res = ResBottleneck(c_, c_, e 0.5)
// (ResCSP*), ResX = ResBottleneck(c_, c_, e 1.0) (ResXCSP*, whose groups default to 32).
enum class CspUnit { Darknet, Res, ResX };

class CspBlock : public Layer {
 public:
  CspBlock(CspSplit split, CspUnit unit, int64_t c1, int64_t c2, int64_t n, bool shortcut, int64_t g, double e,
           Activation act = {});
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;

  // Read-only views for exporters.
  CspSplit split() const { return split_; }
  const Conv& conv(int i) const;  // cv1 ... cv3 (A, B) or cv4 (C)
  const std::vector<std::shared_ptr<Layer>>& units() const { return m_; }  // Bottleneck or ResBottleneck

 private:
  at::Tensor run_units(at::Tensor y);
  CspSplit split_;
  std::shared_ptr<Conv> cv1, cv2, cv3, cv4;
  std::vector<std::shared_ptr<Layer>> m_;  // registered as "m" (upstream's nn.Sequential)
};

// CSP-ResNet50 / ResNeXt50's stem (x: [b, c1, h, w] -> [b, c2, h/4, w/4]): cv4(cat(cv3(cv2(y)), maxpool_2x2(y))), y = cv1(x);
// cv1 3x3 stride 2 to c_ = c2 / 2, cv2 1x1, cv3 3x3 stride 2, cv4 1x1 from 2 c_.
class Stem : public Layer {
 public:
  Stem(int64_t c1, int64_t c2, Activation act = {});
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;

  const Conv& conv(int i) const;  // cv1 ... cv4, read-only for exporters

 private:
  std::shared_ptr<Conv> cv1, cv2, cv3, cv4;
};

}  // namespace kestrel::models
