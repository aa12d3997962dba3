// eval::validate on other devices and layouts gives the CPU's predictions: the same images, the same
// number of detections, and the same scores and boxes (sorted) within the arithmetic's rounding. The CPU
// test checks the channels-last input path (training validates its channels-last EMA model so); the CUDA
// test runs the whole pass there (the device NMS, pinned batches, fp16 autocast).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "kestrel/data/dataset_config.h"
#include "kestrel/eval/validator.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/yolo_model.h"
#include "kestrel/train/split_loader.h"
#include "kestrel/train/train_step.h"
#include "test_support.h"

namespace kestrel::eval {
namespace {

struct Pass {
  ValidationResult result;
  std::vector<std::array<double, 5>> detections;  // (score, x, y, w, h), by score descending
};

// An untrained yolov5n (seeded) over five demo images at 160 px. Its initial objectness (the head's prior,
// about 0.001 at stride 8) times its class scores stays under val.py's conf 0.001, so the threshold is 1e-6.
Pass validate_on(const c10::Device& device, bool channels_last, bool half) {
  test::TempDir dir;
  const data::DatasetConfig cfg = data::load_dataset_config(test::demo_subset(dir, 5));
  torch::manual_seed(0);
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), cfg.nc);
  {
    // At its initialisation the network's features fade to nearly nothing by the head (BN's running
    // statistics are 0 and 1), which then scores every box by its biases alone: sorted detections could
    // not be paired. One training-mode pass with BN momentum 1 sets the statistics to a batch's, so that
    // features reach the head and scores vary from box to box (seeded: alike on every device).
    torch::NoGradGuard no_grad;
    for (const auto& m : model->modules()) {
      if (auto* bn = dynamic_cast<torch::nn::BatchNorm2dImpl*>(m.get())) bn->options.momentum(1.0);
    }
    model->train();
    (void)model->forward(at::rand({4, 3, 160, 160}));
  }
  model->to(device);
  if (channels_last) train::to_channels_last(*model);
  train::ValLoaderOptions l;
  l.img_size = 160;
  l.batch_size = 2;
  l.workers = 1;
  l.nc_for_check = cfg.nc;
  l.pin_memory = device.is_cuda();
  const train::SplitLoader split = train::make_val_loader(cfg, "val", l);
  ValidationOptions v;
  v.save_json = true;
  v.nms.conf_thres = 1e-6;
  v.half = half;
  v.channels_last = channels_last;
  Pass p;
  p.result = validate(*model, *split.loader, *split.dataset, device, cfg.nc, v);
  for (const auto& d : p.result.predictions) p.detections.push_back({d.score, d.box.x, d.box.y, d.box.w, d.box.h});
  std::sort(p.detections.begin(), p.detections.end(), [](const auto& a, const auto& b) { return a[0] > b[0]; });
  return p;
}

// The `top` most confident detections agree in score within score_tol and in box within box_tol pixels
// (near-equal scores may swap places, so boxes are compared only where the scores are well apart).
void expect_same_detections(const Pass& a, const Pass& b, double score_tol, double box_tol, size_t top) {
  EXPECT_EQ(a.result.images, b.result.images);
  EXPECT_EQ(a.result.labels, b.result.labels);
  ASSERT_GE(a.detections.size(), top) << "too few detections for the comparison to mean anything";
  const double count_diff = std::abs(static_cast<double>(a.detections.size()) - static_cast<double>(b.detections.size()));
  EXPECT_LE(count_diff, 0.02 * static_cast<double>(a.detections.size()));  // conf 0.001 and NMS borders may differ
  ASSERT_GE(b.detections.size(), top);
  size_t boxes_compared = 0;
  for (size_t i = 0; i < top; ++i) {
    EXPECT_NEAR(a.detections[i][0], b.detections[i][0], score_tol) << "detection " << i;
    const bool isolated = (i == 0 || a.detections[i - 1][0] - a.detections[i][0] > 4 * score_tol) &&
                          (i + 1 == top || a.detections[i][0] - a.detections[i + 1][0] > 4 * score_tol);
    if (!isolated) continue;
    ++boxes_compared;
    for (int k = 1; k < 5; ++k) EXPECT_NEAR(a.detections[i][k], b.detections[i][k], box_tol) << "detection " << i;
  }
  EXPECT_GE(boxes_compared, top / 5) << "scores too close together: hardly a box was compared";
  EXPECT_NEAR(a.result.metrics.map50, b.result.metrics.map50, 0.01);
}

TEST(ValidatorDevice, CpuChannelsLastMatchesContiguous) {
  const c10::Device cpu(c10::kCPU);
  const Pass plain = validate_on(cpu, false, false);
  const Pass nhwc = validate_on(cpu, true, false);
  // Float32 summed in another order: scores within a few units of the JSON's 5th decimal, boxes (in
  // original-image pixels, 4x the input's) within 0.05 px.
  expect_same_detections(plain, nhwc, 5e-5, 0.05, 100);
}

// This untrained (BN-calibrated) model magnifies rounding about 20-fold: weights perturbed by float32's
// rounding move its top scores by up to 2e-5, by TF32's (10-bit mantissas) 0.009, rounded to fp16 0.022.
TEST(ValidatorDevice, CudaMatchesCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const Pass cpu = validate_on(c10::Device(c10::kCPU), false, false);
  {
    // Float32 on both sides (LibTorch lets cuDNN use TF32 by default): the CPU's numbers up to the order
    // of summation. 5e-4 leaves about 16 of the top 30 scores far enough apart to pair their boxes.
    const test::ExactCudnn exact;
    const Pass cuda = validate_on(c10::Device(c10::kCUDA, 0), false, false);
    expect_same_detections(cpu, cuda, 5e-4, 0.5, 30);
  }
  // Training's configuration on a GPU, a channels-last model validated under fp16 autocast: the same
  // images, labels and number of detections (every image at max_det), the same mAP50 within 0.01, and
  // the sorted top scores within 20 % (+ 1e-3), fp16's rounding magnified as above. The differences are
  // printed so that a GPU run calibrates these bounds.
  const Pass fast = validate_on(c10::Device(c10::kCUDA, 0), true, true);
  EXPECT_EQ(fast.result.images, cpu.result.images);
  EXPECT_EQ(fast.result.labels, cpu.result.labels);
  EXPECT_EQ(fast.detections.size(), cpu.detections.size());
  EXPECT_NEAR(fast.result.metrics.map50, cpu.result.metrics.map50, 0.01);
  ASSERT_GE(fast.detections.size(), 30u);
  double largest = 0;
  for (size_t i = 0; i < 30; ++i) {
    const double want = cpu.detections[i][0], got = fast.detections[i][0];
    largest = std::max(largest, std::abs(got - want));
    EXPECT_NEAR(got, want, 0.2 * want + 1e-3) << "detection " << i;
  }
  std::printf("fp16 + channels-last on CUDA against the CPU: largest top-30 score difference %.4g\n", largest);
}

}  // namespace
}  // namespace kestrel::eval
