// The exporter writes a RepConv as the single conv RepConv::fuse() makes from its branches. That conv
// must equal the three branches as trained: act(BN(conv3x3(x)) + BN(conv1x1(x)) + BN(x)), computed
// here by hand from the module's parameters with at::conv2d / at::batch_norm, with BN statistics
// and affine parameters far from their defaults.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "export/onnx_check.h"
#include "kestrel/models/yolov7_blocks.h"

namespace kestrel::exporting {
namespace {

struct RepCase {
  int64_t c1, c2, s, g;
  bool identity;  // c1 == c2 and stride 1
};

// The three-branch output, from the unfused module's tensors (eps 1e-3: upstream's initialize_weights).
at::Tensor three_branches(models::RepConv& rep, const at::Tensor& x, const RepCase& c) {
  auto p = rep.named_parameters();
  auto b = rep.named_buffers();
  auto bn = [&](const at::Tensor& y, const std::string& prefix) {
    return at::batch_norm(y, p[prefix + "weight"], p[prefix + "bias"], b[prefix + "running_mean"],
                          b[prefix + "running_var"], false, 0.0, 1e-3, false);
  };
  const std::vector<int64_t> stride{c.s, c.s}, dilation{1, 1};
  auto conv = [&](const std::string& w, int64_t pad) {
    return at::conv2d(x, p[w], at::Tensor(), stride, std::vector<int64_t>{pad, pad}, dilation, c.g);
  };
  at::Tensor y = bn(conv("rbr_dense.0.weight", 1), "rbr_dense.1.") + bn(conv("rbr_1x1.0.weight", 0), "rbr_1x1.1.");
  if (c.identity) y = y + bn(x, "rbr_identity.");
  return y * at::sigmoid(y);  // SiLU, RepConv's default activation
}

class OnnxRepConv : public ::testing::TestWithParam<RepCase> {};

TEST_P(OnnxRepConv, ReparameterisedEqualsThreeBranches) {
  const RepCase c = GetParam();
  at::manual_seed(11);
  models::RepConv rep(c.c1, c.c2, 3, c.s, -1, c.g);
  test_onnx::randomize_batch_norm(rep);
  rep.eval();
  EXPECT_EQ(rep.named_buffers().contains("rbr_identity.running_mean"), c.identity);
  torch::NoGradGuard no_grad;
  at::Tensor x = at::randn({2, c.c1, 12, 10});
  at::Tensor expected = three_branches(rep, x, c);
  rep.fuse();
  ASSERT_FALSE(rep.reparam_conv().is_empty());
  EXPECT_EQ(rep.reparam_conv()->weight.sizes(), (at::IntArrayRef{c.c2, c.c1 / c.g, 3, 3}));
  EXPECT_FALSE(rep.named_parameters().contains("rbr_dense.0.weight"));  // the branches are gone
  at::Tensor fused = rep.forward(x);
  ASSERT_EQ(fused.sizes(), expected.sizes());
  const double scale = expected.abs().max().item<double>(), diff = (fused - expected).abs().max().item<double>();
  EXPECT_GT(scale, 1.0);  // not trivially small
  EXPECT_LT(diff, 1e-5 * scale) << "max abs diff " << diff << " of " << scale;
}

INSTANTIATE_TEST_SUITE_P(Onnx, OnnxRepConv,
                         ::testing::Values(RepCase{8, 8, 1, 1, true}, RepCase{8, 8, 1, 2, true},
                                           RepCase{8, 16, 1, 1, false}, RepCase{8, 16, 2, 1, false},
                                           RepCase{8, 8, 2, 4, false}),
                         [](const auto& info) {
                           const RepCase& c = info.param;
                           return "c" + std::to_string(c.c1) + "_" + std::to_string(c.c2) + "_s" + std::to_string(c.s) +
                                  "_g" + std::to_string(c.g);
                         });

}  // namespace
}  // namespace kestrel::exporting
