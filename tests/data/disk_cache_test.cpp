// --cache disk: the file round-trips, numpy reads it as the same array, stale / truncated / corrupt
// files are misses, and a dataset with the disk cache gives byte-identical samples to one without,
// rebuilding a damaged cache file and following a changed source image.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "kestrel/core/error.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/data/disk_cache.h"
#include "kestrel/data/image_files.h"
#include "kestrel/data/dataset.h"
#include "data/data_test_support.h"
#include "test_support.h"

namespace kestrel::data {
namespace {

namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void flip_byte(const std::string& path, size_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5A);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&c, 1);
}

TEST(DiskCache, PathNamesTheResize) {
  EXPECT_EQ(disk_cache_path("/d/images/a.jpg", ResizeKey{640, true}), "/d/images/a.jpg.640.npy");
  EXPECT_EQ(disk_cache_path("/d/images/a.jpg", ResizeKey{320, false}), "/d/images/a.jpg.320-area.npy");
}

TEST(DiskCache, RoundTripAndNumpyReadsIt) {
  test::TempDir dir;
  const std::string image = dir.file("a.jpg");
  test::write_file(image, "pretend image bytes");
  const FileStamp stamp = stamp_of_existing(image);
  const ResizeKey key{64, true};
  const cv::Mat pixels = test::coordinate_image(64, 37);  // 37 x 64 x 3
  const std::string path = disk_cache_path(image, key);
  write_disk_cache(path, CachedImage{pixels, cv::Size(200, 116)}, stamp, key);

  const auto back = read_disk_cache(path, stamp, key);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->original, cv::Size(200, 116));
  ASSERT_EQ(back->image.size(), pixels.size());
  EXPECT_EQ(cv::norm(back->image, pixels, cv::NORM_INF), 0.0);
  for (const auto& f : fs::directory_iterator(dir.path()))  // no temporary file left behind
    EXPECT_EQ(f.path().string().find(".tmp"), std::string::npos) << f.path();

  // numpy.load: an array of the same shape, dtype and bytes (BGR like cv2.imread).
  const auto r = test::run_python(
      "import numpy as np\n"
      "a = np.load('" + path + "')\n"
      "assert a.dtype == np.uint8 and a.shape == (37, 64, 3), (a.dtype, a.shape)\n"
      "open('" + dir.file("raw.bin") + "', 'wb').write(a.tobytes())\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string raw = read_all(dir.file("raw.bin"));
  ASSERT_EQ(raw.size(), pixels.total() * 3);
  EXPECT_EQ(std::memcmp(raw.data(), pixels.data, raw.size()), 0);
}

TEST(DiskCache, StaleTruncatedAndCorruptFilesAreMisses) {
  test::TempDir dir;
  const std::string image = dir.file("a.png");
  test::write_file(image, "v1");
  const FileStamp stamp = stamp_of_existing(image);
  const ResizeKey key{32, true};
  const std::string path = disk_cache_path(image, key);
  const cv::Mat pixels = test::coordinate_image(32, 20);
  write_disk_cache(path, CachedImage{pixels, cv::Size(64, 40)}, stamp, key);
  const std::string good = read_all(path);
  std::string why;

  EXPECT_FALSE(read_disk_cache(dir.file("none.npy"), stamp, key, &why));
  EXPECT_EQ(why, "missing");
  EXPECT_FALSE(read_disk_cache(path, FileStamp{stamp.size + 1, stamp.mtime_ns}, key, &why));
  EXPECT_EQ(why, "source image changed");
  EXPECT_FALSE(read_disk_cache(path, FileStamp{stamp.size, stamp.mtime_ns + 1}, key, &why));
  EXPECT_FALSE(read_disk_cache(path, stamp, ResizeKey{32, false}, &why));
  EXPECT_EQ(why, "made for another image size");

  for (size_t keep : {size_t{0}, size_t{9}, size_t{80}, good.size() - 49, good.size() - 1}) {
    test::write_file(path, good.substr(0, keep));
    EXPECT_FALSE(read_disk_cache(path, stamp, key, &why)) << keep;
  }
  test::write_file(path, good + "x");
  EXPECT_FALSE(read_disk_cache(path, stamp, key, &why));
  test::write_file(path, good);
  flip_byte(path, 64 + 100);  // a pixel
  EXPECT_FALSE(read_disk_cache(path, stamp, key, &why));
  EXPECT_EQ(why, "checksum mismatch (corrupt pixels)");
  test::write_file(path, good);
  flip_byte(path, 20);  // the header
  EXPECT_FALSE(read_disk_cache(path, stamp, key, &why));
  // fuzzing finding: the checksum does not cover the trailer, and an original width above INT_MAX came back
  // as a hit with a negative cv::Size. The trailer's original_w is at 48 bytes from the end (magic 8, size 8, mtime 8).
  std::string huge = good;
  const size_t original_w_at = good.size() - 48 + 24;
  huge[original_w_at + 3] = static_cast<char>(0x80);  // little-endian u32: 0x80000000 + the real width
  test::write_file(path, huge);
  EXPECT_FALSE(read_disk_cache(path, stamp, key, &why));
  EXPECT_EQ(why, "inconsistent sizes");
  test::write_file(path, good);
  EXPECT_TRUE(read_disk_cache(path, stamp, key, &why));
  // A FIFO in the cache's place: a miss at once (opening it for reading would wait for a writer forever);
  // the write refuses to replace it, naming it (in training a warning: WriteFailureIsAWarningAndTrainingGoesOn).
  std::filesystem::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  EXPECT_FALSE(read_disk_cache(path, stamp, key, &why));
  EXPECT_EQ(why, "not a regular file");
  EXPECT_NE(test::error_message([&] { write_disk_cache(path, CachedImage{pixels, cv::Size(64, 40)}, stamp, key); })
                .find(path + ": exists and is not a regular file"),
            std::string::npos);
}

