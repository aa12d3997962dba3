// A YOLO detector built from a model YAML: the layer list (registered as "model.0" ... "model.N", the
// upstream state-dict names) and its detection head.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "kestrel/models/detect.h"
#include "kestrel/models/layer.h"

namespace kestrel::models {

// One row of the model, as resolved by the builder (what `kestrel models` prints).
struct LayerInfo {
  std::vector<int> from;  // absolute layer indices; -1 = the input image
  int number = 1;         // repeats after depth_multiple
  std::string module;     // as written in the YAML
  std::string arguments;  // resolved arguments, e.g. "[3, 16, 6, 2, 2]"
  int64_t out_channels = 0;
};

class YoloModel : public torch::nn::Module {
 public:
  YoloModel(std::string name, int64_t in_channels, std::vector<std::shared_ptr<Layer>> layers,
            std::vector<LayerInfo> info, std::shared_ptr<Detect> head);

  // images [b, ch, h, w] (h, w multiples of the largest stride) -> raw head outputs per level,
  // [b, na, h/stride, w/stride, nc + 5], as the loss wants them (an IAuxDetect head's auxiliary levels
  // follow in training mode; in eval mode the layers only they need are not run).
  std::vector<at::Tensor> forward(const at::Tensor& images);
  // Decoded predictions [b, N, nc + 5] (xywh pixels, objectness, class probabilities).
  at::Tensor predict(const at::Tensor& images);

  // Activation checkpointing of these layer indices in training mode (layers that read one input;
  // others run normally). Empty: none. Out-of-range indices are an error.
  void set_checkpointed_layers(const std::vector<int>& indices);
  int num_checkpointed_layers() const;

  // Called with each body layer's index and output as forward() runs (detect --visualize); empty: none.
  using LayerObserver = std::function<void(size_t index, const at::Tensor& output)>;
  void set_layer_observer(LayerObserver observer) { observer_ = std::move(observer); }

  // Folds BN into convolutions, re-parameterises RepConv, folds implicit layers: for inference only.
  void fuse();
  bool fused() const { return fused_; }

  Detect& head() { return *head_; }
  const Detect& head() const { return *head_; }
  const std::vector<LayerInfo>& layer_info() const { return info_; }
  const std::vector<std::shared_ptr<Layer>>& layers() const { return layers_; }  // the head is the last entry
  const std::string& name() const { return name_; }
  int64_t in_channels() const { return in_channels_; }
  int64_t max_stride() const;
  // Per body layer (the head excluded): whether the head's lead maps depend on it. False only for an
  // IAuxDetect model's auxiliary branches, which inference (eval mode, export) leaves out.
  const std::vector<bool>& inference_layers() const { return inference_layers_; }

 private:
  std::string name_;
  int64_t in_channels_;
  std::vector<std::shared_ptr<Layer>> layers_;  // the ModuleList "model"; the head is the last entry
  std::vector<LayerInfo> info_;
  std::vector<bool> keep_output_;  // outputs read again by a later layer (upstream's save list)
  std::vector<bool> inference_layers_;
  std::shared_ptr<Detect> head_;
  std::vector<bool> checkpointed_;  // per layer: activation checkpointing in training
  LayerObserver observer_;
  bool fused_ = false;
};

}  // namespace kestrel::models
