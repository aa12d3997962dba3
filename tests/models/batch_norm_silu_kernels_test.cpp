// The fused BN-SiLU CUDA kernels (src/kestrel/models/batch_norm_silu_kernels.cuh), run on the CPU by
// tests/core/cuda_emulator.h at batch_norm_silu.cu's launch shapes, against BatchNorm + SiLU differentiated
// by autograd in double: output, running statistics, Σ dz and Σ dz·x̂ (= the bias and weight gradients)
// and the input gradient. (BatchNormSiLU.CudaMatchesTheUnfusedLayers compares on a real GPU.)
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "kestrel/models/batch_norm_silu.h"

#include "core/cuda_emulator.h"  // last: its macros rewrite what follows
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"  // CUDA idiom: unsigned threadIdx against int bounds
#include "kestrel/models/batch_norm_silu_kernels.cuh"
#pragma GCC diagnostic pop

namespace kestrel::models::detail {
namespace {

using cuda_emulator::launch;

constexpr double kMomentum = 0.03, kEps = 1e-3;  // make_batch_norm's (YOLOv5's)

double max_rel(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor a = got.to(at::kDouble), b = want.to(at::kDouble);
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item<double>();
}

struct Outcome {
  at::Tensor y, running_mean, running_var, dbias, dweight, dx;  // dbias = Σ dz, dweight = Σ dz·x̂
};

// BatchNorm2d (training) + SiLU in double on x's values, loss Σ y·dy.
Outcome reference(const at::Tensor& x, const at::Tensor& dy, const at::Tensor& weight, const at::Tensor& bias,
                  const at::Tensor& running_mean, const at::Tensor& running_var) {
  const at::Tensor x64 = x.to(at::kDouble).requires_grad_(true);
  const at::Tensor w64 = weight.to(at::kDouble).requires_grad_(true), b64 = bias.to(at::kDouble).requires_grad_(true);
  at::Tensor rm = running_mean.to(at::kDouble), rv = running_var.to(at::kDouble);
  const at::Tensor y = at::silu(at::batch_norm(x64, w64, b64, rm, rv, true, kMomentum, kEps, false));
  (y * dy.to(at::kDouble)).sum().backward();
  return {y.detach(), rm, rv, b64.grad(), w64.grad(), x64.grad()};
}

// The four kernels as batch_norm_silu runs them on a GPU: statistics from ATen, then prepare, forward,
// sums and input gradient, each at its launch shape.
template <typename T>
Outcome emulated(const at::Tensor& x, const at::Tensor& dy, const at::Tensor& weight, const at::Tensor& bias,
                 const at::Tensor& running_mean, const at::Tensor& running_var) {
  const int64_t channels = x.size(1), rows = x.numel() / channels;
  const auto [var, mean] = at::var_mean(x.to(at::kFloat), {0, 2, 3}, /*correction=*/0);
  const at::Tensor invstd = (var + kEps).rsqrt();
  Outcome out{at::Tensor(), running_mean.clone(), running_var.clone(), at::zeros({channels}), at::zeros({channels}),
              at::Tensor()};
  at::Tensor scale_shift = at::full({2, channels}, NAN);
  const Launch prepare = prepare_launch(channels);
  launch(prepare.grid, prepare.block, 0, prepare_kernel, mean.data_ptr<float>(), invstd.data_ptr<float>(),
         weight.data_ptr<float>(), bias.data_ptr<float>(), out.running_mean.data_ptr<float>(),
         out.running_var.data_ptr<float>(), scale_shift.data_ptr<float>(), channels, true, kMomentum,
         static_cast<long long>(rows), kEps);

  out.y = at::full_like(x, NAN, x.options(), at::MemoryFormat::ChannelsLast);
  const Launch elementwise = elementwise_launch(rows, channels);
  launch(elementwise.grid, elementwise.block, 0, forward_kernel<T>, x.data_ptr<T>(), scale_shift.data_ptr<float>(),
         out.y.data_ptr<T>(), rows, channels);

  at::Tensor sums = at::zeros({2, channels});
  const Launch reduce = sums_launch(rows, channels);
  launch(reduce.grid, reduce.block, 0, sums_kernel<T>, dy.data_ptr<T>(), x.data_ptr<T>(), mean.data_ptr<float>(),
         invstd.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), sums.data_ptr<float>(), rows,
         channels);
  out.dbias = sums[0];
  out.dweight = sums[1];

