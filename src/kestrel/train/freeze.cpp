#include "kestrel/train/freeze.h"

#include <torch/nn/modules/batchnorm.h>

#include "kestrel/core/error.h"

namespace kestrel::train {

std::vector<int> selected_layers(const std::vector<int>& spec) {
  std::vector<int> layers;
  if (spec.size() == 1) {
    for (int i = 0; i < spec[0]; ++i) layers.push_back(i);
  } else {
    layers = spec;
  }
  return layers;
}

int freeze_layers(models::YoloModel& model, const std::vector<int>& spec) {
  const std::vector<int> layers = selected_layers(spec);
  int frozen = 0;
  for (auto& p : model.named_parameters()) {
    bool hit = false;
    for (int l : layers) hit = hit || p.key().rfind(cat("model.", l, "."), 0) == 0;
    p.value().set_requires_grad(!hit);
    frozen += hit;
  }
  return frozen;
}

void set_batchnorm_eval(torch::nn::Module& model) {
  for (const auto& m : model.modules())
    if (dynamic_cast<torch::nn::BatchNorm2dImpl*>(m.get())) m->eval();
}

}  // namespace kestrel::train
