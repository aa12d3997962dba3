#include "kestrel/models/model_summary.h"

#include <algorithm>
#include <cstdio>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "kestrel/core/error.h"
#include "kestrel/models/conv_ops.h"
#include "kestrel/models/state_dict.h"

namespace kestrel::models {
namespace {

int64_t count_parameters(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

std::string from_text(const std::vector<int>& from, int index) {
  auto one = [&](int f) { return f == index - 1 ? -1 : f; };  // upstream prints the previous layer as -1
  if (from.size() == 1) return std::to_string(one(from[0]));
  std::string s = "[";
  for (size_t i = 0; i < from.size(); ++i) s += (i ? ", " : "") + std::to_string(one(from[i]));
  return s + "]";
}

}  // namespace

double conv_gflops(YoloModel& model, int64_t img) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  // A probe of twice the largest stride scaled by area, as upstream's model_info (exact for sizes that are
  // multiples of the stride; any other size would not run through a P6 model's stride-64 layers). At least
  // 64 (upstream: at least 32): a head reading only stride-8 maps of a network that goes down to 32 still runs.
  const int64_t stride = model.max_stride();
  const int64_t probe = std::max<int64_t>(2 * stride, 64);
  FlopCounter counter;
  auto param = model.parameters().front();
  try {
    model.forward(at::zeros({1, model.in_channels(), probe, probe}, param.options()));
  } catch (const c10::Error& e) {
    model.train(was_training);
    fail(model.name(), ": the network cannot run a ", probe, " x ", probe, " image to count ",
         "its FLOPs: ", e.what_without_backtrace());
  }
  model.train(was_training);
  const double scale = static_cast<double>(img) / static_cast<double>(probe);
  return counter.flops() * scale * scale / 1e9;
}

ModelStats model_stats(YoloModel& model, int64_t img) {
  ModelStats s;
  s.layers = static_cast<int64_t>(model.layer_info().size());
  for (const auto& p : model.parameters()) {
    s.parameters += p.numel();
    if (p.requires_grad()) s.trainable += p.numel();
  }
  for (const auto& b : model.buffers()) s.buffer_elements += b.numel();
  s.state_keys = static_cast<int64_t>(state_dict(model).size());
  s.gflops = conv_gflops(model, img);
  s.strides = model.head().strides();
  return s;
}

std::string format_model_table(YoloModel& model, const ModelStats& stats, int64_t img) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%4s %18s %3s %10s  %-24s %s\n", "", "from", "n", "params", "module", "arguments");
  out += line;
  const auto children = model.named_children();
  auto layers = children[0].value()->children();  // the ModuleList "model"
  const auto& info = model.layer_info();
  for (size_t i = 0; i < info.size(); ++i) {
    std::snprintf(line, sizeof line, "%4zu %18s %3d %10lld  %-24s %s\n", i, from_text(info[i].from, static_cast<int>(i)).c_str(),
                  info[i].number, static_cast<long long>(count_parameters(*layers[i])), info[i].module.c_str(),
                  info[i].arguments.c_str());
    out += line;
  }
  // model_info's name: the config's stem with YOLOv5's capitals (yolov5s -> YOLOv5s; yolov7 stays)
  std::string name = model.name();
  if (const size_t at = name.find("yolov5"); at != std::string::npos) name.replace(at, 6, "YOLOv5");
  std::string strides;
  for (double s : stats.strides) strides += (strides.empty() ? "" : ",") + std::to_string(static_cast<int>(s));
  std::snprintf(line, sizeof line,
                "%s summary: %lld layers, %lld parameters, %lld gradients, %.2f GFLOPs at %lldx%lld (convolutions), "
                "strides %s, %lld buffer elements, %lld state keys%s\n",
                name.c_str(), static_cast<long long>(stats.layers), static_cast<long long>(stats.parameters),
                static_cast<long long>(stats.trainable), stats.gflops, static_cast<long long>(img),
                static_cast<long long>(img), strides.c_str(), static_cast<long long>(stats.buffer_elements),
                static_cast<long long>(stats.state_keys), model.fused() ? " (fused)" : "");
  out += line;
  return out;
}

}  // namespace kestrel::models
