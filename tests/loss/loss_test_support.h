// Helpers of the loss tests (YoloLoss and OtaLoss): BCE by hand, heads, the random three-level cases, the checks
// both losses pass on them (padding, autocast, CUDA), and the cross-check of a loss against a Python script run
// on the case's raw files, with the Python both references share.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include "kestrel/loss/yolo_loss.h"
#include "kestrel/models/detect.h"

namespace kestrel::test {

inline double softplus(double x) { return std::log1p(std::exp(x)); }  // = BCE(x, 0); BCE(x, y) = softplus(x) - x y
inline double bce(double x, double y) { return softplus(x) - x * y; }

// A head with one anchor level per entry (pixels), initialised for `strides` (anchors -> grid units).
std::shared_ptr<models::Detect> make_head(int64_t nc, const std::vector<std::vector<double>>& anchors_px,
                                          const std::vector<double>& strides);
// The mask of targets [B, M, 5] with every row real.
at::Tensor all_real(const at::Tensor& t);
std::vector<bool> bools(const at::Tensor& t);
std::vector<int64_t> longs(const at::Tensor& t);

// Grids (ny, nx) per level of the three-level head: a 96 x 96 input or a 64 x 96 one.
using Shapes = std::vector<std::pair<int64_t, int64_t>>;
inline const Shapes kSquare = {{12, 12}, {6, 6}, {3, 3}}, kWide = {{8, 12}, {4, 6}, {2, 3}};

// A three-level head (strides 8, 16, 32), nc 4, 3 anchors a level.
std::shared_ptr<models::Detect> three_level_head();
std::vector<at::Tensor> random_levels(int64_t b, const Shapes& shapes, double scale = 1.5);
// B 3, M 8: image 0 has 5 boxes, image 1 none, image 2 eight; with `specials`, image 2 has grid-aligned and
// border centres and a near duplicate (cells reached twice, equal costs). Padding rows are garbage.
std::pair<at::Tensor, at::Tensor> random_targets(bool specials = true);

// The three-level head and one random batch (levels and targets) for it, drawn after seeding with `seed`.
struct RandomInputs {
  static constexpr int64_t kImgSize = 96;
  RandomInputs(uint64_t seed, const loss::LossOptions& hyp, const Shapes& shapes, bool specials);
  Shapes shapes;
  loss::LossOptions hyp;
  std::shared_ptr<models::Detect> head = three_level_head();
  std::vector<at::Tensor> levels;
  at::Tensor t, mask;
};
// ... and the loss (YoloLoss or OtaLoss) with options `hyp` for them.
template <typename Loss>
struct RandomCase : RandomInputs {
  explicit RandomCase(uint64_t seed, const loss::LossOptions& hyp = loss::LossOptions{}, const Shapes& shapes = kSquare,
                      bool specials = true)
      : RandomInputs(seed, hyp, shapes, specials), loss(*head, hyp, kImgSize) {}
  Loss loss;
};

// Non-default loss options: other gains and positive weights, anchor_t 3, focal loss, label smoothing.
loss::LossOptions focal_smoothing_weights();

// total, items and d total / d levels for `levels` (fresh leaves).
struct Evaluated { at::Tensor total, items; std::vector<at::Tensor> grads; };
template <typename Loss>
Evaluated evaluate(const Loss& loss, const std::vector<at::Tensor>& levels, const at::Tensor& t,
                   const at::Tensor& mask) {
  std::vector<at::Tensor> leaves;
  for (const auto& l : levels) leaves.push_back(l.detach().clone().requires_grad_());
  const auto r = loss(leaves, t, mask);
  r.total.backward();
  Evaluated out{r.total.detach(), r.items, {}};
  for (const auto& l : leaves) out.grads.push_back(l.grad());
  return out;
}

// Targets `t` of random_targets with the padding rows (mask false) turned into garbage: random values up to
// thousands, an infinite row, and a plausible box (one random draw).
at::Tensor with_garbage_padding(const at::Tensor& t, const at::Tensor& mask);
// Expects the same total, items and gradients, to the bit.
void expect_identical(const Evaluated& a, const Evaluated& b);

// Expects c's loss on bfloat16 levels under CPU autocast to compute in float32: a float32 total within 1e-6
// (relative) of the loss on the same values given as float32.
template <typename Loss>
void expect_autocast_computes_in_float32(const RandomCase<Loss>& c) {
  std::vector<at::Tensor> half, full;
  for (const auto& l : c.levels) {
    half.push_back(l.to(at::kBFloat16));
    full.push_back(half.back().to(at::kFloat));
  }
  const at::Tensor expected = c.loss(full, c.t, c.mask).total;
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  const at::Tensor total = c.loss(half, c.t, c.mask).total;
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  EXPECT_EQ(total.scalar_type(), at::kFloat);
  EXPECT_NEAR(total.item<double>(), expected.item<double>(), 1e-6 * expected.item<double>());
}

// Expects finite gradients when the predictions no target is matched to have zero width and height
// (w and h logits -100: sigmoid squared underflows to 0). Image 1 of the random case has no boxes, so all
// its candidate slots are padding, gathered from its cell (0, 0); the other images' matched cells keep
// their values.
template <typename Loss>
void expect_finite_gradients_with_degenerate_unmatched_boxes(const RandomCase<Loss>& c) {
  std::vector<at::Tensor> levels;
  for (const auto& l : c.levels) {
    levels.push_back(l.clone());
    levels.back()[1].narrow(-1, 2, 2).fill_(-100);
  }
  const Evaluated e = evaluate(c.loss, levels, c.t, c.mask);
  EXPECT_TRUE(std::isfinite(e.total.item<double>()));
  for (size_t i = 0; i < e.grads.size(); ++i)
    EXPECT_TRUE(at::isfinite(e.grads[i]).all().item<bool>()) << "level " << i;
}

// Expects the loss on CUDA (c's head moved there) to match c's on the CPU: total within 1e-5 (relative),
// gradients allclose (rtol 1e-4, atol 1e-6). Needs a CUDA device.
template <typename Loss>
void expect_cuda_matches_cpu(const RandomCase<Loss>& c) {
  c.head->to(at::kCUDA);
  const Loss cuda(*c.head, c.hyp, RandomInputs::kImgSize);
  std::vector<at::Tensor> on_device;
  for (const auto& l : c.levels) on_device.push_back(l.cuda());
  const Evaluated a = evaluate(c.loss, c.levels, c.t, c.mask);
  const Evaluated b = evaluate(cuda, on_device, c.t.cuda(), c.mask.cuda());
  EXPECT_NEAR(a.total.item<double>(), b.total.item<double>(), 1e-5 * a.total.item<double>());
  for (size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_TRUE(at::allclose(a.grads[i], b.grads[i].cpu(), 1e-4, 1e-6)) << "level " << i;
}

// Python defining, for a script that follows it (after DIR, the folder of the case's files), the case
// (B, M, nc, na, img, shapes, strides, nl, h = the hyp, levels as float64 leaves, targets, mask, anchors in grid
// units), the loss gains and level balance as train.py scales them, class targets cp / cn, upstream's
// BCE (pos_weight, focal loss), CIoU (alpha without gradient), and write_loss(positives): YOLOv5's loss given
// the positives, which writes result.bin (total, box, obj, cls) and grad<i>.bin.
extern const char* const kPythonLossPrelude;

// Writes c's inputs as raw files and meta.json to a temporary folder DIR, runs `defines` + "DIR = ..." + `script`
// with the project's Python, and expects e's total, items and gradients within `rtol` of result.bin and
// grad<i>.bin that the script writes.
void expect_matches_script(const RandomInputs& c, const Evaluated& e, const std::string& defines,
                           const std::string& script, double rtol);
template <typename Loss>
void cross_check(const RandomCase<Loss>& c, const std::string& defines, const std::string& script, double rtol) {
  expect_matches_script(c, evaluate(c.loss, c.levels, c.t, c.mask), defines, script, rtol);
}

}  // namespace kestrel::test
