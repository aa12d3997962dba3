// NMS's CUDA kernels (src/kestrel/eval/nms_kernels.cuh), run on the CPU by tests/core/cuda_emulator.h at
// the launch shapes of nms.cu, against the CPU path of nms_indices: the same kept boxes, bit for bit.
// (NmsCuda.MatchesCpu in nms_test.cpp compares on a real GPU, where there is one.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "kestrel/eval/nms.h"

#include "core/cuda_emulator.h"  // last: its macros rewrite what follows
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"  // CUDA idiom: unsigned threadIdx against int bounds
#include "kestrel/eval/nms_kernels.cuh"
#pragma GCC diagnostic pop

namespace kestrel::eval::detail {
namespace {

using cuda_emulator::launch;

// boxes [n, 4] xyxy float32 in clusters of 8 (IoUs spread over [0, 1)), with exact duplicates and boxes
// of zero width (IoU NaN: never suppresses).
at::Tensor clustered_boxes(uint32_t seed, int64_t n) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> b;
  float cx = 0, cy = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 8 == 0) cx = u(rng) * 640, cy = u(rng) * 640;
    const float w = 4 + u(rng) * 80, h = 4 + u(rng) * 80;
    const float x = cx + (u(rng) - 0.5f) * 20, y = cy + (u(rng) - 0.5f) * 20;
    if (i % 31 == 7) {
      const std::vector<float> previous(b.end() - 4, b.end());
      b.insert(b.end(), previous.begin(), previous.end());
    } else if (i % 29 == 3) {
      b.insert(b.end(), {x, y, x, y + h});
    } else {
      b.insert(b.end(), {x - w / 2, y - h / 2, x + w / 2, y + h / 2});
    }
  }
  return at::tensor(b).view({n, 4});
}

// greedy_keep_cuda's two launches, emulated. keep is pre-filled with `fill` and the mask with all-ones
// words, so a flag the kernels never write, or a mask word read without being written, shows.
std::vector<int64_t> emulated_kept(const at::Tensor& sorted_boxes, float threshold, int scan_threads, bool fill) {
  const int64_t n = sorted_boxes.size(0), words = (n + kBlockBoxes - 1) / kBlockBoxes;
  at::Tensor mask = at::full({n, words}, -1, at::kLong);
  at::Tensor keep = at::full({n}, fill, at::kBool);
  auto* mask_words = reinterpret_cast<uint64_t*>(mask.data_ptr<int64_t>());
  launch(dim3(static_cast<unsigned>(words), static_cast<unsigned>(words)), dim3(kBlockBoxes), 0, overlap_mask_kernel,
         sorted_boxes.data_ptr<float>(), n, words, threshold, mask_words);
  launch(dim3(1), dim3(static_cast<unsigned>(scan_threads)), static_cast<size_t>(words) * sizeof(uint64_t),
         greedy_scan_kernel, static_cast<const uint64_t*>(mask_words), n, words, keep.data_ptr<bool>());
  const at::Tensor kept = keep.nonzero().view(-1);
  return {kept.data_ptr<int64_t>(), kept.data_ptr<int64_t>() + kept.numel()};
}

// nms_indices on the CPU, visiting the boxes in their given order (scores strictly descending).
std::vector<int64_t> cpu_kept(const at::Tensor& boxes, double threshold) {
  const at::Tensor scores = at::arange(boxes.size(0), 0, -1, at::kFloat);
  const at::Tensor kept = nms_indices(boxes, scores, threshold);
  return {kept.data_ptr<int64_t>(), kept.data_ptr<int64_t>() + kept.numel()};
}

// Thresholds that are floats: nms.cpp's float_threshold leaves them as they are.
const std::vector<float> kThresholds{0.f, 0.25f, 0.5f, 0.75f};

TEST(NmsKernels, KeepWhatTheCpuKeepsAroundMaskWordBorders) {
  for (const int64_t n : {1, 2, 63, 64, 65, 128, 129, 300}) {
    const at::Tensor boxes = clustered_boxes(static_cast<uint32_t>(n), n);
    for (const float t : kThresholds) {
      const std::vector<int64_t> want = cpu_kept(boxes, t);
      const std::string where = std::to_string(n) + " boxes, threshold " + std::to_string(t);
      EXPECT_EQ(emulated_kept(boxes, t, kScanThreads, false), want) << where;
      EXPECT_EQ(emulated_kept(boxes, t, kScanThreads, true), want) << where;
      if (n > 2 && t > 0) {
        EXPECT_GT(want.size(), 1u) << where;
      }
      if (n > 64) {
        EXPECT_LT(want.size(), static_cast<size_t>(n)) << where << ": nothing suppressed";
      }
    }
  }
}

// More mask words than scan threads: the scan's strided OR loop, at the launch shape (kScanThreads = 256
// threads need 16385 boxes) and with the fewest threads the kernel takes (64: one per row of a block).
TEST(NmsKernels, ScanWithMoreWordsThanThreads) {
  const int64_t n = 70 * kBlockBoxes - 5;
  const at::Tensor boxes = clustered_boxes(11, n);
  for (const float t : {0.25f, 0.5f})
    EXPECT_EQ(emulated_kept(boxes, t, kBlockBoxes, false), cpu_kept(boxes, t)) << "threshold " << t;
  const int64_t large = (kScanThreads + 2) * kBlockBoxes - 9;
  const at::Tensor many = clustered_boxes(12, large);
  EXPECT_EQ(emulated_kept(many, 0.5f, kScanThreads, false), cpu_kept(many, 0.5f)) << large << " boxes";
}

// Suppression across blocks: 130 copies of one box keep only the first; boxes far apart all stay.
TEST(NmsKernels, HandDerivedCases) {
  const at::Tensor same = at::tensor({10.f, 10.f, 50.f, 60.f}).repeat({130, 1});
  EXPECT_EQ(emulated_kept(same, 0.5f, kScanThreads, true), std::vector<int64_t>{0});
  const at::Tensor x0 = at::arange(130, at::kFloat) * 100;
  const at::Tensor apart = at::stack({x0, at::zeros_like(x0), x0 + 50, at::full_like(x0, 50)}, 1).contiguous();
  EXPECT_EQ(emulated_kept(apart, 0.f, kScanThreads, false).size(), 130u);
  // Box 1 overlaps 0 (IoU 0.6 > 0.5) and goes; box 2 overlaps only 1 (IoU 0.6), so it stays:
  // greedy NMS, not "suppressed by any higher box".
  const at::Tensor chain = at::tensor({0.f, 0.f, 100.f, 10.f, 25.f, 0.f, 125.f, 10.f, 50.f, 0.f, 150.f, 10.f}).view({3, 4});
  EXPECT_EQ(emulated_kept(chain, 0.5f, kScanThreads, false), (std::vector<int64_t>{0, 2}));
}

}  // namespace
}  // namespace kestrel::eval::detail