TEST(DiskCache, UnwritableFolderIsAClearError) {
  test::TempDir dir;
  const cv::Mat pixels = test::coordinate_image(8, 8);
  EXPECT_THROW(write_disk_cache(dir.file("missing/folder/a.jpg.8.npy"), CachedImage{pixels, cv::Size(8, 8)},
                                FileStamp{}, ResizeKey{8, true}),
               Error);
}

// Four demo images copied to a temporary split (the cache files are written next to them).
std::vector<std::string> copy_demo_images(const test::TempDir& dir) {
  fs::create_directories(dir.file("images"));
  fs::create_directories(dir.file("labels"));
  for (const char* stem : {"000000000025", "000000000030", "000000000036", "000000000042"}) {
    fs::copy_file(cat("data/demo/images/train/", stem, ".jpg"), dir.file(cat("images/", stem, ".jpg")));
    fs::copy_file(cat("data/demo/labels/train/", stem, ".txt"), dir.file(cat("labels/", stem, ".txt")));
  }
  return list_images({dir.file("images")}, dir.file("d.yaml"));
}

void expect_same_samples(const YoloDataset& a, const YoloDataset& b, int epoch) {
  for (size_t i = 0; i < a.size(); ++i) {
    const Sample x = a.get(i, epoch), y = b.get(i, epoch);
    ASSERT_EQ(x.image.size(), y.image.size()) << i;
    EXPECT_EQ(cv::norm(x.image, y.image, cv::NORM_INF), 0.0) << i;
    ASSERT_EQ(x.boxes.size(), y.boxes.size()) << i;
  }
}

TEST(DiskCache, DatasetSamplesAreByteIdenticalAndDamageIsRebuilt) {
  test::TempDir dir;
  const auto images = copy_demo_images(dir);
  const DatasetIndex index = index_split(images, IndexOptions{80, 1, false});
  for (bool augment : {true, false}) {
    DatasetOptions o;
    o.img_size = 96;
    o.augment = augment;
    o.seed = 3;
    const YoloDataset plain(index, o);
    o.cache_disk = true;
    const YoloDataset cached(index, o);
    const ResizeKey key{96, augment};
    expect_same_samples(plain, cached, 0);  // fills the cache
    for (const auto& r : index.records) ASSERT_TRUE(fs::exists(disk_cache_path(r.image, key))) << r.image;
    expect_same_samples(plain, cached, 1);  // reads it
    const YoloDataset next_run(index, o);   // a later run: only reads
    expect_same_samples(plain, next_run, 2);

    // A truncated cache file is a miss: decoded again, the same sample, and the file is whole again.
    const std::string damaged = disk_cache_path(index.records[1].image, key);
    const std::string good = read_all(damaged);
    test::write_file(damaged, good.substr(0, good.size() / 2));
    expect_same_samples(plain, YoloDataset(index, o), 3);
    EXPECT_TRUE(read_disk_cache(damaged, stamp_of_existing(index.records[1].image), key));
    EXPECT_EQ(read_all(damaged), good);
  }
}

// A cache file that cannot be written (a full or read-only disk; here a folder stands where the file would
// go) costs the cache, not the run: the samples are the uncached ones and one warning says so.
TEST(DiskCache, WriteFailureIsAWarningAndTrainingGoesOn) {
  test::TempDir dir;
  const auto images = copy_demo_images(dir);
  const DatasetIndex index = index_split(images, IndexOptions{80, 1, false});
  DatasetOptions o;
  o.img_size = 96;
  o.augment = false;
  const YoloDataset plain(index, o);
  o.cache_disk = true;
  const YoloDataset cached(index, o);
  for (const auto& r : index.records) fs::create_directories(disk_cache_path(r.image, ResizeKey{96, false}));
  testing::internal::CaptureStderr();
  expect_same_samples(plain, cached, 0);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("WARNING: --cache disk: "), std::string::npos) << err;
  EXPECT_EQ(err.find("WARNING", 1), std::string::npos) << "warned more than once: " << err;
}

TEST(DiskCache, ChangedSourceImageReplacesTheCache) {
  test::TempDir dir;
  const auto images = copy_demo_images(dir);
  DatasetIndex index = index_split(images, IndexOptions{80, 1, false});
  index.records.resize(1);
  DatasetOptions o;
  o.img_size = 64;
  o.augment = false;
  o.cache_disk = true;
  const cv::Mat before = YoloDataset(index, o).load_resized(0).image.clone();
  // The image file is replaced by another picture of the same size: the stale cache must not be used.
  const std::string image = index.records[0].image;
  cv::Mat other(index.records[0].height, index.records[0].width, CV_8UC3, cv::Scalar(10, 200, 30));
  test::write_bytes(image, test::encode_jpeg(other));
  const cv::Mat after = YoloDataset(index, o).load_resized(0).image;
  EXPECT_GT(cv::norm(before, after, cv::NORM_INF), 50.0);
  o.cache_disk = false;
  EXPECT_EQ(cv::norm(YoloDataset(index, o).load_resized(0).image, after, cv::NORM_INF), 0.0);
}

TEST(DiskCache, RamAndDiskTogetherIsAnError) {
  test::TempDir dir;
  const auto images = copy_demo_images(dir);
  DatasetOptions o;
  o.cache_ram = o.cache_disk = true;
  EXPECT_THROW(YoloDataset(index_split(images, IndexOptions{80, 1, false}), o), Error);
}

}  // namespace
}  // namespace kestrel::data
