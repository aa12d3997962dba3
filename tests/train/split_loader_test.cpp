// The validation loader's two batch layouts: val.py's rectangular batches (pad 0.5 strides) and the square,
// unpadded letterboxes of its --task speed. Expected shapes by hand for the demo val split (16 images, all
// wider than tall or square, at 64 px with stride 32). And --cache ram's memory check (upstream's
// check_cache_ram) with hand-made sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "kestrel/core/error.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/data/loader.h"
#include "kestrel/train/hyperparameters.h"
#include "kestrel/train/split_loader.h"
#include "test_support.h"

namespace kestrel::train {
namespace {

std::vector<int64_t> first_batch_shape(bool rect) {
  ValLoaderOptions o;
  o.img_size = 64;
  o.batch_size = 16;
  o.workers = 1;
  o.rect = rect;
  o.pad = rect ? 0.5 : 0.0;
  const SplitLoader split = make_val_loader(data::load_dataset_config("data/demo/demo.yaml"), "val", o);
  split.loader->start_epoch(0);
  auto batch = split.loader->next();
  EXPECT_TRUE(batch.has_value());
  EXPECT_FALSE(split.loader->next().has_value()) << "16 images are one batch of 16";
  return batch ? batch->images.sizes().vec() : std::vector<int64_t>{};
}

TEST(ValLoader, RectangularBatchesPadHalfAStride) {
  const std::vector<int64_t> shape = first_batch_shape(true);
  ASSERT_EQ(shape.size(), 4u);
  EXPECT_EQ(shape[0], 16);
  // the long side: ceil(64 / 32 + 0.5) x 32 = 96; the short side a multiple of 32, at most 96
  EXPECT_EQ(std::max(shape[2], shape[3]), 96);
  EXPECT_EQ(std::min(shape[2], shape[3]) % 32, 0);
}

TEST(ValLoader, SpeedTaskLetterboxesSquareWithoutPadding) {
  const std::vector<int64_t> shape = first_batch_shape(false);
  EXPECT_EQ(shape, (std::vector<int64_t>{16, 3, 64, 64}));
}

// Validation images are not augmented, so the loader makes room for the fullest one's labels: --max-boxes 1
// loses no ground truth from the metrics.
TEST(ValLoader, KeepsEveryLabelWhateverMaxBoxes) {
  ValLoaderOptions o;
  o.img_size = 64;
  o.batch_size = 4;
  o.workers = 1;
  o.max_boxes = 1;
  const SplitLoader split = make_val_loader(data::load_dataset_config("data/demo/demo.yaml"), "val", o);
  int64_t labels = 0;
  size_t fullest = 0;
  for (const auto& r : split.dataset->records()) labels += static_cast<int64_t>(r.rows.size()), fullest = std::max(fullest, r.rows.size());
  ASSERT_GT(fullest, 1u) << "the demo's val split has an image with several boxes";
  split.loader->start_epoch(0);
  int64_t boxes = 0, dropped = 0;
  while (auto b = split.loader->next()) boxes += b->boxes, dropped += b->dropped_boxes;
  EXPECT_EQ(dropped, 0);
  EXPECT_EQ(boxes, labels);
}

constexpr uint64_t kGiB = 1ull << 30;

// The demo's training loader with --quad at 64 px, and what building it printed.
std::pair<SplitLoader, std::string> demo_quad_loader(int batch_size) {
  const data::DatasetConfig cfg = data::load_dataset_config("data/demo/demo.yaml");
  TrainOptions o;
  o.img_size = 64;
  o.workers = 1;
  o.quad = true;
  o.batch_size = batch_size;
  testing::internal::CaptureStdout();
  SplitLoader split = make_train_loader(cfg, o, Hyperparameters{}, 32, cfg.nc, c10::Device(c10::kCPU));
  return {std::move(split), testing::internal::GetCapturedStdout()};
}

// --quad stitches groups of 4: a batch of 7 leaves 3 images of every batch out (as upstream's collate_fn4),
// which is said once; a multiple of 4 says nothing.
TEST(TrainLoader, QuadSaysWhatABatchSizeNotAMultipleOfFourLeavesOut) {
  for (const auto& [batch, warned] : {std::pair{7, true}, std::pair{8, false}}) {
    const std::string out = demo_quad_loader(batch).second;
    EXPECT_EQ(out.find("WARNING: --quad takes groups of 4 images: 3 of every batch of 7 are left out") != std::string::npos,
              warned) << batch << ": " << out;
  }
}

// As upstream's create_dataloader + collate_fn4 on the demo's 32 training images: batches of 12 are 12, 12
// and 8 images, 3 + 3 + 2 groups; of 10 (2 left out of each) 2 + 2 + 2 groups and a last batch of 2 that
// makes none; a batch of 48 is capped at the split's 32 (min(batch_size, len(dataset))): 8 groups.
TEST(TrainLoader, QuadKeepsTheWholeGroupsOfAShortLastBatch) {
  struct Case {
    int batch;
    std::vector<int64_t> groups;
  };
  for (const Case& c : {Case{12, {3, 3, 2}}, Case{10, {2, 2, 2}}, Case{48, {8}}}) {
    auto [split, out] = demo_quad_loader(c.batch);
    EXPECT_EQ(out.find("train: --batch-size 48 is more than the split's 32 images: batches of 32") != std::string::npos,
              c.batch == 48) << out;
    ASSERT_EQ(split.dataset->size(), 32u);
    EXPECT_EQ(split.loader->num_batches(), c.groups.size()) << c.batch;
    split.loader->start_epoch(0);
    std::vector<int64_t> groups;
    while (auto b = split.loader->next()) groups.push_back(b->images.size(0));
    EXPECT_EQ(groups, c.groups) << c.batch;
  }
}

// Upstream's `assert nf > 0 or not augment, "No labels found ... can not start training"`: images whose
// labels are not where the images/ -> labels/ rule looks train on nothing. Empty label files are labels
// (all background), as upstream counts them.
TEST(TrainLoader, NoLabelFileAtAllIsAnError) {  // and no label at all
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("images/train"));
  for (const char* name : {"000000000009.jpg", "000000000025.jpg"})
    std::filesystem::copy_file(std::string("data/demo/images/train/") + name, dir.file(std::string("images/train/") + name));
  test::write_file(dir.file("d.yaml"), "path: " + dir.path() + "\ntrain: images/train\nval: images/train\nnc: 1\nnames: [a]\n");
  TrainOptions o;
  o.img_size = 64;
  o.workers = 1;
  const data::DatasetConfig cfg = data::load_dataset_config(dir.file("d.yaml"));
  try {
    make_train_loader(cfg, o, Hyperparameters{}, 32, cfg.nc, c10::Device(c10::kCPU));
    FAIL() << "trained without labels";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train: no labels found, can not start training (2 images without a label file, e.g. " +
                                         dir.file("labels/train/000000000009.txt") + ")"), std::string::npos) << e.what();
  }
  std::filesystem::create_directories(dir.file("labels/train"));
  test::write_file(dir.file("labels/train/000000000025.txt"), "");
  // v7.0's second assert: label files that are all empty ("All labels empty ..., can not start training").
  test::write_file(dir.file("labels/train/000000000009.txt"), "");
  EXPECT_EQ(test::error_message([&] { make_train_loader(cfg, o, Hyperparameters{}, 32, cfg.nc, c10::Device(c10::kCPU)); }),
            "train: all labels empty (2 empty label files, no other labelled image), can not start training");
  // The split's line and its warnings are printed (upstream's scanning line and messages), not only
  // when a file is skipped: here a duplicate row removed.
  test::write_file(dir.file("labels/train/000000000009.txt"), "0 0.5 0.5 0.2 0.2\n0 0.5 0.5 0.2 0.2\n");
  testing::internal::CaptureStdout();
  EXPECT_EQ(make_train_loader(cfg, o, Hyperparameters{}, 32, cfg.nc, c10::Device(c10::kCPU)).dataset->size(), 2u);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("train: 2 images, 1 labelled, 0 without label file, 1 empty, 0 skipped, 1 boxes, 1 duplicate rows removed"),
            std::string::npos) << out;
  EXPECT_NE(out.find("warning " + dir.file("labels/train/000000000009.txt") + ": 1 duplicate row(s) removed"), std::string::npos)
      << out;
}

