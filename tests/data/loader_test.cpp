// The augmenting dataset and the loader on the demo data: every sample once per epoch, determinism
// for a seed whatever the worker count, collation by hand, validation letterbox mapping back.
#include <gtest/gtest.h>

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <set>
#include <thread>

#include <ATen/ATen.h>

#include "kestrel/core/error.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/data/image_files.h"
#include "kestrel/data/loader.h"
#include "data/data_test_support.h"
#include "test_support.h"

namespace kestrel::data {
namespace {

std::shared_ptr<const YoloDataset> demo(bool augment, int img = 128, bool rect = false, int batch = 4) {
  auto cfg = load_dataset_config("data/demo/demo.yaml");
  auto images = list_images(augment ? cfg.train : cfg.val, cfg.source);
  DatasetOptions o;
  o.img_size = img;
  o.augment = augment;
  o.rect = rect;
  o.batch_size = batch;
  o.pad = rect ? 0.5 : 0.0;
  o.seed = 7;
  return std::make_shared<const YoloDataset>(index_split(images, IndexOptions{cfg.nc, 2, false}), o);
}

std::vector<Batch> epoch(const std::shared_ptr<const YoloDataset>& ds, LoaderOptions o, int e) {
  DataLoader loader(ds, o);
  loader.start_epoch(e);
  std::vector<Batch> out;
  while (auto b = loader.next()) out.push_back(std::move(*b));
  return out;
}

// Each worker builds whole batches, so the bound on batches ahead must leave every worker one to build:
// by default two per worker (PyTorch's prefetch_factor). With 3 workers and nothing taken, exactly 6
// batches are built (a fixed bound of 4 kept 16 workers of a GPU machine to 4 busy ones).
TEST(Loader, PrefetchDefaultsToTwoBatchesPerWorker) {
  auto ds = demo(false, 64, false, 2);  // the 16 val images
  LoaderOptions o;
  o.batch_size = 2;  // 8 batches
  o.workers = 3;
  DataLoader loader(ds, o);
  EXPECT_EQ(loader.prefetch(), 6);
  loader.start_epoch(0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (loader.batches_ready() < 6 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // time to overshoot, if it would
  EXPECT_EQ(loader.batches_ready(), 6u);
  int64_t taken = 0;
  while (loader.next()) ++taken;
  EXPECT_EQ(taken, 8);
  o.prefetch = 1;
  EXPECT_EQ(DataLoader(ds, o).prefetch(), 1);
}

// Workers dispatch no ATen kernel, only allocations: a kernel over ATen's grain size (zeroing a batch's
// 64 x 400 x 5 targets) runs as an OpenMP region, which gives every worker thread its own team of
// threads that spin after each batch: 16 workers x 15 threads on a 16-core machine. (--quad's stitching
// still uses ATen kernels.)
TEST(Loader, WorkersDispatchOnlyAllocations) {
  auto ds = demo(true, 128);
  LoaderOptions o;
  o.batch_size = 4;
  o.workers = 2;
  test::OpRecorder recorder;
  ASSERT_FALSE(epoch(ds, o, 0).empty());
  std::set<std::string> in_workers;
  for (const auto& call : recorder.calls())
    if (call.thread != std::this_thread::get_id()) in_workers.insert(call.op);
  EXPECT_TRUE(in_workers.count("aten::empty")) << "the recorder saw no op of the workers";
  std::string kernels;
  for (const auto& op : in_workers)
    if (op != "aten::empty" && op != "aten::empty_strided") kernels += op + " ";
  EXPECT_EQ(kernels, "");
}

// --image-weights: draws with replacement in proportion to the weights, seeded by the epoch.
TEST(Loader, SampleWeightsDrawInProportion) {
  auto ds = demo(true, 64);
  LoaderOptions o;
  o.workers = 1;
  o.prefetch = 1;
  DataLoader loader(ds, o);
  std::vector<double> w(ds->size(), 0.0);
  w[1] = 1.0;
  w[3] = 3.0;
  loader.set_sample_weights(w);
  int64_t ones = 0, threes = 0;
  for (int e = 0; e < 40; ++e) {
    loader.start_epoch(e);
    ASSERT_EQ(loader.epoch_order().size(), ds->size());
    for (int64_t i : loader.epoch_order()) {
      ASSERT_TRUE(i == 1 || i == 3) << "drew image " << i << " of weight 0";
      (i == 1 ? ones : threes) += 1;
    }
  }
  const double share = static_cast<double>(threes) / static_cast<double>(ones + threes);  // expected 0.75
  EXPECT_NEAR(share, 0.75, 0.05) << ones << " x image 1, " << threes << " x image 3";
  loader.start_epoch(5);
  const auto again = loader.epoch_order();
  loader.start_epoch(6);
  EXPECT_NE(loader.epoch_order(), again);
  loader.start_epoch(5);
  EXPECT_EQ(loader.epoch_order(), again);  // seeded by (seed, epoch)
  w.pop_back();
  EXPECT_THROW(loader.set_sample_weights(w), Error);
  EXPECT_THROW(loader.set_sample_weights(std::vector<double>(ds->size(), 0.0)), Error);
  std::vector<double> negative(ds->size(), 1.0);
  negative[0] = -1;
  EXPECT_THROW(loader.set_sample_weights(negative), Error);
  loader.set_sample_weights({});  // back to permutations: every sample once
  loader.start_epoch(7);
  auto order = loader.epoch_order();
  std::sort(order.begin(), order.end());
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], static_cast<int64_t>(i));
}

// Core binding: contiguous slices of the allowed cores per local rank, disjoint between ranks.
TEST(Loader, RanksTakeDisjointSlicesOfTheAllowedCores) {
  std::vector<int> sixteen(16);
  std::iota(sixteen.begin(), sixteen.end(), 0);
  EXPECT_EQ(rank_cpu_cores(sixteen, 0, 1), sixteen);
  EXPECT_EQ(rank_cpu_cores(sixteen, 0, 2), std::vector<int>({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(rank_cpu_cores(sixteen, 1, 2), std::vector<int>({8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(rank_cpu_cores(sixteen, 2, 3), std::vector<int>({10, 11, 12, 13, 14}));  // 16 / 3 = 5 each, core 15 unused
  EXPECT_EQ(rank_cpu_cores({0, 2, 4, 6, 9}, 1, 2), std::vector<int>({4, 6}));        // the allowed set, not 0..n-1
  EXPECT_EQ(rank_cpu_cores({5, 7}, 3, 4), std::vector<int>({7}));                    // fewer cores than ranks
  EXPECT_TRUE(rank_cpu_cores({}, 0, 1).empty());
  EXPECT_THROW(rank_cpu_cores(sixteen, 2, 2), Error);
  EXPECT_FALSE(allowed_cpu_cores().empty());
}

// A core the process may not use (here one beyond the machine's) cannot be bound: the workers run unbound,
// the epoch is whole, and a warning says so instead of the binding silently not happening.
TEST(Loader, UnbindableCoreIsReportedAndTheEpochStillRuns) {
  auto ds = demo(true, 64);
  LoaderOptions o;
  o.batch_size = 8;
  o.workers = 2;
  o.cpu_cores = {CPU_SETSIZE - 1};
  testing::internal::CaptureStderr();
  const auto batches = epoch(ds, o, 0);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(batches.size(), 4u);
  EXPECT_NE(err.find("could not be bound to CPU core " + std::to_string(CPU_SETSIZE - 1)), std::string::npos) << err;
}

TEST(Loader, EverySampleExactlyOncePerEpoch) {
  auto ds = demo(true, 64);
  LoaderOptions o;
  o.batch_size = 5;  // 32 samples: 6 full batches and one of 2
  o.workers = 3;
  std::vector<int64_t> seen;
  auto batches = epoch(ds, o, 0);
  ASSERT_EQ(batches.size(), 7u);
  for (size_t i = 0; i < batches.size(); ++i) {
    EXPECT_EQ(batches[i].index, static_cast<int64_t>(i));
    for (const auto& m : batches[i].meta) seen.push_back(m.index);
  }
  EXPECT_EQ(batches.back().images.size(0), 2);
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> all(32);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(seen, all);
}

TEST(Loader, RanksSplitTheEpochWithoutOverlap) {
  auto ds = demo(true, 64);
  std::multiset<int64_t> seen;
  for (int rank = 0; rank < 3; ++rank) {  // 32 samples over 3 ranks: 11 each, one wrapped duplicate in total
    LoaderOptions o;
    o.batch_size = 4;
    o.workers = 1;
    o.rank = rank;
    o.world_size = 3;
    DataLoader loader(ds, o);
    loader.start_epoch(1);
    EXPECT_EQ(loader.epoch_order().size(), 11u);
    seen.insert(loader.epoch_order().begin(), loader.epoch_order().end());
  }
  EXPECT_EQ(seen.size(), 33u);
  for (int64_t i = 0; i < 32; ++i) EXPECT_GE(seen.count(i), 1u) << i;
}

TEST(Loader, DeterministicForASeedWhateverTheWorkerCount) {
  auto ds = demo(true, 64);
  LoaderOptions one, three;
  one.batch_size = three.batch_size = 8;
  one.workers = 1;
  three.workers = 3;
  auto a = epoch(ds, one, 2), b = epoch(ds, three, 2), c = epoch(ds, one, 3);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::equal(a[i].images, b[i].images)) << i;
    EXPECT_TRUE(at::equal(a[i].targets, b[i].targets)) << i;
    EXPECT_TRUE(at::equal(a[i].target_mask, b[i].target_mask)) << i;
  }
  EXPECT_FALSE(at::equal(a[0].images, c[0].images));  // another epoch, other augmentations
}

TEST(Loader, TrainingBatchesHaveBoxesInsideTheImage) {
  auto ds = demo(true, 128);
  LoaderOptions o;
  o.batch_size = 8;
  o.workers = 2;
  auto batches = epoch(ds, o, 0);
  int64_t boxes = 0;
  for (const auto& b : batches) {
    EXPECT_EQ(b.images.sizes().vec(), (std::vector<int64_t>{b.images.size(0), 3, 128, 128}));
    at::Tensor t = b.targets.index({b.target_mask});  // [n, 5]
    boxes += t.size(0);
    EXPECT_EQ(t.size(0), b.boxes);
    if (!t.size(0)) continue;
    EXPECT_TRUE((t.select(1, 0) >= 0).all().item<bool>() && (t.select(1, 0) < 80).all().item<bool>());
    at::Tensor x1 = t.select(1, 1) - t.select(1, 3) / 2, x2 = t.select(1, 1) + t.select(1, 3) / 2;
    EXPECT_GE(x1.min().item<float>(), -1e-5f);
    EXPECT_LE(x2.max().item<float>(), 1 + 1e-5f);
    EXPECT_GE((t.select(1, 3) * 128).min().item<float>(), 1.0f - 1e-4f);  // at least a pixel wide
    // padding rows are zero
    EXPECT_EQ(b.targets.index({b.target_mask.logical_not()}).abs().sum().item<float>(), 0.0f);
  }
  EXPECT_GT(boxes, 100);  // 32 mosaics of a dataset with 7.8 boxes per image keep most of their boxes
}

// Upstream's --rect training: no mosaic (a mosaic is img_size square), each image letterboxed to its
// batch's rectangle, then augmented. With three ranks each rank's batch i has the shape of total batch i
// (the ranks take every third image of the unshuffled order).
TEST(Loader, RectTrainingBatchesTakeTheirBatchShapeWithoutMosaic) {
  auto ds = demo(true, 128, /*rect=*/true, /*batch=*/4);
  LoaderOptions o;
  o.batch_size = 4;
  o.workers = 2;
  o.shuffle = false;
  const auto batches = epoch(ds, o, 0);
  ASSERT_EQ(batches.size(), 8u);
  int rectangular = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    const cv::Size shape = ds->batch_shape(i);
    EXPECT_EQ(batches[i].images.size(2), shape.height) << i;
    EXPECT_EQ(batches[i].images.size(3), shape.width) << i;
    rectangular += shape.height != shape.width;
    const at::Tensor t = batches[i].targets.index({batches[i].target_mask});
    if (t.size(0) == 0) continue;
    EXPECT_GE((t.select(1, 1) - t.select(1, 3) / 2).min().item<float>(), -1e-5f) << i;
    EXPECT_LE((t.select(1, 2) + t.select(1, 4) / 2).max().item<float>(), 1 + 1e-5f) << i;
  }
  EXPECT_GT(rectangular, 0);  // the demo's photos are landscape: mosaics would all be 128 x 128
  for (int rank = 0; rank < 3; ++rank) {
    LoaderOptions r = o;
    r.batch_size = 2;  // a total batch of 6 on 3 ranks
    r.world_size = 3;
    r.rank = rank;
    auto ds6 = demo(true, 128, true, 6);
    const auto shards = epoch(ds6, r, 0);
    ASSERT_EQ(shards.size(), 6u);  // 32 images: 11 per rank (rank 2's last one wraps around to image 0)
    for (size_t i = 0; i < shards.size(); ++i) {
      // Total batch i, except a batch of wrapped images only: the shape of their own batch (0).
      const size_t total_batch = static_cast<size_t>(shards[i].meta[0].index) / 6;
      EXPECT_EQ(total_batch, i + 1 < shards.size() || rank < 2 ? i : 0) << rank << " " << i;
      EXPECT_EQ(shards[i].images.size(2), ds6->batch_shape(total_batch).height) << rank << " " << i;
      EXPECT_EQ(shards[i].images.size(3), ds6->batch_shape(total_batch).width) << rank << " " << i;
    }
  }
}

TEST(Collate, ChannelsBoxesClippingAndCapacityByHand) {
  Sample s;
  s.image = cv::Mat(64, 32, CV_8UC3, cv::Scalar(1, 2, 3));  // B=1, G=2, R=3; 32 wide, 64 high
  s.boxes = {{5, 8, 16, 24, 48},      // inside: cx 16/32, cy 32/64, w 16/32, h 32/64
             {6, -8, 60, 8, 80},      // clipped to x 0..8, y 60..63.999
             {7, 10, 10, 10.5f, 20},  // under a pixel wide: dropped
             {8, 0, 0, 4, 4}};        // beyond capacity 2: counted as dropped
  Batch b = collate({s}, {SampleMeta{}}, 2, false);
  EXPECT_EQ(b.images[0][0][0][0].item<int>(), 3);  // R plane first
  EXPECT_EQ(b.images[0][2][63][31].item<int>(), 1);
  auto t = b.targets[0];
  EXPECT_FLOAT_EQ(t[0][0].item<float>(), 5);
  EXPECT_FLOAT_EQ(t[0][1].item<float>(), 0.5f);
  EXPECT_FLOAT_EQ(t[0][2].item<float>(), 0.5f);
  EXPECT_FLOAT_EQ(t[0][3].item<float>(), 0.5f);
  EXPECT_FLOAT_EQ(t[0][4].item<float>(), 0.5f);
  EXPECT_FLOAT_EQ(t[1][0].item<float>(), 6);
  EXPECT_NEAR(t[1][1].item<float>(), 4.0f / 32, 1e-6);
  EXPECT_NEAR(t[1][3].item<float>(), 8.0f / 32, 1e-6);
  EXPECT_NEAR(t[1][2].item<float>(), (60 + 63.999f) / 2 / 64, 1e-5);
  EXPECT_EQ(b.boxes, 2);
  EXPECT_EQ(b.dropped_boxes, 1);
  EXPECT_TRUE(b.target_mask[0][0].item<bool>() && b.target_mask[0][1].item<bool>());
  // Validation (min 0 px) keeps the sub-pixel box too.
  Batch all = collate({s}, {SampleMeta{}}, 3, false, 0.f);
  EXPECT_EQ(all.boxes, 3);
  EXPECT_FLOAT_EQ(all.targets[0][2][0].item<float>(), 7);
  EXPECT_EQ(all.dropped_boxes, 1);
}

// A box reaching the bottom-right corner: YOLOv5 clips it to size - 1e-3 (xyxy2xywhn(clip=True, eps=1e-3)),
// YOLOv7 keeps the size (its __getitem__ converts without a clip; its augmentations clip to [0, size]).
TEST(Collate, EdgeMarginIsYolov5sClipOrNone) {
  const Sample s{cv::Mat(64, 32, CV_8UC3, cv::Scalar(0, 0, 0)), {{0, 16, 32, 32, 64}}, {}};
  std::vector<float> widths;
  for (float margin : {1e-3f, 0.f}) {
    BatchWriter writer(1, 2, false, 1.f, margin);
    writer.add(s, SampleMeta{});
    const Batch b = writer.finish();
    const float x2 = 32 - margin, y2 = 64 - margin;  // float32, as upstream's tensors
    EXPECT_EQ(b.targets[0][0][1].item<float>(), (16 + x2) / 2 / 32) << margin;
    EXPECT_EQ(b.targets[0][0][2].item<float>(), (32 + y2) / 2 / 64) << margin;
    EXPECT_EQ(b.targets[0][0][3].item<float>(), (x2 - 16) / 32) << margin;
    EXPECT_EQ(b.targets[0][0][4].item<float>(), (y2 - 32) / 64) << margin;
    widths.push_back(b.targets[0][0][3].item<float>());
  }
  EXPECT_EQ(widths[1], 0.5f);  // YOLOv7: exactly half the image
  EXPECT_LT(widths[0], widths[1]);
}

// The loader picks the margin by recipe: a label covering a whole (unaugmented) image ends at 1 - 1e-3/64
// under YOLOv5's rule and exactly at 1 under YOLOv7's.
TEST(Loader, EdgeMarginFollowsTheRecipe) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("images"));
  std::filesystem::create_directories(dir.file("labels"));
  test::write_png(dir.file("images/a.png"), cv::Mat(64, 64, CV_8UC3, cv::Scalar(90, 90, 90)));
  test::write_file(dir.file("labels/a.txt"), "3 0.5 0.5 1 1\n");
  const auto images = list_images({dir.file("images")}, "");
  std::vector<float> right_edges;
  for (Dialect dialect : {Dialect::yolov5, Dialect::yolov7}) {
    DatasetOptions d;
    d.img_size = 64;
    d.augment = false;
    d.dialect = dialect;
    auto ds = std::make_shared<const YoloDataset>(index_split(images, IndexOptions{80, 1, false}), d);
    LoaderOptions o;
    o.batch_size = 1;
    o.workers = 1;
    o.shuffle = false;
    const auto batches = epoch(ds, o, 0);
    ASSERT_EQ(batches.size(), 1u);
    const at::Tensor t = batches[0].targets.index({batches[0].target_mask});  // [1, 5]
    ASSERT_EQ(t.size(0), 1);
    right_edges.push_back((t[0][1] + t[0][3] / 2).item<float>());
  }
  const float x2 = 64 - 1e-3f;  // float32, as upstream's clip
  EXPECT_EQ(right_edges[0], (0 + x2) / 2 / 64 + (x2 - 0) / 64 / 2);
  EXPECT_LT(right_edges[0], 1.f);
  EXPECT_EQ(right_edges[1], 1.f);
}

TEST(Collate, WriterTakesSamplesOneAtATimeAndChecksTheCount) {
  Sample a{cv::Mat(8, 6, CV_8UC3, cv::Scalar(10, 20, 30)), {{1, 0, 0, 3, 4}}, {}};
  Sample b{cv::Mat(8, 6, CV_8UC3, cv::Scalar(40, 50, 60)), {}, {}};
  BatchWriter writer(2, 4, false);
  SampleMeta first;
  first.index = 7;
  writer.add(a, first);
  writer.add(b, SampleMeta{});
  EXPECT_THROW(writer.add(b, SampleMeta{}), Error);  // a third sample for a batch of 2
  const Batch batch = writer.finish();
  ASSERT_EQ(batch.images.sizes(), (at::IntArrayRef{2, 3, 8, 6}));
  EXPECT_EQ(batch.images[1][0][7][5].item<int>(), 60);  // second image, R plane
  EXPECT_EQ(batch.images[0][2][0][0].item<int>(), 10);  // first image, B plane
  ASSERT_EQ(batch.meta.size(), 2u);
  EXPECT_EQ(batch.meta[0].index, 7);
  EXPECT_EQ(batch.boxes, 1);

  // The writer starts the next batch from zero.
  writer.add(b, SampleMeta{});
  writer.add(b, SampleMeta{});
  const Batch second = writer.finish();
  EXPECT_EQ(second.boxes, 0);
  EXPECT_EQ(second.dropped_boxes, 0);
  EXPECT_EQ(second.meta.size(), 2u);
  EXPECT_EQ(second.images[0][2][0][0].item<int>(), 40);

  BatchWriter short_of_one(2, 4, false);
  short_of_one.add(a, SampleMeta{});
  EXPECT_THROW(short_of_one.finish(), Error);
  Sample other_size{cv::Mat(6, 6, CV_8UC3), {}, {}};
  EXPECT_THROW(short_of_one.add(other_size, SampleMeta{}), Error);
  EXPECT_THROW(BatchWriter(0, 4, false), Error);
}

TEST(Collate, TrimTargetsKeepsEveryRealBoxInFewShapes) {
  Batch b;
  b.targets = at::arange(2 * 100 * 5, at::kFloat).view({2, 100, 5});
  b.target_mask = at::zeros({2, 100}, at::kBool);
  b.target_mask[0].slice(0, 0, 3).fill_(true);   // image 0: 3 boxes
  b.target_mask[1].slice(0, 0, 40).fill_(true);  // image 1: 40 boxes -> rows rounded up to 64
  const at::Tensor before = b.targets.clone();
  trim_targets(b, 32);
  ASSERT_EQ(b.targets.size(1), 64);
  EXPECT_EQ(b.target_mask.sum().item<int64_t>(), 43);  // no real box lost
  EXPECT_TRUE(at::equal(b.targets, before.slice(1, 0, 64)));
  trim_targets(b, 1000);  // never beyond the capacity it has
  EXPECT_EQ(b.targets.size(1), 64);
  b.target_mask.zero_();
  trim_targets(b, 8);  // no boxes at all: one (padding) row keeps shapes non-empty
  EXPECT_EQ(b.targets.size(1), 8);
}

TEST(ValidationDataset, RectShapesAndMappingBackToTheOriginal) {
  auto ds = demo(false, 160, true, 4);
  for (size_t b = 0; b < 4; ++b) {
    cv::Size shape = ds->batch_shape(b);
    EXPECT_EQ(shape.width % 32, 0);
    EXPECT_EQ(shape.height % 32, 0);
    EXPECT_EQ(std::max(shape.width, shape.height), 160 + 32) << b;  // the long side: ceil(160/32 + 0.5) * 32
  }
  for (size_t i = 0; i < ds->size(); ++i) {
    SampleMeta meta;
    Sample s = ds->get(i, 0, &meta);
    EXPECT_EQ(s.image.size(), ds->batch_shape(i / 4));
    const auto& rec = ds->records()[i];
    ASSERT_EQ(s.boxes.size(), rec.rows.size());
    for (size_t k = 0; k < s.boxes.size(); ++k) {
      // letterboxed box -> original pixels must give back the label
      const double x1 = (s.boxes[k].x1 - meta.pad.x) / meta.ratio.x, y2 = (s.boxes[k].y2 - meta.pad.y) / meta.ratio.y;
      const auto& r = rec.rows[k].box;
      EXPECT_NEAR(x1, (r[1] - r[3] / 2) * meta.original.width, 0.5);
      EXPECT_NEAR(y2, (r[2] + r[4] / 2) * meta.original.height, 0.5);
    }
  }
}

TEST(ValidationDataset, RamCacheGivesTheSameSamples) {
  auto cfg = load_dataset_config("data/demo/demo.yaml");
  auto index = index_split(list_images(cfg.val, cfg.source), IndexOptions{cfg.nc, 2, false});
  DatasetOptions o;
  o.img_size = 96;
  o.augment = false;
  YoloDataset plain(index, o);
  o.cache_ram = true;
  YoloDataset cached(index, o);
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < plain.size(); ++i)
      EXPECT_EQ(cv::norm(plain.get(i, 0).image, cached.get(i, 0).image, cv::NORM_INF), 0.0) << i;
}

}  // namespace
}  // namespace kestrel::data

