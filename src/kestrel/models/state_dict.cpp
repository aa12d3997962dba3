#include "kestrel/models/state_dict.h"

#include <map>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "kestrel/core/error.h"
#include "kestrel/models/detect.h"

namespace kestrel::models {
namespace {

std::string shape_text(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

}  // namespace

NamedTensors state_dict(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& item : module.named_modules()) {
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) out.emplace_back(prefix + p.key(), p.value());
    for (const auto& b : item.value()->named_buffers(/*recurse=*/false)) out.emplace_back(prefix + b.key(), b.value());
  }
  return out;
}

std::string LoadReport::describe(size_t max_items) const {
  std::string s;
  auto list = [&](const char* title, const std::vector<std::string>& keys) {
    if (keys.empty()) return;
    s += cat("\n  ", title, " (", keys.size(), "):");
    for (size_t i = 0; i < keys.size() && i < max_items; ++i) s += "\n    " + keys[i];
    if (keys.size() > max_items) s += cat("\n    ... and ", keys.size() - max_items, " more");
  };
  list("missing from the file", missing);
  list("not in the model", unexpected);
  list("shape differs", mismatched);
  return s;
}

LoadReport load_state_dict(torch::nn::Module& module, const NamedTensors& tensors, bool strict, const std::string& source) {
  std::map<std::string, at::Tensor> given(tensors.begin(), tensors.end());
  // A YOLOv7 plain Detect's anchor_grid (pixels) where the file has only its anchors (grid units): files
  // written before kestrel registered it, and checkpoints imported without it (tools/import_pt.py).
  for (const auto& item : module.named_modules()) {
    const auto* head = dynamic_cast<const Detect*>(item.value().get());
    if (head == nullptr || head->implicit() || head->strides().empty()) continue;
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    const auto anchors = given.find(prefix + "anchors");
    if (given.count(prefix + "anchor_grid") || anchors == given.end() || !head->named_buffers(false).contains("anchor_grid")) continue;
    const int64_t nl = anchors->second.size(0);
    if (anchors->second.dim() != 3 || nl != static_cast<int64_t>(head->strides().size())) continue;  // reported below
    const at::Tensor strides = at::tensor(head->strides(), at::kFloat).view({nl, 1, 1});
    given[prefix + "anchor_grid"] = (anchors->second.to(at::kFloat) * strides).view({nl, 1, anchors->second.size(1), 1, 1, 2});
  }
  LoadReport report;
  NamedTensors targets = state_dict(module);
  std::map<std::string, bool> known;
  for (const auto& [key, target] : targets) {
    known[key] = true;
    auto it = given.find(key);
    if (it == given.end()) {
      report.missing.push_back(key);
    } else if (!it->second.sizes().equals(target.sizes())) {
      report.mismatched.push_back(cat(key, ": file ", shape_text(it->second), " vs model ", shape_text(target)));
    } else if (target.is_floating_point() && !it->second.is_floating_point()) {
      // integers (or booleans) where weights belong: a damaged file, not values to convert
      report.mismatched.push_back(cat(key, ": file ", it->second.dtype().name(), " vs model ", target.dtype().name()));
    }
  }
  for (const auto& [key, value] : tensors)
    if (!known.count(key)) report.unexpected.push_back(key);
  if (strict && !report.complete())
    fail(source, ": weights do not match the model", report.describe());

  torch::NoGradGuard no_grad;
  for (auto& [key, target] : targets) {
    auto it = given.find(key);
    if (it == given.end() || !it->second.sizes().equals(target.sizes())) continue;
    if (target.is_floating_point() && !it->second.is_floating_point()) continue;
    target.copy_(it->second.to(target.dtype()));
    ++report.loaded;
  }
  return report;
}

}  // namespace kestrel::models