// Loader threads as create_dataloader's min(cpu_count // devices, batch_size, workers): never more than the
// batch or this process's cores, at least one.
TEST(TrainLoader, LoaderThreadsAreCappedByCoresAndBatch) {
  const data::DatasetConfig cfg = data::load_dataset_config("data/demo/demo.yaml");
  TrainOptions o;
  o.img_size = 64;
  o.workers = 1000;
  const int cores = static_cast<int>(std::max<size_t>(data::allowed_cpu_cores().size(), 1));
  for (const int batch : {1, 2, 16}) {
    o.batch_size = batch;
    const SplitLoader split = make_train_loader(cfg, o, Hyperparameters{}, 32, cfg.nc, c10::Device(c10::kCPU));
    EXPECT_EQ(split.loader->workers(), std::min(batch, cores)) << batch;
  }
  o.workers = 1;
  EXPECT_EQ(make_train_loader(cfg, o, Hyperparameters{}, 32, cfg.nc, c10::Device(c10::kCPU)).loader->workers(), 1);
}

// Upstream: cache = required * 1.1 < available; its message without the margin, sizes in GB to 0.1.
TEST(RamCacheCheck, TenPercentMarginOverTheAvailableMemory) {
  const core::HostMemory memory{15 * kGiB / 10, 8 * kGiB};  // 1.5 of 8 GiB available
  EXPECT_EQ(ram_cache_refusal("train", kGiB, 0, memory, 1), "");                // 1.1 < 1.5
  EXPECT_EQ(ram_cache_refusal("train", 14 * kGiB / 10, 0, memory, 1),           // 1.54 >= 1.5
            "train: 1.4GB RAM required, 1.5/8.0GB available, not caching images (--cache ram)");
  // Exactly at the margin is refused, as upstream's strict '<'.
  EXPECT_NE(ram_cache_refusal("val", 10 * kGiB, 0, core::HostMemory{11 * kGiB, 16 * kGiB}, 1), "");
  EXPECT_EQ(ram_cache_refusal("val", 10 * kGiB, 0, core::HostMemory{11 * kGiB + (1 << 20), 16 * kGiB}, 1), "");
}

