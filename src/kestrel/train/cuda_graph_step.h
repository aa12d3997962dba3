// CUDA-graph capture of the training step (`--cuda-graph`). A YOLO step is a few thousand small
// kernels (forward, loss, backward, fused optimiser, EMA); at batch 64 the GPU runs many of them faster
// than the host launches them, so the step is bound by launches, not by the GPU. Captured once per
// shape, the whole step is replayed as one graph launch.
//
// What makes the step capturable (and is kept so by the training code):
//  - Static shapes. Images [B, 3, H, W] as they come; targets [B, M, 5] and their mask [B, M] are
//    padded into buffers of the next power of two >= 32 rows (masked rows add nothing to the loss).
//    One graph per shape and kind (micro-step or step with update), at most max_graphs; beyond that,
//    eager steps.
//  - No host input inside: the learning rates are device tensors written before the replay; the loss
//    scale, inf/NaN flag, Adam step counts and EMA counter live on the device. The momentum is a kernel
//    argument, so a graph replays only the momentum it was captured with: shapes are captured once
//    their momentum has held for `warmup` calls, i.e. after the schedule's warm-up ramp.
//  - Gradients keep their memory (TrainStep::keep_gradient_memory), so every replay accumulates into
//    the buffers the update reads and zeroes.
//  - No host synchronisation (the design rule of every step).
// The eager calls before a capture run on the capture's side stream, as CUDA graphs need: cuBLAS
// workspaces, cuDNN autotuning and first allocations happen there, outside the capture.
// Data-parallel training is not captured: its all-reduce is started by host-side hooks.
#pragma once
#include <cstdint>
#include <memory>

#include <ATen/core/Tensor.h>

#include "kestrel/loss/yolo_loss.h"
#include "kestrel/train/schedule.h"
#include "kestrel/train/train_step.h"

namespace kestrel::train {

struct GraphStepOptions {
  // false: the same padded, static-buffer step without capture or side stream — what CPU tests use
  // to check everything but the capture itself. true needs CUDA.
  bool capture = true;
  int warmup = 2;       // eager calls of a shape (with a steady momentum) before it is captured
  int max_graphs = 8;   // shapes captured at most; other shapes run eagerly
};

class CudaGraphStep {
 public:
  // `step` is switched to keep_gradient_memory(). device: where the step runs.
  CudaGraphStep(TrainStep& step, const c10::Device& device, GraphStepOptions options = {});
  ~CudaGraphStep();
  CudaGraphStep(const CudaGraphStep&) = delete;
  CudaGraphStep& operator=(const CudaGraphStep&) = delete;

  // One batch, as TrainStep::forward_backward followed, when `update`, by optimizer_step(settings).
  // images [B, 3, H, W], targets [B, M, 5], mask [B, M] on the device. The result's tensors are the
  // caller's own (copies of the graph's outputs, which the next replay overwrites).
  loss::YoloLoss::Result run(const at::Tensor& images, const at::Tensor& targets, const at::Tensor& mask,
                             const StepSettings& settings, bool update);

  int graphs_captured() const;
  int64_t replays() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Rows of the static target buffer for a batch of `rows` targets: the next power of two >= 32.
int64_t padded_target_rows(int64_t rows);

}  // namespace kestrel::train
