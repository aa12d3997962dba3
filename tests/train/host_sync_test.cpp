// The design rule everything fast depends on: the training step never waits for the host. On a GPU, an op
// that hands a device value to the host or sizes its output by the data (.item(), nonzero, masked_select,
// boolean-mask indexing, unique, equal, ...) drains the device's queue, and a CUDA graph cannot hold it.
// The same code runs on the CPU, so these tests record every ATen op one training step dispatches here
// (forward, loss, backward, unscale and clipping, optimiser, loss-scale update, EMA) and fail on any of
// those, naming it. The recorder itself is checked to see them (so that the checks can fail).
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "kestrel/core/device.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/train/cuda_graph_step.h"
#include "kestrel/train/param_groups.h"
#include "kestrel/train/train_step.h"
#include "test_support.h"

namespace kestrel::train {
namespace {

// ATen ops whose result a CUDA implementation can only give after waiting for the device: a host scalar,
// or an output whose size depends on the values. (Boolean-mask indexing and where(cond) dispatch nonzero.)
const std::set<std::string> kWaitsForTheDevice = {
    "aten::_local_scalar_dense", "aten::item",          "aten::is_nonzero",     "aten::equal",
    "aten::allclose",            "aten::nonzero",       "aten::nonzero_numpy",  "aten::masked_select",
    "aten::_unique",             "aten::_unique2",      "aten::unique_dim",     "aten::unique_consecutive",
    "aten::bincount",            "aten::repeat_interleave", "aten::_pin_memory"};

// ATen's CPU kernels of the fused optimisers read their learning-rate and step tensors with .item(); their
// CUDA kernels read them on the device (the tensors are checked to be on the parameters' GPU), so what
// these do inside is not a wait there.
const std::set<std::string> kCpuKernelsReadingScalars = {"aten::_fused_sgd_", "aten::_fused_adam_",
                                                         "aten::_fused_adamw_"};

// The recorded ops that wait for the device, as "op (in outer op) xN", sorted ("" if none).
std::string device_waits(const test::OpRecorder& recorder) {
  std::map<std::string, int> counts;
  for (const auto& call : recorder.calls())
    if (kWaitsForTheDevice.count(call.op) && !kCpuKernelsReadingScalars.count(call.outermost))
      ++counts[call.outermost == call.op ? call.op : call.op + " (in " + call.outermost + ")"];
  std::string out;
  for (const auto& [what, n] : counts) out += what + " x" + std::to_string(n) + " ";
  return out;
}

struct StepCase {
  std::string cfg = "yolov5n";
  int img = 64;
  bool ota = false;
  OptimizerKind optimizer = OptimizerKind::sgd;
  bool fused = true;
  bool autocast = false;  // bf16 on the CPU (fp16's code path: the same autocast guard)
  bool scaler = false;    // dynamic loss scaling (unscale, clip, skip-on-inf, scale update)
  bool channels_last = false;
  bool checkpoint = false;  // every layer recomputed in backward
  bool graph_step = false;  // through CudaGraphStep's padded static buffers (without capture on the CPU)
};

// The step of a StepCase on a device, with one batch: 2 images, 6 target rows of which 4 are boxes (fixed
// capacity with a mask, as the loader gives them).
struct StepRig {
  std::shared_ptr<models::YoloModel> model, average;
  std::unique_ptr<ModelEma> ema;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<GradScaler> scaler;
  std::unique_ptr<TrainStep> step;
  std::unique_ptr<CudaGraphStep> graph;
  at::Tensor images, targets, mask;
  StepSettings settings{{0.01, 0.01, 0.01}, 0.9, 2};

  StepRig(const StepCase& c, const c10::Device& device) {
    torch::manual_seed(1);
    const auto config = models::load_model_config(models::resolve_model_config_path(c.cfg));
    model = models::build_model(config, 3);
    average = models::build_model(config, 3);
    model->to(device);
    average->to(device);
    model->train();
    if (c.checkpoint) {
      std::vector<int> layers(model->layers().size() - 1);
      std::iota(layers.begin(), layers.end(), 0);
      model->set_checkpointed_layers(layers);
    }
    if (c.channels_last) {
      to_channels_last(*model);
      to_channels_last(*average);
    }
    ema = std::make_unique<ModelEma>(average, *model);
    OptimizerOptions oo;
    oo.kind = c.optimizer;
    oo.fused = c.fused;
    optimizer = std::make_unique<Optimizer>(split_parameters(*model), oo);
    GradScalerOptions so;
    so.enabled = c.scaler;
    scaler = std::make_unique<GradScaler>(so, device);
    StepOptions step_options;
    step_options.autocast = c.autocast;
    step_options.autocast_dtype = device.is_cuda() ? at::kHalf : at::kBFloat16;
    step_options.channels_last = c.channels_last;
    step = std::make_unique<TrainStep>(*model, make_loss_fn(model->head(), loss::LossOptions{}, c.img, c.ota),
                                       *optimizer, *scaler, ema.get(), step_options);
    if (c.graph_step) {
      GraphStepOptions go;
      go.capture = false;
      graph = std::make_unique<CudaGraphStep>(*step, device, go);
    }
    images = at::rand({2, 3, c.img, c.img}).to(device);
    if (c.channels_last) images = images.contiguous(at::MemoryFormat::ChannelsLast);
    targets = at::cat({at::randint(0, 3, {2, 6, 1}).to(at::kFloat), at::rand({2, 6, 2}) * 0.8 + 0.1,
                       at::rand({2, 6, 2}) * 0.3 + 0.05},
                      2)
                  .to(device);
    mask = (at::arange(6) < 4).expand({2, 6}).contiguous().to(device);
  }

