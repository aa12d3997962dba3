#include "kestrel/dist/sync_batch_norm.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/nn/module.h>

#include "kestrel/core/error.h"
#include "kestrel/models/checkpoint.h"

namespace kestrel::dist {
namespace {

at::Tensor summed_over_ranks(const at::Tensor& x, const DistContext& ctx) {
  std::vector<at::Tensor> buf{x.detach().contiguous().clone()};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::SUM;
  try {
    ctx.group->allreduce(buf, opts)->wait();
  } catch (const std::exception& e) {
    fail("distributed: rank ", ctx.rank, " of ", ctx.world_size, ": SyncBatchNorm all-reduce failed (another rank "
         "stopped or died?): ", e.what());
  }
  return buf[0];
}

// Backward of all_reduce_sum: every rank's loss saw the same sum, so the gradient reaching this
// rank's input is the sum over ranks of the gradients of the sum.
struct AllReduceSumBackward : torch::autograd::Node {
  explicit AllReduceSumBackward(DistContext c) : ctx(std::move(c)) {}
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    if (!grads[0].defined()) return {at::Tensor()};
    return {summed_over_ranks(grads[0], ctx)};
  }
  std::string name() const override { return "kestrel::dist::AllReduceSumBackward"; }
  DistContext ctx;
};

class GroupBatchNormSync : public models::BatchNormSync {
 public:
  explicit GroupBatchNormSync(DistContext ctx) : ctx_(std::move(ctx)) {}

  at::Tensor forward(models::BatchNorm2dImpl& bn, const at::Tensor& x) const override {
    // x [N, C, H, W] (any memory format); statistics in fp32 also under autocast, as cuDNN's BN.
    const int64_t c = x.size(1);
    const int64_t w = ctx_.world_size;
    const at::Tensor xf = x.to(at::kFloat);
    auto [var_r, mean_r] = at::var_mean(xf, {0, 2, 3}, /*correction=*/0, /*keepdim=*/false);  // [C] each
    const at::Tensor n_r = at::full({1}, static_cast<double>(x.numel() / c), xf.options());
    // This rank's row of the [W, 2C + 1] table; the others' rows arrive through the sum.
    const at::Tensor row = at::cat({mean_r, var_r, n_r}).unsqueeze(0);                      // [1, 2C + 1]
    const at::Tensor table = all_reduce_sum(
        at::constant_pad_nd(row, {0, 0, ctx_.rank, w - 1 - ctx_.rank}, 0.0), ctx_);         // [W, 2C + 1]
    const at::Tensor means = table.narrow(1, 0, c), vars = table.narrow(1, c, c);           // [W, C]
    const at::Tensor counts = table.narrow(1, 2 * c, 1);                                    // [W, 1]
    const at::Tensor n = counts.sum();                                                       // []
    const at::Tensor mean = (means * counts).sum(0) / n;                                     // [C]
    const at::Tensor var = ((vars + (means - mean).square()) * counts).sum(0) / n;           // [C], biased

    if (bn.options.track_running_stats() && !models::recomputing()) {
      torch::NoGradGuard no_grad;
      bn.num_batches_tracked.add_(1);
      // momentum None in PyTorch means a cumulative average (factor 1 / batches seen).
      const at::Tensor factor = bn.options.momentum()
                                    ? at::full({}, *bn.options.momentum(), xf.options())
                                    : 1.0 / bn.num_batches_tracked.to(at::kFloat);
      const at::Tensor unbiased = var * n / (n - 1).clamp_min(1);
      bn.running_mean.lerp_(mean.detach().to(bn.running_mean.scalar_type()), factor);
      bn.running_var.lerp_(unbiased.detach().to(bn.running_var.scalar_type()), factor);
    }
    at::Tensor scale = at::rsqrt(var + bn.options.eps());  // [C]
    if (bn.options.affine()) scale = scale * bn.weight;
    at::Tensor y = (xf - mean.view({1, c, 1, 1})) * scale.view({1, c, 1, 1});
    if (bn.options.affine()) y = y + bn.bias.view({1, c, 1, 1});
    return y.to(x.scalar_type());
  }

 private:
  DistContext ctx_;
};

}  // namespace

at::Tensor all_reduce_sum(const at::Tensor& x, const DistContext& ctx) {
  if (!ctx.enabled) return x.clone();
  at::Tensor out = summed_over_ranks(x, ctx);
  if (torch::autograd::compute_requires_grad(x)) {
    std::shared_ptr<AllReduceSumBackward> node(new AllReduceSumBackward(ctx), torch::autograd::deleteNode);
    node->set_next_edges(torch::autograd::collect_next_edges(x));
    torch::autograd::set_history(out, node);
  }
  return out;
}

std::shared_ptr<const models::BatchNormSync> make_batch_norm_sync(const DistContext& ctx) {
  return std::make_shared<GroupBatchNormSync>(ctx);
}

int convert_sync_batch_norm(torch::nn::Module& module, const DistContext& ctx) {
  if (!ctx.enabled) return 0;
  return models::set_batch_norm_sync(module, make_batch_norm_sync(ctx));
}

}  // namespace kestrel::dist
