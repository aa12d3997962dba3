#include "kestrel/models/checkpoint.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/grad_mode.h>

namespace kestrel::models {
namespace {

thread_local bool t_recomputing = false;

struct AutocastState {
  bool cpu = false, cuda = false;
  at::ScalarType cpu_dtype = at::kBFloat16, cuda_dtype = at::kHalf;

  static AutocastState current() {
    AutocastState s;
    s.cpu = at::autocast::is_autocast_enabled(at::kCPU);
    s.cuda = at::autocast::is_autocast_enabled(at::kCUDA);
    s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    s.cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    return s;
  }
  void apply() const {
    at::autocast::set_autocast_enabled(at::kCPU, cpu);
    at::autocast::set_autocast_enabled(at::kCUDA, cuda);
    at::autocast::set_autocast_dtype(at::kCPU, cpu_dtype);
    at::autocast::set_autocast_dtype(at::kCUDA, cuda_dtype);
  }
};

// Recomputes the layer and returns the gradients for [x, parameters...] (the node's next edges).
struct CheckpointBackward : torch::autograd::Node {
  Layer* layer = nullptr;  // the model owns its layers and outlives the graph of its step
  at::Tensor input;        // detached x
  bool input_requires_grad = false;
  std::vector<at::Tensor> params;  // the layer's trainable parameters
  AutocastState autocast;

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    torch::autograd::variable_list out(1 + params.size());
    if (!grads[0].defined()) return out;
    const AutocastState saved = AutocastState::current();
    const bool was_recomputing = t_recomputing;
    // No casts cached: this runs in backward, outside any autocast region, so nothing would clear them
    // before the next step's forward, which would find the weights from before the optimiser's update.
    const bool cache_was_enabled = at::autocast::is_autocast_cache_enabled();
    const auto restore = [&] {
      t_recomputing = was_recomputing;
      at::autocast::set_autocast_cache_enabled(cache_was_enabled);
      saved.apply();
    };
    at::Tensor x = input.detach().requires_grad_(input_requires_grad);
    at::Tensor y;
    {
      torch::autograd::AutoGradMode grad_on(true);
      autocast.apply();
      at::autocast::set_autocast_cache_enabled(false);
      t_recomputing = true;
      try {
        y = layer->forward(x);
      } catch (...) {
        restore();
        throw;
      }
      restore();
    }
    std::vector<at::Tensor> wrt;
    if (input_requires_grad) wrt.push_back(x);
    wrt.insert(wrt.end(), params.begin(), params.end());
    const auto g = torch::autograd::grad({y}, wrt, {grads[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                                         /*allow_unused=*/true);
    size_t k = 0;
    if (input_requires_grad) out[0] = g[k++];
    for (size_t i = 0; i < params.size(); ++i) out[1 + i] = g[k++];
    return out;
  }
  std::string name() const override { return "kestrel::models::CheckpointBackward"; }
  void release_variables() override { input.reset(); }
};

}  // namespace

bool recomputing() { return t_recomputing; }

at::Tensor checkpointed(Layer& layer, const at::Tensor& x) {
  std::vector<at::Tensor> params;
  for (const auto& p : layer.parameters())
    if (p.requires_grad()) params.push_back(p);
  const bool needs_graph = torch::autograd::GradMode::is_enabled() && (x.requires_grad() || !params.empty());
  if (!needs_graph) return layer.forward(x);
  at::Tensor y;
  {
    torch::autograd::AutoGradMode grad_off(false);  // nothing inside the layer is recorded
    y = layer.forward(x);
  }
  std::shared_ptr<CheckpointBackward> node(new CheckpointBackward(), torch::autograd::deleteNode);
  node->layer = &layer;
  node->input = x.detach();
  node->input_requires_grad = x.requires_grad();
  node->params = params;
  node->autocast = AutocastState::current();
  torch::autograd::edge_list edges = torch::autograd::collect_next_edges(x);
  for (const auto& p : params) edges.push_back(torch::autograd::impl::gradient_edge(p));
  node->set_next_edges(std::move(edges));
  torch::autograd::set_history(y, node);
  return y;
}

}  // namespace kestrel::models
