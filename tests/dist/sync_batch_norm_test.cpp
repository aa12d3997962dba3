// SyncBatchNorm over Gloo on CPU (ranks are threads with their own process groups): 2 ranks x batch 2 with
// SyncBN equal to one process with batch 4 — outputs, gradients, running statistics and parameters after
// three SGD steps — while plain BN on the same split does not; bfloat16 input; eval mode alone.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <thread>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/nn/modules/container/sequential.h>

#include "kestrel/core/error.h"
#include "kestrel/dist/process_group.h"
#include "kestrel/dist/sync_batch_norm.h"
#include "kestrel/models/batch_norm.h"
#include "kestrel/models/common.h"
#include "dist/dist_test_support.h"
#include "test_support.h"

namespace kestrel::dist {
namespace {

using namespace std::chrono_literals;
using test::close_rel;
using test::copy_state;
using test::file_group;
using test::run_ranks;
const c10::Device kCpu(c10::kCPU);

class SyncBatchNorm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!backend_available(kCpu)) GTEST_SKIP() << "this build has no Gloo headers (libgloo-dev)";
  }
  test::TempDir dir;
};

std::shared_ptr<models::Conv> conv(int64_t c1, int64_t c2, int64_t k, int64_t s) {
  models::ConvOptions o{};
  o.c1 = c1;
  o.c2 = c2;
  o.k = k;
  o.s = s;
  return std::make_shared<models::Conv>(o);
}

// Conv(3->8, 3x3) -> Conv(8->6, 3x3, stride 2), each with BatchNorm and SiLU: [B, 3, 8, 8] -> [B, 6, 4, 4].
std::shared_ptr<torch::nn::SequentialImpl> small_net() {
  auto net = std::make_shared<torch::nn::SequentialImpl>();
  net->push_back(conv(3, 8, 3, 1));
  net->push_back(conv(8, 6, 3, 2));
  return net;
}

struct StepRecord {
  std::vector<at::Tensor> outputs, grads;  // per step: output [B, 6, 4, 4]; first step's gradients
};

// Three SGD steps on `net` over `images` ([B, 3, 8, 8]); loss = sum(out * weights), which is a sum over
// images, so the whole batch's loss is the sum of the shards' losses. `scale` multiplies the loss
// (world size, upstream's DDP convention); `reducer` averages gradients when given.
StepRecord train_three_steps(torch::nn::SequentialImpl& net, const at::Tensor& images, const at::Tensor& weights,
                             double scale, GradientReducer* reducer) {
  StepRecord rec;
  net.train();
  for (int step = 0; step < 3; ++step) {
    for (auto& p : net.parameters()) p.mutable_grad() = at::Tensor();
    if (reducer) reducer->prepare_backward(true);
    const at::Tensor out = net.forward(images);
    ((out * weights).sum() * scale).backward();
    if (reducer) reducer->reduce();
    if (step == 0)
      for (auto& p : net.parameters()) rec.grads.push_back(p.grad().clone());
    rec.outputs.push_back(out.detach().clone());
    torch::NoGradGuard g;
    for (auto& p : net.parameters()) p.sub_(0.05 * p.grad());
  }
  return rec;
}

void compare_two_ranks_with_one_process(const std::string& store, bool sync, bool expect_equal) {
  torch::manual_seed(0);
  const at::Tensor images = at::randn({4, 3, 8, 8}) * 2 + 1;  // non-zero mean: the statistics matter
  const at::Tensor weights = at::randn({4, 6, 4, 4});
  auto reference = small_net();
  std::vector<std::shared_ptr<torch::nn::SequentialImpl>> ranks{small_net(), small_net()};
  for (auto& r : ranks) copy_state(*reference, *r);
  const StepRecord ref = train_three_steps(*reference, images, weights, 1.0, nullptr);

  std::vector<StepRecord> rec(2);
  std::vector<int> converted(2);
  run_ranks(2, [&](int r) {
    const DistContext ctx = file_group(store, r, 2);
    if (sync) converted[r] = convert_sync_batch_norm(*ranks[r], ctx);
    GradientReducer reducer(ranks[r]->parameters(), ctx);
    rec[r] = train_three_steps(*ranks[r], images.narrow(0, 2 * r, 2), weights.narrow(0, 2 * r, 2), 2.0, &reducer);
  });
  if (sync) {
    EXPECT_EQ(converted[0], 2);
  }
  const double tol = 1e-4;
  bool all_close = true;
  for (int step = 0; step < 3; ++step) {
    const at::Tensor joined = at::cat({rec[0].outputs[step], rec[1].outputs[step]});
    const bool close = close_rel(joined, ref.outputs[step], tol);
    all_close = all_close && close;
    if (expect_equal) {
      EXPECT_TRUE(close_rel(joined, ref.outputs[step], tol)) << "output of step " << step;
    }
  }
  const auto pref = reference->parameters();
  for (int r = 0; r < 2; ++r) {
    const auto p = ranks[r]->parameters();
    for (size_t i = 0; i < p.size(); ++i) {
      all_close = all_close && close_rel(rec[r].grads[i], ref.grads[i], tol) && close_rel(p[i], pref[i], tol);
      if (expect_equal) {
        EXPECT_TRUE(close_rel(rec[r].grads[i], ref.grads[i], tol)) << "rank " << r << " gradient " << i;
        EXPECT_TRUE(close_rel(p[i], pref[i], tol)) << "rank " << r << " parameter " << i << " after 3 steps";
      }
    }
    const auto b = ranks[r]->buffers(), bref = reference->buffers();
    for (size_t i = 0; i < b.size(); ++i) {
      all_close = all_close && close_rel(b[i].to(at::kDouble), bref[i].to(at::kDouble), tol);
      if (expect_equal) {
        EXPECT_TRUE(close_rel(b[i].to(at::kDouble), bref[i].to(at::kDouble), tol)) << "rank " << r << " buffer " << i;
      }
    }
  }
  if (!expect_equal) {
    EXPECT_FALSE(all_close) << "per-rank BN matched the whole-batch BN: the SyncBN test proves nothing";
  }
}