  // Two batches, the second with the optimiser update (with the graph step: four, past its warm-up).
  void run() {
    if (graph) {
      for (int i = 0; i < 4; ++i) graph->run(images, targets, mask, settings, i % 2 == 1);
      return;
    }
    step->forward_backward(images, targets, mask);
    step->forward_backward(images, targets, mask);
    step->optimizer_step(settings);
  }
};

// The ops of one step on the CPU that would wait for a GPU ("" if none).
std::string waits_in_one_step(const StepCase& c, bool* saw_convolution = nullptr) {
  StepRig rig(c, at::Device(at::kCPU));
  test::OpRecorder recorder;
  rig.run();
  if (saw_convolution) *saw_convolution = recorder.saw("aten::convolution");
  return device_waits(recorder);
}

TEST(HostSync, TheRecorderSeesOpsAndHostReads) {
  test::OpRecorder recorder;
  const at::Tensor x = at::rand({8});
  (void)x.sum().item<float>();
  (void)x.masked_select(x > 0.5);
  const std::string waits = device_waits(recorder);
  EXPECT_NE(waits.find("aten::_local_scalar_dense"), std::string::npos) << waits;
  EXPECT_NE(waits.find("aten::masked_select"), std::string::npos) << waits;
  EXPECT_TRUE(recorder.saw("aten::sum"));
}

TEST(HostSync, Yolov5StepWithSgd) {
  bool saw_convolution = false;
  EXPECT_EQ(waits_in_one_step({}, &saw_convolution), "");
  EXPECT_TRUE(saw_convolution) << "the step ran without the recorder seeing it";
}

TEST(HostSync, Yolov5StepWithAutocastLossScalingChannelsLastAndCheckpointing) {
  StepCase c;
  c.autocast = c.scaler = c.channels_last = c.checkpoint = true;
  EXPECT_EQ(waits_in_one_step(c), "");
}

TEST(HostSync, AdamAndAdamWSteps) {
  for (OptimizerKind kind : {OptimizerKind::adam, OptimizerKind::adamw}) {
    StepCase c;
    c.optimizer = kind;
    c.scaler = true;
    EXPECT_EQ(waits_in_one_step(c), "") << (kind == OptimizerKind::adam ? "Adam" : "AdamW");
  }
}

TEST(HostSync, Yolov7StepWithTheOtaLoss) {
  StepCase c;
  c.cfg = "yolov7-tiny";
  c.ota = true;
  c.scaler = true;
  EXPECT_EQ(waits_in_one_step(c), "");
}

// --cuda-graph's step: what it captures must not wait (a wait is an error during capture), and what it
// does around the graph (copying the batch into static buffers, padding targets) neither.
TEST(HostSync, GraphStepAroundAndInsideTheGraph) {
  StepCase c;
  c.graph_step = true;
  c.scaler = true;
  EXPECT_EQ(waits_in_one_step(c), "");
}

// YOLOv7's P6 recipe (train_aux.py): the auxiliary head's OTA loss (IAuxDetect, always OTA).
TEST(HostSync, Yolov7W6StepWithTheAuxiliaryOtaLoss) {
  StepCase c;
  c.cfg = "yolov7-w6";
  c.img = 128;  // strides up to 64
  c.scaler = true;
  EXPECT_EQ(waits_in_one_step(c), "");
}

// On a GPU the check is CUDA's own: with sync debugging set to "error", any call that makes the host wait
// throws. One step first (lazy one-time set-up such as the loss's anchors on the device), then the checked
// step, with fp16 autocast and loss scaling as `kestrel train` on a GPU.
TEST(HostSync, CudaStepsRaiseNoSyncError) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const c10::Device cuda(c10::kCUDA, 0);
  StepCase yolov5;
  yolov5.autocast = yolov5.scaler = yolov5.channels_last = true;
  StepCase ota = yolov5;
  ota.cfg = "yolov7-tiny";
  ota.ota = true;
  StepCase graphed = yolov5;
  graphed.graph_step = true;
  for (const StepCase& c : {yolov5, ota, graphed}) {
    StepRig rig(c, cuda);
    rig.run();
    synchronize(cuda);
    {
      const CudaSyncErrors errors;
      // The check is on: a host read is an error here.
      EXPECT_THROW((void)at::ones({1}, cuda).sum().item<float>(), c10::Error);
      EXPECT_NO_THROW(rig.run()) << c.cfg << (c.ota ? " OTA" : "") << (c.graph_step ? " graph step" : "");
    }
    synchronize(cuda);
  }
}

// torch.optim's multi-tensor algorithm (the ablation's PyTorch baseline, --foreach-optimizer) reads the
// loss scaler's found_inf on the host to decide whether to step, as GradScaler.step does: the one wait
// the rule allows, and only there. Without a scaler it has none.
TEST(HostSync, ForeachOptimizerReadsFoundInfOnlyWithAScaler) {
  StepCase c;
  c.fused = false;
  EXPECT_EQ(waits_in_one_step(c), "");
  c.scaler = true;
  EXPECT_EQ(waits_in_one_step(c), "aten::_local_scalar_dense (in aten::item) x1 aten::item x1 ");
}

}  // namespace
}  // namespace kestrel::train
