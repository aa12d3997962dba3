// YOLOv5's transformer blocks (models/hub/yolov5s-transformer.yaml): C3TR, a C3 whose bottlenecks are
// replaced by a TransformerBlock over the feature map's positions. Child names follow upstream's (q, k, v,
// ma, fc1, fc2; conv, linear, tr.i; cv1, cv2, cv3, m), so state-dict keys match one to one.
#pragma once
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include "kestrel/models/common.h"

namespace kestrel::models {

// x [L, b, c] (positions first): x += MultiheadAttention(q(x), k(x), v(x)); x += fc2(fc1(x)); the four
// projections without bias, the attention with its own in- and output projections.
class TransformerLayer : public torch::nn::Module {
 public:
  TransformerLayer(int64_t c, int64_t num_heads);
  at::Tensor forward(const at::Tensor& x);

  // Read-only views for exporters.
  const torch::nn::Linear& query() const { return q; }
  const torch::nn::Linear& key() const { return k; }
  const torch::nn::Linear& value() const { return v; }
  const torch::nn::Linear& feed_forward1() const { return fc1; }
  const torch::nn::Linear& feed_forward2() const { return fc2; }
  const torch::nn::MultiheadAttention& attention() const { return ma; }

 private:
  torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, fc1{nullptr}, fc2{nullptr};
  torch::nn::MultiheadAttention ma{nullptr};
};

// [b, c1, h, w] -> Conv to c2 when c1 != c2 -> positions p [h w, b, c2] -> layers(p + linear(p)) -> [b, c2, h, w].
class TransformerBlock : public Layer {
 public:
  TransformerBlock(int64_t c1, int64_t c2, int64_t num_heads, int64_t num_layers, Activation act = {});
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;

  // Read-only views for exporters: the widening Conv (null when c1 == c2), the position embedding, the layers.
  const Conv* conv_layer() const { return conv.get(); }
  const torch::nn::Linear& position_embedding() const { return linear; }
  const std::vector<std::shared_ptr<TransformerLayer>>& layers() const { return layers_; }

 private:
  std::shared_ptr<Conv> conv;
  torch::nn::Linear linear{nullptr};
  std::vector<std::shared_ptr<TransformerLayer>> layers_;  // registered as "tr" (upstream's nn.Sequential)
  int64_t c2_;
};

// C3 with a TransformerBlock (4 heads, n layers) of width c2 * e: cv3(cat(m(cv1(x)), cv2(x))).
class C3TR : public Layer {
 public:
  C3TR(int64_t c1, int64_t c2, int64_t n = 1, double e = 0.5, Activation act = {});
  at::Tensor forward(const at::Tensor& x) override;
  void fuse() override;

  const Conv& conv1() const { return *convs_.cv1; }  // read-only views for exporters
  const Conv& conv2() const { return *convs_.cv2; }
  const Conv& conv3() const { return *convs_.cv3; }
  const TransformerBlock& block() const { return *m; }

 private:
  C3Convs convs_;
  std::shared_ptr<TransformerBlock> m;
};

}  // namespace kestrel::models
