#include "kestrel/models/yolo_model.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/utils.h>

#include "kestrel/core/error.h"
#include "kestrel/models/checkpoint.h"
#include "kestrel/models/model_family.h"

namespace kestrel::models {

YoloModel::YoloModel(std::string name, int64_t in_channels, std::vector<std::shared_ptr<Layer>> layers,
                     std::vector<LayerInfo> info, std::shared_ptr<Detect> head)
    : name_(std::move(name)), in_channels_(in_channels), layers_(std::move(layers)), info_(std::move(info)),
      head_(std::move(head)) {
  auto list = register_module("model", torch::nn::ModuleList());
  for (auto& layer : layers_) list->push_back(layer);
  keep_output_.assign(layers_.size(), false);
  for (size_t i = 0; i < info_.size(); ++i)
    for (int f : info_[i].from)
      if (f >= 0 && f != static_cast<int>(i) - 1) keep_output_[f] = true;
  // Backwards from the head's lead inputs (all its inputs but an IAuxDetect's auxiliary ones).
  const size_t body = layers_.size() - 1;
  inference_layers_.assign(body, false);
  for (int64_t k = 0; k < head_->num_levels(); ++k)
    if (const int f = info_[body].from.at(static_cast<size_t>(k)); f >= 0) inference_layers_[static_cast<size_t>(f)] = true;
  for (size_t i = body; i-- > 0;)
    if (inference_layers_[i])
      for (int f : info_[i].from)
        if (f >= 0) inference_layers_[static_cast<size_t>(f)] = true;

  // Probe the strides with a 256 x 256 image. Upstream probes in training mode, which nudges the
  // BN running statistics of a fresh model; kestrel probes in eval mode and leaves them untouched.
  torch::NoGradGuard no_grad;
  const bool was_training = is_training();
  eval();
  const int64_t probe = 256;
  std::vector<at::Tensor> levels = forward(at::zeros({1, in_channels_, probe, probe}));
  std::vector<double> strides;
  for (const auto& level : levels) strides.push_back(static_cast<double>(probe) / static_cast<double>(level.size(2)));
  head_->initialize(strides, is_yolov7_family(*this));
  train(was_training);
}

std::vector<at::Tensor> YoloModel::forward(const at::Tensor& images) {
  std::vector<at::Tensor> kept(layers_.size());
  at::Tensor previous = images;  // layer 0 reads the image through from = -1
  auto input = [&](int f, size_t i) -> const at::Tensor& {
    return f < 0 || f == static_cast<int>(i) - 1 ? previous : kept[f];
  };
  const size_t body = layers_.size() - 1;
  const bool training = is_training();
  for (size_t i = 0; i < body; ++i) {
    if (!training && !inference_layers_[i]) continue;  // an auxiliary branch: only the training loss reads it
    const auto& from = info_[i].from;
    at::Tensor y;
    if (from.size() == 1) {
      const bool recompute = i < checkpointed_.size() && checkpointed_[i] && training;
      y = recompute ? checkpointed(*layers_[i], input(from[0], i)) : layers_[i]->forward(input(from[0], i));
    } else {
      std::vector<at::Tensor> xs;
      for (int f : from) xs.push_back(input(f, i));
      y = layers_[i]->forward_inputs(xs);
    }
    if (observer_) observer_(i, y);
    if (keep_output_[i]) kept[i] = y;
    previous = std::move(y);
  }
  std::vector<at::Tensor> features;  // skipped auxiliary maps stay undefined (the head does not read them in eval)
  for (int f : info_[body].from)
    features.push_back(training || f < 0 || inference_layers_[static_cast<size_t>(f)] ? input(f, body) : at::Tensor());
  return head_->forward_levels(features);
}

void YoloModel::set_checkpointed_layers(const std::vector<int>& indices) {
  const int body = static_cast<int>(layers_.size()) - 1;  // the head is never checkpointed
  checkpointed_.assign(static_cast<size_t>(body), false);
  for (int i : indices) {
    if (i < 0 || i >= body) fail("--checkpoint: layer ", i, " is outside the model's layers 0..", body - 1, " (", name_, ")");
    checkpointed_[static_cast<size_t>(i)] = info_[static_cast<size_t>(i)].from.size() == 1;
  }
}

int YoloModel::num_checkpointed_layers() const {
  return static_cast<int>(std::count(checkpointed_.begin(), checkpointed_.end(), true));
}

at::Tensor YoloModel::predict(const at::Tensor& images) { return head_->decode(forward(images)); }

void YoloModel::fuse() {
  if (fused_) return;
  for (auto& layer : layers_) layer->fuse();
  fused_ = true;
}

int64_t YoloModel::max_stride() const {
  const auto& s = head_->strides();
  return static_cast<int64_t>(*std::max_element(s.begin(), s.end()));
}

}  // namespace kestrel::models
