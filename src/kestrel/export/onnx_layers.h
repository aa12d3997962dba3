// The body of a fused YOLO model as ONNX nodes: one kestrel Layer (Conv, C3, SPPF, SPPCSPC, RepConv,
// Concat ...) becomes the nodes that compute the same tensor. Shapes are never read: every node works
// for any batch and any height/width the network accepts, so static and dynamic graphs share it.
#pragma once
#include <string>
#include <vector>

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "kestrel/export/onnx_graph.h"
#include "kestrel/models/common.h"

namespace kestrel::exporting {

class OnnxLayers {
 public:
  explicit OnnxLayers(OnnxGraph& g) : g_(g) {}

  // One body layer of the (fused) model; xs are its inputs in `from` order, prefix its state-dict
  // name ("model.12"), module its YAML module name (for errors). Throws kestrel::Error naming the
  // module and layer for modules the exporter does not cover, and for unfused batch norm.
  std::string layer(models::Layer& l, const std::vector<std::string>& xs, const std::string& prefix,
                    const std::string& module);

  // A Conv2d (weight, optional bias) with its stride/padding/dilation/groups; also the head's outputs.
  std::string conv2d(const torch::nn::Conv2dImpl& conv, const std::string& x, const std::string& prefix);

 private:
  std::string conv(const models::Conv& c, const std::string& x, const std::string& prefix);
  std::string activation(const models::Activation& act, const std::string& x);
  std::string maxpool(const std::string& x, int64_t k, int64_t s, int64_t p);
  std::string concat(const std::vector<std::string>& xs);
  std::string space_to_depth(const std::string& x);
  std::string bottleneck(const models::Bottleneck& b, const std::string& x, const std::string& prefix);
  std::string yolov7_layer(models::Layer& l, const std::vector<std::string>& xs, const std::string& prefix);
  std::string ghost_layer(models::Layer& l, const std::string& x, const std::string& prefix);  // "" if not Ghost
  std::string csp_unit(models::Layer& unit, const std::string& x, const std::string& prefix);  // CSP blocks' m.i
  std::string transformer_layer(models::Layer& l, const std::string& x, const std::string& prefix);  // "" if not C3TR
  std::string linear(const torch::nn::Linear& l, const std::string& x, const std::string& name);

  OnnxGraph& g_;
};

}  // namespace kestrel::exporting
