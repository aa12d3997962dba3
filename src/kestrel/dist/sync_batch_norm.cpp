#include "kestrel/dist/sync_batch_norm.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
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

// Backward of the synchronised batch norm (as torch.nn.SyncBatchNorm's): per channel Σ dy and Σ dy·x̂ of
// this rank, summed over the ranks for the input gradient; the weight and bias gradients are this rank's
// sums (the gradient reducer averages them with the others). Keeps x in its own dtype and two [C] vectors,
// where the same forward written as differentiable ops would keep float32 copies of x under autocast
// (4 more bytes per element of every BN layer's input).
struct SyncBatchNormBackward : torch::autograd::Node {
  SyncBatchNormBackward(DistContext c, const at::Tensor& x, at::Tensor mean, at::Tensor invstd, const at::Tensor& weight,
                        at::Tensor count)
      : ctx(std::move(c)), saved_x(x, /*is_output=*/false), mean(std::move(mean)), invstd(std::move(invstd)),
        weight(weight.defined() ? weight.detach() : at::Tensor()), count(std::move(count)) {}

  // grads[0]: dL/dy [N, C, H, W]. Returns dL/dx, dL/dweight, dL/dbias (the inputs' order in forward).
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    const at::Tensor x = saved_x.unpack();
    const int64_t c = x.size(1);
    const auto per_channel = [&](const at::Tensor& t) { return t.view({1, c, 1, 1}); };
    // A rank whose output gradient is undefined still takes part in the collective (zeros).
    const at::Tensor dy = grads[0].defined() ? grads[0].to(at::kFloat) : at::zeros(x.sizes(), x.options().dtype(at::kFloat));
    const at::Tensor xhat = (x.to(at::kFloat) - per_channel(mean)) * per_channel(invstd);    // [N, C, H, W], not kept
    const at::Tensor local = at::stack({dy.sum({0, 2, 3}), (dy * xhat).sum({0, 2, 3})});  // [2, C]
    const at::Tensor total = summed_over_ranks(local, ctx);                                 // [2, C]
    at::Tensor gain = invstd;
    if (weight.defined()) gain = gain * weight.to(at::kFloat);
    at::Tensor dx;
    if (task_should_compute_output(0))
      dx = ((dy - per_channel(total[0] / count) - xhat * per_channel(total[1] / count)) * per_channel(gain))
               .to(x.scalar_type());
    at::Tensor dweight, dbias;
    if (weight.defined() && task_should_compute_output(1)) dweight = local[1].to(weight.scalar_type());
    if (weight.defined() && task_should_compute_output(2)) dbias = local[0].to(weight.scalar_type());
    return {dx, dweight, dbias};
  }
  std::string name() const override { return "kestrel::dist::SyncBatchNormBackward"; }
  void release_variables() override {
    saved_x.reset_data();
    mean.reset();
    invstd.reset();
    count.reset();
  }

  DistContext ctx;
  torch::autograd::SavedVariable saved_x;
  at::Tensor mean, invstd, weight;  // [C] float32; weight as in forward (undefined without affine)
  at::Tensor count;                 // [] float32: values per channel over all ranks (on the device: no host read)
};

class GroupBatchNormSync : public models::BatchNormSync {
 public:
  explicit GroupBatchNormSync(DistContext ctx) : ctx_(std::move(ctx)) {}

  at::Tensor forward(models::BatchNorm2dImpl& bn, const at::Tensor& x) const override {
    // x [N, C, H, W] (any memory format); statistics in fp32 also under autocast, as cuDNN's BN.
    const int64_t c = x.size(1);
    const int64_t w = ctx_.world_size;
    const bool affine = bn.options.affine();
    at::Tensor y, mean, invstd, n;
    {
      torch::NoGradGuard no_grad;  // the gradient is SyncBatchNormBackward's
      const at::Tensor xf = x.to(at::kFloat);
      auto [var_r, mean_r] = at::var_mean(xf, {0, 2, 3}, /*correction=*/0, /*keepdim=*/false);  // [C] each
      const at::Tensor n_r = at::full({1}, static_cast<double>(x.numel() / c), xf.options());
      // This rank's row of the [W, 2C + 1] table; the others' rows arrive through the sum.
      const at::Tensor row = at::cat({mean_r, var_r, n_r}).unsqueeze(0);                          // [1, 2C + 1]
      const at::Tensor table = summed_over_ranks(at::constant_pad_nd(row, {0, 0, ctx_.rank, w - 1 - ctx_.rank}, 0.0),
                                                 ctx_);                                             // [W, 2C + 1]
      const at::Tensor means = table.narrow(1, 0, c), vars = table.narrow(1, c, c);               // [W, C]
      const at::Tensor counts = table.narrow(1, 2 * c, 1);                                        // [W, 1]
      n = counts.sum();                                                                            // []
      mean = (means * counts).sum(0) / n;                                                          // [C]
      const at::Tensor var = ((vars + (means - mean).square()) * counts).sum(0) / n;               // [C], biased
      if (bn.options.track_running_stats() && !models::recomputing()) {
        bn.num_batches_tracked.add_(1);
        // momentum None in PyTorch means a cumulative average (factor 1 / batches seen).
        const at::Tensor factor = bn.options.momentum() ? at::full({}, *bn.options.momentum(), xf.options())
                                                        : 1.0 / bn.num_batches_tracked.to(at::kFloat);
        const at::Tensor unbiased = var * n / (n - 1).clamp_min(1);
        bn.running_mean.lerp_(mean.to(bn.running_mean.scalar_type()), factor);
        bn.running_var.lerp_(unbiased.to(bn.running_var.scalar_type()), factor);
      }
      invstd = at::rsqrt(var + bn.options.eps());  // [C]
      at::Tensor scale = invstd;
      if (affine) scale = scale * bn.weight.to(at::kFloat);
      y = (xf - mean.view({1, c, 1, 1})) * scale.view({1, c, 1, 1});
      if (affine) y = y + bn.bias.to(at::kFloat).view({1, c, 1, 1});
      y = y.to(x.scalar_type());
    }
    const at::Tensor weight = affine ? bn.weight : at::Tensor(), bias = affine ? bn.bias : at::Tensor();
    if (torch::autograd::compute_requires_grad(x, weight, bias)) {
      std::shared_ptr<SyncBatchNormBackward> node(new SyncBatchNormBackward(ctx_, x.detach(), mean, invstd, weight, n),
                                                  torch::autograd::deleteNode);
      node->set_next_edges(torch::autograd::collect_next_edges(x, weight, bias));
      torch::autograd::set_history(y, node);
    }
    return y;
  }

 private:
  DistContext ctx_;
};

}  // namespace

std::shared_ptr<const models::BatchNormSync> make_batch_norm_sync(const DistContext& ctx) {
  return std::make_shared<GroupBatchNormSync>(ctx);
}

int convert_sync_batch_norm(torch::nn::Module& module, const DistContext& ctx) {
  if (!ctx.enabled) return 0;
  return models::set_batch_norm_sync(module, make_batch_norm_sync(ctx));
}

}  // namespace kestrel::dist
