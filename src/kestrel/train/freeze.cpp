#include "kestrel/train/freeze.h"

#include <torch/nn/modules/batchnorm.h>

#include "kestrel/core/error.h"

namespace kestrel::train {

std::vector<int> selected_layers(const std::vector<int>& spec) {
  std::vector<int> layers;
  if (spec.size() == 1) {
    if (spec[0] < 0) fail("a layer count must be 0 or more, got ", spec[0]);
    for (int i = 0; i < spec[0]; ++i) layers.push_back(i);
  } else {
    layers = spec;
    for (int l : layers)
      if (l < 0) fail("layer indices count from 0, got ", l);
  }
  return layers;
}

std::vector<std::string> freeze_layers(models::YoloModel& model, const std::vector<int>& spec) {
  // Upstream ignores indices beyond the model and, when everything is frozen, fails in backward with
  // PyTorch's "does not require grad": both are refused here, naming the flag.
  const int n_layers = static_cast<int>(model.layers().size());
  std::vector<int> layers;
  try {
    layers = selected_layers(spec);
  } catch (const Error& e) {
    fail("--freeze: ", e.what());
  }
  if (spec.size() == 1 && spec[0] > n_layers)
    fail("--freeze ", spec[0], ": the model has ", n_layers, " layers (0..", n_layers - 1, ")");
  for (int l : layers)
    if (l >= n_layers) fail("--freeze: layer ", l, " is outside the model's layers 0..", n_layers - 1);
  std::vector<std::string> frozen;
  int trainable = 0;
  for (auto& p : model.named_parameters()) {
    bool hit = false;
    for (int l : layers) hit = hit || p.key().rfind(cat("model.", l, "."), 0) == 0;
    p.value().set_requires_grad(!hit);
    if (hit) frozen.push_back(p.key());
    trainable += !hit;
  }
  if (trainable == 0) fail("--freeze: every layer with parameters is frozen; nothing is left to train");
  return frozen;
}

void set_batchnorm_eval(torch::nn::Module& model) {
  for (const auto& m : model.modules())
    if (dynamic_cast<torch::nn::BatchNorm2dImpl*>(m.get())) m->eval();
}

}  // namespace kestrel::train