TEST(RamCacheCheck, CountsTheOtherSplitAndEveryProcessOfTheMachine) {
  const core::HostMemory memory{21 * kGiB / 10, 8 * kGiB};  // 2.1 GiB available
  EXPECT_EQ(ram_cache_refusal("train", kGiB, 0, memory, 1), "");
  EXPECT_EQ(ram_cache_refusal("val", kGiB, kGiB, memory, 1),  // (1 + 1) * 1.1 = 2.2
            "val: 1.0GB RAM required (+1.0GB for the other split), 2.1/8.0GB available, not caching images (--cache ram)");
  EXPECT_EQ(ram_cache_refusal("train", kGiB, 0, memory, 2),
            "train: 1.0GB RAM required x 2 processes on this machine, 2.1/8.0GB available, not caching images (--cache ram)");
  EXPECT_EQ(ram_cache_refusal("train", 1000 * kGiB, 0, core::HostMemory{}, 1), "") << "unknown memory: cache as asked";
}

// Upstream's check_cache_disk (YOLOv5 after v7.0): required * 1.5 must not exceed the free space; its message.
TEST(DiskCacheCheck, FiftyPercentMarginOverTheFreeSpace) {
  EXPECT_EQ(disk_cache_refusal("train", 2 * kGiB, 3 * kGiB, 100 * kGiB, true), "");  // 3.0 <= 3.0
  EXPECT_EQ(disk_cache_refusal("train", 2 * kGiB, 3 * kGiB - 1, 100 * kGiB, true),
            "train: 2.0GB disk space required, with 50% safety margin but only 3.0/100.0GB free, not caching images to "
            "disk (--cache disk)");
  EXPECT_EQ(disk_cache_refusal("val", 1, 1000 * kGiB, 1000 * kGiB, false),
            "val: skipping caching images to disk, directory not writable (--cache disk)");
}

// Long side to 640, the short side rounded up: 1280x960 -> 640x480, 100x50 -> 640x320, 640x640 stays,
// 33x1000 -> 22x640 (33 * 0.64 = 21.12). 3 bytes a pixel; a record listed twice counts twice.
TEST(RamCacheCheck, BytesOfTheResizedImagesByHand) {
  std::vector<data::ImageRecord> records(5);
  const int sizes[5][2] = {{1280, 960}, {100, 50}, {640, 640}, {33, 1000}, {100, 50}};
  for (size_t i = 0; i < records.size(); ++i) records[i].width = sizes[i][0], records[i].height = sizes[i][1];
  EXPECT_EQ(data::ram_cache_bytes(records, 640), 3ull * (640 * 480 + 640 * 320 + 640 * 640 + 22 * 640 + 640 * 320));
}

// On this machine the demo's few images fit: the loaders cache them and say how much they will hold.
TEST(RamCacheCheck, DemoSplitsAreCachedWithTheirSize) {
  const auto cfg = data::load_dataset_config("data/demo/demo.yaml");
  ValLoaderOptions o;
  o.img_size = 64;
  o.workers = 1;
  o.cache = "ram";
  const SplitLoader split = make_val_loader(cfg, "val", o);
  EXPECT_TRUE(split.dataset->options().cache_ram);
  EXPECT_EQ(split.ram_cache_bytes, data::ram_cache_bytes(split.dataset->records(), 64));
  EXPECT_GT(split.ram_cache_bytes, 16u * 64 * 32 * 3) << "16 images, none under 64x32 after the resize";
  const core::HostMemory memory = core::host_memory();
  EXPECT_GT(memory.total, 0u);
  EXPECT_LE(memory.available, memory.total);
}

}  // namespace
}  // namespace kestrel::train