TEST_F(SyncBatchNorm, TwoRanksEqualOneProcessWithTheWholeBatch) {
  compare_two_ranks_with_one_process(dir.file("store"), /*sync=*/true, /*expect_equal=*/true);
}

TEST_F(SyncBatchNorm, WithoutSyncTheShardsNormaliseDifferently) {
  compare_two_ranks_with_one_process(dir.file("store"), /*sync=*/false, /*expect_equal=*/false);
}

// A bfloat16 input (autocast's) on 2 ranks against float32 batch norm over the whole batch of the same
// values: the statistics and gradients are computed in float32, the output and input gradient come back
// in bfloat16, and the backward is the one operation that keeps x in its own dtype.
TEST_F(SyncBatchNorm, Bfloat16InputOnTwoRanksMatchesFloat32OnTheWholeBatch) {
  torch::manual_seed(4);
  const at::Tensor x = (at::randn({4, 5, 6, 6}) * 2 + 1).to(at::kBFloat16), g = at::randn({4, 5, 6, 6});
  auto reference = models::make_batch_norm(5);
  {
    torch::NoGradGuard no_grad;
    reference->weight.uniform_(0.5, 1.5);
    reference->bias.uniform_(-0.5, 0.5);
  }
  reference->train();
  const at::Tensor x32 = x.to(at::kFloat).requires_grad_();
  const at::Tensor want = reference->forward(x32);
  (want * g).sum().backward();
  std::vector<at::Tensor> y(2), dx(2), dweight(2);
  std::vector<std::string> grad_fn(2);
  run_ranks(2, [&](int r) {
    auto bn = models::make_batch_norm(5);
    {
      torch::NoGradGuard no_grad;
      bn->weight.copy_(reference->weight);
      bn->bias.copy_(reference->bias);
    }
    bn->train();
    const DistContext ctx = file_group(dir.file("store"), r, 2);
    convert_sync_batch_norm(*bn, ctx);
    const at::Tensor xr = x.narrow(0, 2 * r, 2).clone().requires_grad_();
    y[r] = bn->forward(xr);
    grad_fn[r] = y[r].grad_fn()->name();
    (y[r].to(at::kFloat) * g.narrow(0, 2 * r, 2)).sum().backward();
    dx[r] = xr.grad();
    dweight[r] = bn->weight.grad().clone();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(grad_fn[r], "kestrel::dist::SyncBatchNormBackward");
    EXPECT_EQ(y[r].scalar_type(), at::kBFloat16);
    EXPECT_EQ(dx[r].scalar_type(), at::kBFloat16);
    // bfloat16's 8-bit mantissa: relative errors of a few 2^-8 of the largest value.
    EXPECT_TRUE(close_rel(y[r].to(at::kFloat), want.detach().narrow(0, 2 * r, 2), 2e-2)) << "output, rank " << r;
    EXPECT_TRUE(close_rel(dx[r].to(at::kFloat), x32.grad().narrow(0, 2 * r, 2), 3e-2)) << "input gradient, rank " << r;
  }
  // Each rank's weight gradient is its own shard's; their sum is the whole batch's (within the rounding of
  // the bfloat16 gradient arriving at the bfloat16 output).
  EXPECT_TRUE(close_rel(dweight[0] + dweight[1], reference->weight.grad(), 2e-2));
}

// Eval mode uses the running statistics and no collective: rank 0 alone can validate.
TEST_F(SyncBatchNorm, EvalModeNeedsNoOtherRank) {
  auto net = small_net();
  auto other = small_net();
  copy_state(*net, *other);
  net->eval();
  other->eval();
  const at::Tensor x = at::randn({2, 3, 8, 8});
  at::Tensor y;
  std::atomic<bool> done{false};
  run_ranks(2, [&](int r) {
    const DistContext ctx = file_group(dir.file("store"), r, 2, 5s);
    convert_sync_batch_norm(r == 0 ? *net : *other, ctx);
    if (r == 0) {
      torch::NoGradGuard g;
      y = net->forward(x);
      done = true;
    } else {
      while (!done) std::this_thread::sleep_for(10ms);  // keeps its group open, takes no part
    }
  });
  auto plain = small_net();
  copy_state(*net, *plain);
  plain->eval();
  torch::NoGradGuard g;
  EXPECT_TRUE(at::allclose(y, plain->forward(x)));
}

}  // namespace
}  // namespace kestrel::dist