  out.dx = at::full_like(x, NAN, x.options(), at::MemoryFormat::ChannelsLast);
  launch(elementwise.grid, elementwise.block, 0, input_grad_kernel<T>, dy.data_ptr<T>(), x.data_ptr<T>(),
         mean.data_ptr<float>(), invstd.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
         sums.data_ptr<float>(), static_cast<int64_t>(rows), out.dx.data_ptr<T>(), rows, channels);
  return out;
}

template <typename T>
void expect_kernels_match(at::ScalarType dtype, double output_tol) {
  torch::manual_seed(5);
  // 40 channels: one full block of 32 and a partial one; 576 rows.
  const int64_t n = 4, c = 40, h = 12, w = 12, rows = n * h * w;
  const at::Tensor x = (at::randn({n, c, h, w}) * at::linspace(0.5, 3, c).view({1, c, 1, 1}) +
                        at::linspace(-2, 2, c).view({1, c, 1, 1}))
                           .to(dtype)
                           .contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor dy = at::randn({n, c, h, w}).to(dtype).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor weight = at::rand({c}) + 0.5, bias = at::rand({c}) - 0.5;
  const at::Tensor running_mean = at::rand({c}) * 2 - 1, running_var = at::rand({c}) * 1.5 + 0.5;

  // The shapes reach the kernels' grid-stride loops: fewer row slots than rows.
  ASSERT_LT(elementwise_launch(rows, c).grid.y * kRows, rows);
  ASSERT_LT(sums_launch(rows, c).grid.y * kSumRows, rows);
  ASSERT_EQ(elementwise_launch(rows, c).grid.x, 2u);

  const Outcome got = emulated<T>(x, dy, weight, bias, running_mean, running_var);
  const Outcome want = reference(x, dy, weight, bias, running_mean, running_var);
  EXPECT_EQ(got.y.scalar_type(), dtype);
  EXPECT_LT(max_rel(got.y, want.y), output_tol) << "output";
  EXPECT_LT(max_rel(got.running_mean, want.running_mean), 1e-5) << "running mean";
  EXPECT_LT(max_rel(got.running_var, want.running_var), 1e-5) << "running variance";
  EXPECT_LT(max_rel(got.dbias, want.dbias), 1e-4) << "Σ dz";
  EXPECT_LT(max_rel(got.dweight, want.dweight), 1e-4) << "Σ dz·x̂";
  EXPECT_LT(max_rel(got.dx, want.dx), output_tol) << "input gradient";
}

TEST(BatchNormSiLUKernels, Float32MatchesAutogradInDouble) { expect_kernels_match<float>(at::kFloat, 1e-5); }

// Half values in and out, float inside: the output's rounding (2^-11 relative) bounds the error.
TEST(BatchNormSiLUKernels, HalfMatchesAutogradInDouble) { expect_kernels_match<at::Half>(at::kHalf, 2e-3); }

// bfloat16 (autocast's CPU and Ampere+ type): its 8-bit mantissa (2^-8 relative) bounds the error.
TEST(BatchNormSiLUKernels, Bfloat16MatchesAutogradInDouble) {
  expect_kernels_match<at::BFloat16>(at::kBFloat16, 1.5e-2);
}

// Evaluation-style prepare (update false, no running statistics): the same constants, nothing written.
TEST(BatchNormSiLUKernels, PrepareWithoutUpdate) {
  const at::Tensor mean = at::tensor({0.5f, -1.f, 2.f}), invstd = at::tensor({2.f, 0.5f, 1.f});
  const at::Tensor weight = at::tensor({1.f, 3.f, -2.f}), bias = at::tensor({0.f, 1.f, 0.25f});
  at::Tensor scale_shift = at::full({2, 3}, NAN);
  const Launch l = prepare_launch(3);
  launch(l.grid, l.block, 0, prepare_kernel, mean.data_ptr<float>(), invstd.data_ptr<float>(), weight.data_ptr<float>(),
         bias.data_ptr<float>(), static_cast<float*>(nullptr), static_cast<float*>(nullptr), scale_shift.data_ptr<float>(),
         int64_t{3}, false, kMomentum, 8LL, kEps);
  // scale = invstd·w, shift = b − mean·scale, by hand.
  EXPECT_TRUE(at::equal(scale_shift, at::tensor({2.f, 1.5f, -2.f, -1.f, 2.5f, 4.25f}).view({2, 3})));
}

}  // namespace
}  // namespace kestrel::models::detail