#include <torch/cuda.h>

#include <ATen/DeviceAccelerator.h>

#include "kestrel/core/device.h"
#include "kestrel/data/device_prefetcher.h"

namespace kestrel::data {
namespace {

// The prefetcher hands out the loader's batches in order, normalised, on the target device.
void check_prefetcher(const c10::Device& device) {
  auto ds = demo(true, 64);
  LoaderOptions o;
  o.batch_size = 8;
  o.workers = 2;
  o.pin_memory = device.is_cuda();  // as training: asynchronous copies from pinned batches
  auto expected = epoch(ds, o, 4);
  if (o.pin_memory) {
    ASSERT_TRUE(expected.at(0).images.is_pinned());
  }
  DataLoader loader(ds, o);
  loader.start_epoch(4);
  DevicePrefetcher prefetcher(loader, device, /*channels_last=*/true);
  size_t n = 0;
  while (auto b = prefetcher.next()) {
    ASSERT_LT(n, expected.size());
    EXPECT_EQ(b->images.device(), device);
    EXPECT_EQ(b->images.scalar_type(), at::kFloat);
    EXPECT_TRUE(b->images.is_contiguous(at::MemoryFormat::ChannelsLast));
    // uint8 v becomes v / 255
    EXPECT_TRUE(at::allclose(b->images.cpu(), expected[n].images.to(at::kFloat) / 255.0));
    EXPECT_TRUE(at::equal(b->targets.cpu(), expected[n].targets));
    EXPECT_TRUE(at::equal(b->target_mask.cpu(), expected[n].target_mask));
    EXPECT_EQ(b->boxes, expected[n].boxes);
    ASSERT_EQ(b->meta.size(), expected[n].meta.size());
    for (size_t k = 0; k < b->meta.size(); ++k) EXPECT_EQ(b->meta[k].index, expected[n].meta[k].index);
    ++n;
  }
  EXPECT_EQ(n, expected.size());
  EXPECT_FALSE(prefetcher.next().has_value());
  // With trimming (as the trainer uses it): the loader's batches narrowed by trim_targets.
  loader.start_epoch(4);
  DevicePrefetcher trimming(loader, device, /*channels_last=*/false, /*trim_multiple=*/32);
  for (size_t i = 0; i < expected.size(); ++i) {
    auto b = trimming.next();
    ASSERT_TRUE(b.has_value());
    Batch ref = expected[i];
    trim_targets(ref, 32);
    EXPECT_LT(ref.targets.size(1), expected[i].targets.size(1)) << "nothing was trimmed: the check would be empty";
    EXPECT_TRUE(at::equal(b->targets.cpu(), ref.targets));
    EXPECT_TRUE(at::equal(b->target_mask.cpu(), ref.target_mask));
  }
}

TEST(DevicePrefetcher, CpuGivesTheLoadersBatchesNormalised) { check_prefetcher(c10::Device(c10::kCPU)); }

TEST(DevicePrefetcher, CudaSideStreamGivesTheSameBatches) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  check_prefetcher(c10::Device(c10::kCUDA, 0));
}

// A prefetcher per epoch (as the trainer makes them) must not leave each epoch's batch buffers cached
// for a stream that later epochs never use: device memory reserved after epoch 1 is enough for epoch 5.
TEST(DevicePrefetcher, CudaReservedMemoryDoesNotGrowWithEpochs) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const c10::Device device(c10::kCUDA, 0);
  auto ds = demo(true, 64);
  LoaderOptions o;
  o.batch_size = 8;
  o.workers = 2;
  o.pin_memory = true;
  DataLoader loader(ds, o);
  std::vector<int64_t> reserved;
  for (int epoch = 0; epoch < 6; ++epoch) {
    loader.start_epoch(epoch);
    DevicePrefetcher prefetcher(loader, device);
    while (auto batch = prefetcher.next()) EXPECT_EQ(batch->images.device(), device);
    synchronize(device);
    reserved.push_back(at::accelerator::getDeviceStats(device.index()).reserved_bytes[0].current);
  }
  EXPECT_LE(reserved.back(), reserved[1]) << "reserved after epoch 1: " << reserved[1] << " bytes, after 5: " << reserved.back();
}

}  // namespace
}  // namespace kestrel::data
