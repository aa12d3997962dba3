#include "kestrel/train/param_groups.h"

#include <torch/nn/modules/batchnorm.h>

namespace kestrel::train {

ParamGroups split_parameters(const torch::nn::Module& model) {
  ParamGroups groups;
  for (const auto& item : model.named_modules()) {
    const torch::nn::Module& module = *item.value();
    const bool is_norm = dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&module) != nullptr;
    for (const auto& p : module.named_parameters(/*recurse=*/false)) {
      if (p.key() == "bias") groups.biases.push_back(p.value());
      // YOLOv7's train.py keeps ImplicitA/ImplicitM out of weight decay like BN weights.
      else if ((p.key() == "weight" && is_norm) || p.key() == "implicit") groups.norm_weights.push_back(p.value());
      else groups.weights.push_back(p.value());
    }
  }
  return groups;
}

}  // namespace kestrel::train
