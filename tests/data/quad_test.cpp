// --quad collate against hand-placed pixels and boxes, and through the loader (B -> B/4 images of 2x).
#include <gtest/gtest.h>

#include <thread>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "kestrel/core/error.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/data/image_files.h"
#include "kestrel/data/quad.h"
#include "test_support.h"

namespace kestrel::data {
namespace {

// Four 2x4 (H x W) images filled with 10, 20, 30, 40; image k has one box (class k) at centre (0.5, 0.25),
// size (0.2, 0.4); image 3 also a second box.
Batch four_images() {
  Batch b;
  b.images = at::empty({4, 3, 2, 4}, at::kByte);
  for (int64_t k = 0; k < 4; ++k) b.images[k].fill_(10 * (k + 1));
  b.targets = at::zeros({4, 2, 5});
  b.target_mask = at::zeros({4, 2}, at::kBool);
  for (int64_t k = 0; k < 4; ++k) {
    b.targets[k][0].copy_(at::tensor({float(k), 0.5f, 0.25f, 0.2f, 0.4f}));
    b.target_mask[k][0] = true;
  }
  b.targets[3][1].copy_(at::tensor({7.f, 0.1f, 0.9f, 0.1f, 0.1f}));
  b.target_mask[3][1] = true;
  b.meta.resize(4);
  return b;
}

TEST(Quad, StitchPlacesImagesAndBoxesInTheirQuadrants) {
  const Batch q = quad_collate(four_images(), {true});
  ASSERT_EQ(q.images.sizes(), (at::IntArrayRef{1, 3, 4, 8}));
  // i top-left, i+1 below it (rows 2-3), i+2 right of i (cols 4-7), i+3 bottom-right.
  EXPECT_EQ(q.images[0][0][0][0].item<int>(), 10);
  EXPECT_EQ(q.images[0][1][3][3].item<int>(), 20);
  EXPECT_EQ(q.images[0][2][0][4].item<int>(), 30);
  EXPECT_EQ(q.images[0][0][3][7].item<int>(), 40);
  ASSERT_EQ(q.target_mask.sizes(), (at::IntArrayRef{1, 8}));
  EXPECT_EQ(q.target_mask[0].sum().item<int>(), 5);
  EXPECT_TRUE(q.target_mask[0].narrow(0, 0, 5).all().item<bool>()) << "real rows first";
  EXPECT_EQ(q.boxes, 5);
  // (cx + dx) / 2, (cy + dy) / 2, w / 2, h / 2.
  const auto expect_row = [&](int r, std::vector<float> v) {
    EXPECT_TRUE(at::allclose(q.targets[0][r], at::tensor(v))) << "row " << r << ": " << q.targets[0][r];
  };
  expect_row(0, {0, 0.25f, 0.125f, 0.1f, 0.2f});
  expect_row(1, {1, 0.25f, 0.625f, 0.1f, 0.2f});
  expect_row(2, {2, 0.75f, 0.125f, 0.1f, 0.2f});
  expect_row(3, {3, 0.75f, 0.625f, 0.1f, 0.2f});
  expect_row(4, {7, 0.55f, 0.95f, 0.05f, 0.05f});
}

// Two groups of random images (odd sizes), one stitched and one upsampled: every pixel of both against
// upstream's torch.cat of the four images and ATen's upsample in double, truncated.
TEST(Quad, EveryPixelOfTwoGroupsAsUpstreamComputesThem) {
  const auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  Batch b;
  b.images = at::randint(0, 256, {8, 3, 5, 7}, gen, at::TensorOptions().dtype(at::kByte));
  b.targets = at::zeros({8, 1, 5});
  b.target_mask = at::zeros({8, 1}, at::kBool);
  b.meta.resize(8);
  for (const bool first_stitched : {true, false}) {
    const Batch q = quad_collate(b, {first_stitched, !first_stitched});
    ASSERT_EQ(q.images.sizes(), (at::IntArrayRef{2, 3, 10, 14}));
    for (int64_t g = 0; g < 2; ++g) {
      const int64_t i = 4 * g;
      const at::Tensor expected =
          (g == 0) == first_stitched
              ? at::cat({at::cat({b.images[i], b.images[i + 1]}, 1), at::cat({b.images[i + 2], b.images[i + 3]}, 1)}, 2)
              : at::upsample_bilinear2d(b.images[i].unsqueeze(0).to(at::kDouble), {10, 14}, false)[0].to(at::kByte);
      EXPECT_TRUE(at::equal(q.images[g], expected)) << "group " << g << (first_stitched ? ", group 0 stitched" : ", group 1 stitched");
    }
  }
}

TEST(Quad, UpsampleKeepsTheFirstImagesBoxes) {
  Batch b = four_images();
  b.images[0].copy_(at::arange(24).view({3, 2, 4}).to(at::kByte));
  const Batch q = quad_collate(b, {false});
  ASSERT_EQ(q.images.sizes(), (at::IntArrayRef{1, 3, 4, 8}));
  // Independent reference: bilinear (half-pixel centres) in double, truncated like upstream's .type(uint8).
  const at::Tensor ref = at::upsample_bilinear2d(b.images[0].unsqueeze(0).to(at::kDouble), {4, 8}, false)[0].to(at::kByte);
  EXPECT_TRUE(at::equal(q.images[0], ref));
  EXPECT_EQ(q.target_mask[0].sum().item<int>(), 1);
  EXPECT_TRUE(at::allclose(q.targets[0][0], at::tensor({0.f, 0.5f, 0.25f, 0.2f, 0.4f})));

  // Odd sizes and the whole byte range (255 next to 0 included): the same reference, pixel for pixel.
  Batch big;
  big.images = at::randint(0, 256, {4, 3, 5, 7}, at::make_generator<at::CPUGeneratorImpl>(5), at::TensorOptions().dtype(at::kByte));
  big.images[0][1].select(0, 2).fill_(255);
  big.images[0][1].select(0, 3).fill_(0);
  big.targets = at::zeros({4, 1, 5});
  big.target_mask = at::zeros({4, 1}, at::kBool);
  big.meta.resize(4);
  const at::Tensor big_ref = at::upsample_bilinear2d(big.images[0].unsqueeze(0).to(at::kDouble), {10, 14}, false)[0].to(at::kByte);
  EXPECT_TRUE(at::equal(quad_collate(big, {false}).images[0], big_ref));
}

TEST(Quad, LoaderGivesQuarterBatchesOfTwiceTheSize) {
  auto cfg = load_dataset_config("data/demo/demo.yaml");
  DatasetOptions d;
  d.img_size = 64;
  d.augment = true;
  d.seed = 3;
  auto ds = std::make_shared<const YoloDataset>(index_split(list_images(cfg.train, cfg.source), IndexOptions{cfg.nc, 2, false}), d);
  LoaderOptions o;
  o.batch_size = 8;
  o.workers = 2;
  o.quad = true;
  o.drop_last = true;
  DataLoader loader(ds, o);
  test::OpRecorder recorder;
  loader.start_epoch(0);
  int batches = 0;
  while (auto b = loader.next()) {
    EXPECT_EQ(b->images.sizes(), (at::IntArrayRef{2, 3, 128, 128}));
    EXPECT_EQ(b->targets.size(1), 4 * o.max_boxes);
    ++batches;
  }
  EXPECT_EQ(batches, 4);  // 32 images / 8
  // The collate runs in the worker threads, which dispatch allocations only: an ATen kernel there would
  // start an OpenMP team of its own in every worker.
  std::string kernels;
  for (const auto& call : recorder.calls())
    if (call.thread != std::this_thread::get_id() && call.op != "aten::empty" && call.op != "aten::empty_strided" &&
        call.op != "aten::is_pinned")  // a query, no kernel
      kernels += call.op + " ";
  EXPECT_EQ(kernels, "");
  EXPECT_THROW(quad_collate(four_images(), {true, false}), Error);
}

}  // namespace
}  // namespace kestrel::data
