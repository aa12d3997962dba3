// Batch norm and SiLU as one training operation (`--fused-bn-silu`): silu(bn(x)) for the Conv blocks
// without the normalised tensor in between. Unfused, a BN + SiLU pair passes over its activation 13 times
// in forward and backward (BN statistics, normalise, SiLU; SiLU's gradient, BN's reduction and input
// gradient) and keeps two tensors for backward; fused, 8 passes and one saved tensor (SiLU's input is
// recomputed from BN's where it is needed). YOLO training on a GPU is bound by memory traffic
// (shared/reference/perf_anchors.md), so the passes are the cost.
//
// Forward: batch statistics (ATen's batch_norm_stats on CUDA); one per-channel kernel for the running
// statistics and the affine constants; then y = silu(x * scale + shift) in one kernel. Backward: one
// reduction kernel gives per channel Σ dz and Σ dz·x̂ (dz = dy · silu'(z), z recomputed from x), and one
// kernel the input gradient dx = w·invstd·(dz − Σdz/M − x̂·Σ(dz·x̂)/M); the weight and bias gradients
// are the sums. About as many launches as cuDNN's BN plus SiLU.
//
// CUDA: channels-last contiguous x (the layout of fast fp16 convolutions), float accumulation. The CPU
// runs the same per-element code in loops: what the tests compare with the unfused layers.
#pragma once
#include <cmath>

#include <ATen/core/Tensor.h>

#include "kestrel/models/batch_norm.h"

namespace kestrel::models {

// silu(batch_norm(x)) in training mode with bn's weight, bias and eps, updating its running statistics
// and num_batches_tracked as BatchNorm2d does (not while a checkpointed layer is recomputed).
// x [N, C, H, W] floating; the result has x's dtype. Gradients flow to x, bn.weight and bn.bias.
at::Tensor batch_norm_silu(BatchNorm2dImpl& bn, const at::Tensor& x);

// Whether batch_norm_silu runs its fused path for x: CPU always; CUDA when built with CUDA and x is
// channels-last contiguous (other layouts would need a copy, which costs what fusing saves).
bool batch_norm_silu_supports(const at::Tensor& x);

// ---- shared by batch_norm_silu.cpp (CPU loops) and batch_norm_silu.cu (kernels) -------------------------
namespace detail {

#ifdef __CUDACC__
#define KESTREL_BN_HD __host__ __device__
#define KESTREL_BN_EXP expf
#else
#define KESTREL_BN_HD
#define KESTREL_BN_EXP std::exp
#endif

KESTREL_BN_HD inline float sigmoid(float z) { return 1.f / (1.f + KESTREL_BN_EXP(-z)); }
// silu(z) = z σ(z)
KESTREL_BN_HD inline float silu(float z) { return z * sigmoid(z); }
// d silu / dz = σ(z) (1 + z (1 − σ(z)))
KESTREL_BN_HD inline float silu_grad(float z) {
  const float s = sigmoid(z);
  return s * (1.f + z * (1.f - s));
}

// One channel's forward constants, z = x·scale + shift (= (x − mean)·invstd·w + b), and, when `update`,
// BatchNorm2d's running statistics moved towards the batch's: r = (1 − m) r + m s with the unbiased
// variance, recovered from invstd in double (as PyTorch's SyncBatchNorm does).
KESTREL_BN_HD inline void prepare_channel(float mean, float invstd, float w, float b, float* scale, float* shift,
                                          bool update, double momentum, long long count, double eps,
                                          float* running_mean, float* running_var) {
  *scale = invstd * w;
  *shift = b - mean * *scale;
  if (!update) return;
  double var = 1.0 / (static_cast<double>(invstd) * invstd) - eps;
  var = var < 0 ? 0 : var;
  const double unbiased = count > 1 ? var * static_cast<double>(count) / static_cast<double>(count - 1) : var;
  *running_mean = static_cast<float>((1 - momentum) * *running_mean + momentum * mean);
  *running_var = static_cast<float>((1 - momentum) * *running_var + momentum * unbiased);
}

// dz = dy · silu'(z) with z recomputed from x; x̂ = (x − mean)·invstd.
KESTREL_BN_HD inline float grad_at_bn_output(float dy, float x, float mean, float invstd, float w, float b, float* xhat) {
  *xhat = (x - mean) * invstd;
  return dy * silu_grad(*xhat * w + b);
}

#undef KESTREL_BN_HD
#undef KESTREL_BN_EXP

// The kernels (batch_norm_silu.cu). Tensors on one CUDA device; x, dy [N, C, H, W] channels-last
// contiguous, of one floating dtype; per-channel tensors float32 contiguous.
// scale_shift [2, C] from the batch statistics; running statistics updated in place when `update`.
at::Tensor bn_silu_prepare_cuda(const at::Tensor& mean, const at::Tensor& invstd, const at::Tensor& weight,
                                const at::Tensor& bias, const at::Tensor& running_mean, const at::Tensor& running_var,
                                bool update, double momentum, int64_t count, double eps);
// y = silu(x * scale + shift)
at::Tensor bn_silu_forward_cuda(const at::Tensor& x, const at::Tensor& scale_shift);
// sums [2, C]: Σ dz and Σ dz·x̂ over N, H, W.
at::Tensor bn_silu_backward_sums_cuda(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean,
                                      const at::Tensor& invstd, const at::Tensor& weight, const at::Tensor& bias);
// dx = w·invstd·(dz − Σdz/count − x̂·Σ(dz·x̂)/count)
at::Tensor bn_silu_backward_input_cuda(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean,
                                       const at::Tensor& invstd, const at::Tensor& weight, const at::Tensor& bias,
                                       const at::Tensor& sums, int64_t count);

}  // namespace detail
}  // namespace kestrel::models
