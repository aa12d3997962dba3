// Verifying a split: a dataset full of broken files reports each one and loses no good sample;
// the cache is reused until a file changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <filesystem>
#include <functional>
#include <fstream>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <set>
#include <sstream>

#include <sys/stat.h>
#include <unistd.h>

#include "data/data_test_support.h"
#include "kestrel/core/error.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/data/dataset_index.h"
#include "kestrel/data/image_files.h"
#include "kestrel/data/label_cache.h"
#include "kestrel/data/video_io.h"
#include "test_support.h"

namespace kestrel::data {
namespace {
namespace fs = std::filesystem;

class BrokenDataset : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir.file("images/train"));
    fs::create_directories(dir.file("labels/train"));
    cv::Mat img = test::coordinate_image(32, 24);
    auto jpeg = test::encode_jpeg(img);
    auto big = test::encode_jpeg(test::coordinate_image(128, 128));
    auto image = [&](const std::string& stem, const std::string& label) {
      test::write_bytes(dir.file("images/train/" + stem + ".jpg"), jpeg);
      if (label != "<none>") test::write_file(dir.file("labels/train/" + stem + ".txt"), label);
    };
    // good samples
    image("good1", "0 0.5 0.5 0.25 0.25\n1 0.2 0.3 0.1 0.1\n");
    test::write_png(dir.file("images/train/good2.png"), img);
    test::write_file(dir.file("labels/train/good2.txt"), "2 0.5 0.5 0.5 0.5\n");
    image("background", "<none>");
    image("empty", "");
    image("dup", "3 0.5 0.5 0.2 0.2\n3 0.5 0.5 0.2 0.2\n");
    image("polygon", "4 0.1 0.1 0.5 0.1 0.5 0.5\n");
    image(std::string("name-\xff\xfe"), "5 0.5 0.5 0.1 0.1\n");  // not UTF-8, still a valid Linux file name
    // broken samples
    test::write_bytes(dir.file("images/train/corrupt.jpg"), {0xFF, 0xD8, 0xFF, 0x00, 0x13, 0x37});
    test::write_file(dir.file("labels/train/corrupt.txt"), "0 0.5 0.5 0.1 0.1\n");
    test::write_bytes(dir.file("images/train/truncated.jpg"), std::vector<uint8_t>(big.begin(), big.begin() + static_cast<long>(big.size() * 2 / 3)));
    test::write_png(dir.file("images/train/tiny.png"), test::coordinate_image(5, 5));
    image("nan", "0 0.5 nan 0.1 0.1\n");
    image("bigclass", "0 0.5 0.5 0.1 0.1\n99 0.5 0.5 0.1 0.1\n");
    image("columns", "0 0.5 0.5 0.1\n");
    test::write_file(dir.file("images/train/notes.txt"), "not an image\n");  // ignored: not an image extension
    test::write_bytes(dir.file("images/train/fake.png"), {'h', 'e', 'l', 'l', 'o'});
  }

  DatasetIndex index(bool cache = true) {
    return index_split(list_images({dir.file("images/train")}, "test.yaml"), IndexOptions{80, 2, cache});
  }

  test::TempDir dir;
};

TEST_F(BrokenDataset, ReportsEveryBrokenFileAndKeepsEveryGoodSample) {
  DatasetIndex idx = index(false);
  std::set<std::string> kept;
  for (const auto& r : idx.records) kept.insert(fs::path(r.image).filename().string());
  const std::set<std::string> good = {"good1.jpg", "good2.png", "background.jpg", "empty.jpg", "dup.jpg", "polygon.jpg",
                                      std::string("name-\xff\xfe.jpg")};
  EXPECT_EQ(kept, good);
  std::map<std::string, std::string> reasons;
  for (const auto& s : idx.skipped) reasons[fs::path(s.path).filename().string()] = s.reason;
  ASSERT_EQ(reasons.size(), 7u);
  EXPECT_NE(reasons["corrupt.jpg"].find("corrupt.jpg: corrupt or truncated JPEG"), std::string::npos) << reasons["corrupt.jpg"];
  EXPECT_NE(reasons["truncated.jpg"].find("truncated.jpg: truncated JPEG"), std::string::npos) << reasons["truncated.jpg"];
  EXPECT_NE(reasons["tiny.png"].find("image size 5x5 is below 10 pixels"), std::string::npos);
  EXPECT_NE(reasons["nan.jpg"].find("nan.txt:1: non-finite value"), std::string::npos) << reasons["nan.jpg"];
  EXPECT_NE(reasons["bigclass.jpg"].find("bigclass.txt:2: class 99 exceeds the dataset's nc=80"), std::string::npos);
  EXPECT_NE(reasons["columns.jpg"].find("columns.txt:1: 4 values"), std::string::npos);
  const std::string not_decoded = video_support_problem().empty() ? "fake.png: corrupt or unsupported image"
                                                                  : "fake.png: not a JPEG or PNG";
  EXPECT_NE(reasons["fake.png"].find(not_decoded), std::string::npos) << reasons["fake.png"];

  const auto& c = idx.counts;
  EXPECT_EQ(c.images, 14);
  EXPECT_EQ(c.corrupt, 7);
  EXPECT_EQ(c.missing, 1);
  EXPECT_EQ(c.empty, 1);
  EXPECT_EQ(c.labelled, 5);
  EXPECT_EQ(c.duplicates, 1);
  EXPECT_EQ(c.boxes, 2 + 1 + 1 + 1 + 1);
  for (const auto& r : idx.records) {
    EXPECT_EQ(r.width, 32);
    EXPECT_EQ(r.height, 24);
    if (fs::path(r.image).filename() == "polygon.jpg") {
      ASSERT_EQ(r.rows.size(), 1u);
      EXPECT_EQ(r.rows[0].polygon.size(), 6u);
    }
  }
  const std::string report = describe(idx, "train");
  EXPECT_NE(report.find("train: 14 images, 5 labelled, 1 without label file, 1 empty, 7 skipped, 6 boxes, 1 duplicate rows removed"),
            std::string::npos) << report;
  EXPECT_NE(report.find("dup.txt: 1 duplicate row(s) removed"), std::string::npos) << report;
  // A shorter listing says how many it left out, of the skipped files and of the warnings.
  const std::string short_report = describe(idx, "train", 0);
  EXPECT_NE(short_report.find("  ... and 7 more skipped\n"), std::string::npos) << short_report;
  EXPECT_NE(short_report.find("  ... and " + std::to_string(idx.warnings.size()) + " more warnings\n"), std::string::npos)
      << short_report;
  EXPECT_GE(idx.warnings.size(), 1u);
}

// A kept sample with two things to say says both, in one warning: the decoder's (bytes before the JPEG's
// end marker that belong to no segment: libjpeg's "Corrupt JPEG data" warning, the image still whole)
// and the label file's duplicate rows.
TEST(DatasetIndex, DecoderWarningAndDuplicateRowsAreBothSaid) {
  test::TempDir dir;
  fs::create_directories(dir.file("images/train"));
  fs::create_directories(dir.file("labels/train"));
  std::vector<uint8_t> jpeg = test::encode_jpeg(test::coordinate_image(32, 24));
  ASSERT_EQ(jpeg.end()[-2], 0xFF);
  ASSERT_EQ(jpeg.end()[-1], 0xD9);
  jpeg.insert(jpeg.end() - 2, 32, 0x55);  // more than the entropy decoder reads ahead
  test::write_bytes(dir.file("images/train/noisy.jpg"), jpeg);
  test::write_file(dir.file("labels/train/noisy.txt"), "3 0.5 0.5 0.2 0.2\n3 0.5 0.5 0.2 0.2\n");
  const DatasetIndex idx = index_split(list_images({dir.file("images/train")}, "test.yaml"), IndexOptions{80, 1, false});
  ASSERT_EQ(idx.records.size(), 1u);
  ASSERT_EQ(idx.warnings.size(), 1u);
  const std::string& w = idx.warnings[0];
  const size_t decoder = w.find("noisy.jpg: decoded with a warning: Corrupt JPEG data: ");
  const size_t duplicates = w.find("; " + dir.file("labels/train/noisy.txt") + ": 1 duplicate row(s) removed");
  EXPECT_NE(decoder, std::string::npos) << w;
  EXPECT_NE(w.find("extraneous bytes before marker 0xd9"), std::string::npos) << w;  // (less what the decoder read ahead)
  EXPECT_NE(duplicates, std::string::npos) << w;
  EXPECT_LT(decoder, duplicates) << w;
}

// A class beyond what a float holds exactly fails the label file's parse without nc (the cache's); with nc
// it is named as one beyond nc, as every other class >= nc, from the cache too.
TEST(DatasetIndex, AHugeClassIsNamedAgainstNc) {
  test::TempDir dir;
  fs::create_directories(dir.file("images/train"));
  fs::create_directories(dir.file("labels/train"));
  test::write_bytes(dir.file("images/train/huge.jpg"), test::encode_jpeg(test::coordinate_image(32, 24)));
  const std::string label = dir.file("labels/train/huge.txt");
  test::write_file(label, "0 0.5 0.5 0.2 0.2\n16777216 0.5 0.5 0.2 0.2\n");
  const auto reason = [&](int nc) {
    const DatasetIndex idx = index_split(list_images({dir.file("images/train")}, "test.yaml"), IndexOptions{nc, 1, true});
    EXPECT_TRUE(idx.records.empty());
    return idx.skipped.size() == 1 ? idx.skipped[0].reason : std::string("(not skipped)");
  };
  EXPECT_EQ(reason(80), label + ":2: class 16777216 exceeds the dataset's nc=80 (classes 0..79)");
  EXPECT_EQ(reason(80), label + ":2: class 16777216 exceeds the dataset's nc=80 (classes 0..79)");  // from the cache
  EXPECT_EQ(reason(0), label + ":2: class 16777216 is beyond any class index (at most 16777215)");
  // The report's one line about them, however long the list of skipped files is.
  const DatasetIndex idx = index_split(list_images({dir.file("images/train")}, "test.yaml"), IndexOptions{80, 1, true});
  EXPECT_NE(describe(idx, "train", 0).find("  1 of the skipped images have classes beyond the dataset's nc: are nc and names in "
                                           "the dataset YAML right?\n"), std::string::npos) << describe(idx, "train", 0);
}

// Upstream's check identifies each image's format by its content (PIL) and keeps only IMG_FORMATS: a netpbm
// image named .jpg ("invalid image format PPM"), a GIF named .png; OpenCV would decode both.
TEST(DatasetIndex, FormatsUpstreamRefusesAreSkippedWhateverTheirName) {
  test::TempDir dir;
  fs::create_directories(dir.file("images/train"));
  fs::create_directories(dir.file("labels/train"));
  std::string ppm = "P6\n16 16\n255\n";
  ppm += std::string(16 * 16 * 3, '\x80');
  test::write_file(dir.file("images/train/ppm.jpg"), ppm);
  test::write_file(dir.file("images/train/grey.jpg"), "Pf\n16 16\n-1.0\n" + std::string(16 * 16 * 4, '\0'));
  test::write_file(dir.file("images/train/gif.png"), "GIF89a" + std::string(64, '\0'));
  test::write_bytes(dir.file("images/train/good.jpg"), test::encode_jpeg(test::coordinate_image(32, 24)));
  for (const char* stem : {"ppm", "grey", "gif", "good"}) test::write_file(dir.file(std::string("labels/train/") + stem + ".txt"), "0 0.5 0.5 0.2 0.2\n");
  const DatasetIndex idx = index_split(list_images({dir.file("images/train")}, "test.yaml"), IndexOptions{1, 1, false});
  ASSERT_EQ(idx.records.size(), 1u);
  EXPECT_NE(idx.records[0].image.find("good.jpg"), std::string::npos);
  std::map<std::string, std::string> reasons;
  for (const auto& skipped : idx.skipped) reasons[fs::path(skipped.path).filename().string()] = skipped.reason;
  EXPECT_EQ(reasons["ppm.jpg"].rfind(dir.file("images/train/ppm.jpg") + ": invalid image format PPM (", 0), 0u) << reasons["ppm.jpg"];
  EXPECT_EQ(reasons["grey.jpg"].rfind(dir.file("images/train/grey.jpg") + ": invalid image format PPM (", 0), 0u) << reasons["grey.jpg"];
  EXPECT_EQ(reasons["gif.png"].rfind(dir.file("images/train/gif.png") + ": invalid image format GIF (", 0), 0u) << reasons["gif.png"];
}

// What only looks like a file: a FIFO as label file (opening it would wait for a writer forever), a folder as
// label file (its "size" made a std::bad_alloc), a dangling link as image (the listing dropped it silently).
TEST_F(BrokenDataset, SpecialFilesAreReportedByName) {
  fs::remove(dir.file("labels/train/good1.txt"));
  ASSERT_EQ(::mkfifo(dir.file("labels/train/good1.txt").c_str(), 0600), 0);
  fs::remove(dir.file("labels/train/dup.txt"));
  fs::create_directory(dir.file("labels/train/dup.txt"));
  fs::create_symlink(dir.file("images/train/gone.jpg"), dir.file("images/train/dangling.jpg"));
  DatasetIndex idx = index(false);
  std::map<std::string, std::string> reasons;
  for (const auto& s : idx.skipped) reasons[fs::path(s.path).filename().string()] = s.reason;
  EXPECT_NE(reasons["good1.jpg"].find("good1.txt: not a regular file (a FIFO, socket or device)"), std::string::npos)
      << reasons["good1.jpg"];
  EXPECT_NE(reasons["dup.jpg"].find("dup.txt: is a directory, not a file"), std::string::npos) << reasons["dup.jpg"];
  EXPECT_NE(reasons["dangling.jpg"].find("dangling.jpg: not found"), std::string::npos) << reasons["dangling.jpg"];
  EXPECT_EQ(idx.counts.images, 15);  // the 14 above and the dangling link, all counted
}

TEST_F(BrokenDataset, CacheIsReusedUntilAFileChanges) {
  DatasetIndex first = index();
  EXPECT_FALSE(first.from_cache);
  EXPECT_EQ(first.verified, 14);
  ASSERT_EQ(first.cache_path, dir.file("labels/train.kestrel.cache"));
  EXPECT_TRUE(fs::exists(first.cache_path));
  DatasetIndex second = index();
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(second.verified, 0);
  EXPECT_EQ(second.records.size(), first.records.size());
  EXPECT_EQ(second.skipped.size(), first.skipped.size());
  EXPECT_EQ(second.counts.boxes, first.counts.boxes);
  EXPECT_EQ(second.warnings, first.warnings);
  ASSERT_EQ(second.records[0].rows.size(), first.records[0].rows.size());
  // Fixing a label changes its size: that sample alone is verified again, and comes back.
  test::write_file(dir.file("labels/train/nan.txt"), "0 0.5 0.5 0.1 0.1\n");
  DatasetIndex third = index();
  EXPECT_FALSE(third.from_cache);
  EXPECT_EQ(third.verified, 1);
  EXPECT_EQ(third.records.size(), first.records.size() + 1);
  EXPECT_NE(describe(third, "train").find("(1 verified, the others from cache " + third.cache_path + ")"), std::string::npos);
  EXPECT_EQ(index().verified, 0);
  // A new image and a removed label file: those two.
  test::write_bytes(dir.file("images/train/new.jpg"), test::encode_jpeg(test::coordinate_image(32, 24)));
  fs::remove(dir.file("labels/train/good1.txt"));
  DatasetIndex fourth = index();
  EXPECT_EQ(fourth.verified, 2);
  EXPECT_EQ(fourth.counts.missing, third.counts.missing + 2);
  // Another class count, or none (--single-cls): the cache serves (as upstream's; classes are checked after
  // it), and samples with a class >= nc are skipped with their file's first such row.
  const DatasetIndex three = index_split(list_images({dir.file("images/train")}, "test.yaml"), IndexOptions{3, 2, true});
  EXPECT_EQ(three.verified, 0);
  EXPECT_TRUE(three.from_cache);
  std::map<std::string, std::string> reasons;
  for (const auto& skipped : three.skipped) reasons[fs::path(skipped.path).filename().string()] = skipped.reason;
  EXPECT_EQ(reasons["dup.jpg"], dir.file("labels/train/dup.txt") + ":1: class 3 exceeds the dataset's nc=3 (classes 0..2)");
  EXPECT_EQ(reasons["polygon.jpg"], dir.file("labels/train/polygon.txt") + ":1: class 4 exceeds the dataset's nc=3 (classes 0..2)");
  EXPECT_EQ(reasons["bigclass.jpg"], dir.file("labels/train/bigclass.txt") + ":2: class 99 exceeds the dataset's nc=3 (classes 0..2)");
  EXPECT_EQ(three.records.size(), fourth.records.size() - 3) << "dup, polygon and name-\\xff\\xfe (class 5)";
  const DatasetIndex unchecked = index_split(list_images({dir.file("images/train")}, "test.yaml"), IndexOptions{0, 2, true});
  EXPECT_EQ(unchecked.verified, 0);
  EXPECT_EQ(unchecked.records.size(), fourth.records.size() + 1) << "bigclass kept";
  EXPECT_EQ(index().verified, 0) << "and nc 80 still reads the same cache";
  // A corrupt cache file is ignored with a note and rebuilt; the JSON cache of older versions quietly.
  test::write_file(third.cache_path, "{\"version\": 3}");
  DatasetIndex old = index();
  EXPECT_EQ(old.verified, 15);
  EXPECT_EQ(old.cache_note, "");
  fs::remove(third.cache_path);  // a FIFO there: passed over at once (a read would wait for a writer forever),
  ASSERT_EQ(::mkfifo(third.cache_path.c_str(), 0600), 0);  // and left as it is, said in the note
  const DatasetIndex fifo = index();
  EXPECT_EQ(fifo.verified, 15);
  EXPECT_EQ(fifo.records.size(), fourth.records.size());
  EXPECT_NE(fifo.cache_note.find(third.cache_path + ": exists and is not a regular file"), std::string::npos) << fifo.cache_note;
  fs::remove(third.cache_path);
  test::write_file(third.cache_path, "not a cache");
  DatasetIndex fifth = index();
  EXPECT_FALSE(fifth.from_cache);
  EXPECT_EQ(fifth.verified, 15);
  EXPECT_EQ(fifth.records.size(), fourth.records.size());
  EXPECT_NE(fifth.cache_note.find("ignored unreadable cache " + third.cache_path + " (not a kestrel label cache)"),
            std::string::npos) << fifth.cache_note;
  EXPECT_TRUE(index().from_cache);
}

// Two list files of one image folder share its label cache: each keeps the other's entries.
TEST_F(BrokenDataset, ListingsOfOneLabelFolderShareItsCache) {
  const std::vector<std::string> all = list_images({dir.file("images/train")}, "test.yaml");
  const std::vector<std::string> a(all.begin(), all.begin() + 5), b(all.begin() + 5, all.end());
  EXPECT_EQ(index_split(a, IndexOptions{80, 2, true}).verified, 5);
  EXPECT_EQ(index_split(b, IndexOptions{80, 2, true}).verified, 9);
  EXPECT_TRUE(index_split(a, IndexOptions{80, 2, true}).from_cache);
  EXPECT_TRUE(index_split(all, IndexOptions{80, 2, true}).from_cache);
  // An image listed twice is one sample (verified once), counted twice, as verified as listed; from the
  // cache, nothing is verified and the line says so.
  std::vector<std::string> twice = a;
  twice.push_back(a[0]);
  fs::remove(dir.file("labels/train.kestrel.cache"));
  const DatasetIndex repeated = index_split(twice, IndexOptions{80, 2, true});
  EXPECT_EQ(repeated.verified, 6);
  EXPECT_EQ(repeated.counts.images, 6);
  EXPECT_EQ(repeated.records.size() + repeated.skipped.size(), 6u);
  EXPECT_EQ(describe(repeated, "train").find("from cache"), std::string::npos);
  const DatasetIndex repeated_cached = index_split(twice, IndexOptions{80, 2, true});
  EXPECT_TRUE(repeated_cached.from_cache);
  EXPECT_EQ(repeated_cached.verified, 0);
}

// Found by fuzz/dataset_index_fuzz (on the JSON cache before version 4): a cache was trusted whatever it
// held: classes beyond nc, coordinates outside 0..1, an image listed twice, counts that disagree with the
// records, sizes converted to int with undefined behaviour. The binary cache checks the same, and a
// checksum: each damage is ignored with a note and the split verified again.
TEST_F(BrokenDataset, CorruptCacheValuesAreRebuiltNotTrusted) {
  const DatasetIndex first = index();
  ASSERT_FALSE(first.from_cache);
  auto read = [&] {
    std::ifstream in(first.cache_path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string good = read();
  ASSERT_TRUE(index().from_cache);  // the untouched cache passes the checks
  const LabelCache decoded = decode_label_cache(good);
  EXPECT_EQ(encode_label_cache(decoded), good);
  std::string with_rows;  // an image whose entry has rows
  for (const auto& [image, e] : decoded.entries)
    if (e.check.ok && !e.check.record.rows.empty() && e.check.record.rows[0].polygon.empty()) with_rows = image;
  ASSERT_FALSE(with_rows.empty());
  auto values = [&](const std::function<void(CacheEntry&)>& change) {
    LabelCache c = decoded;
    change(c.entries.at(with_rows));
    return encode_label_cache(c);  // a valid checksum: the values themselves must be refused
  };
  auto with_checksum = [](std::string bytes) {
    bytes.resize(bytes.size() - 8);
    const uint64_t sum = label_cache_checksum(bytes.data(), bytes.size());
    return bytes + std::string(reinterpret_cast<const char*>(&sum), 8);
  };
  std::string flipped = good, other_version = good, trailing = good;
  flipped[good.size() / 2] ^= 0x10;
  other_version[8] = 3;
  trailing.insert(trailing.size() - 8, "x");
  const std::vector<std::pair<std::string, std::string>> damage = {
      // (the cache holds classes unchecked against nc, which is checked after it: 99 could be right, 2^25 not)
      {"class", values([](CacheEntry& e) { e.check.record.rows[0].box[0] = 33554432.f; })},
      {"fractional class", values([](CacheEntry& e) { e.check.record.rows[0].box[0] = 0.5f; })},
      {"coordinate", values([](CacheEntry& e) { e.check.record.rows[0].box[1] = 1e30f; })},
      {"nan", values([](CacheEntry& e) { e.check.record.rows[0].box[2] = std::nanf(""); })},
      {"small width", values([](CacheEntry& e) { e.check.record.width = 3; })},
      {"polygon", values([](CacheEntry& e) { e.check.record.rows[0].polygon = {0.5f, 0.5f}; })},
      {"rows without label", values([](CacheEntry& e) { e.check.label_missing = true; })},
      {"negative duplicates", values([](CacheEntry& e) { e.check.duplicates = -1; })},
      {"flipped byte", flipped},
      {"truncated", good.substr(0, good.size() / 3)},
      {"other version", with_checksum(other_version)},
      {"trailing bytes", with_checksum(trailing)},
      {"empty", ""},
  };
  for (const auto& [what, bytes] : damage) {
    test::write_file(first.cache_path, bytes);
    const DatasetIndex again = index();
    EXPECT_FALSE(again.from_cache) << what;
    EXPECT_NE(again.cache_note.find("ignored unreadable cache " + first.cache_path), std::string::npos) << what << ": " << again.cache_note;
    EXPECT_EQ(again.records.size(), first.records.size()) << what;
    EXPECT_EQ(again.counts.boxes, first.counts.boxes) << what;
    EXPECT_EQ(read(), good) << what << ": the rebuilt cache";
  }
}

// Every label value loaded from the cache is bit for bit the one parsed from the label file.
TEST(DatasetIndexCache, LabelValuesRoundTripBitForBit) {
  test::TempDir dir;
  fs::create_directories(dir.file("images/train"));
  fs::create_directories(dir.file("labels/train"));
  const auto jpeg = test::encode_jpeg(test::coordinate_image(32, 24));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  for (int i = 0; i < 20; ++i) {
    test::write_bytes(dir.file("images/train/" + std::to_string(i) + ".jpg"), jpeg);
    std::string rows = "0 0.1 0.2 0.3 0.4\n1 0.123456789 0.5 1e-7 1\n";
    char line[256];
    std::snprintf(line, sizeof line, "2 %.9g %.9g %.9g %.9g\n", unit(rng), unit(rng), unit(rng), unit(rng));
    rows += line;
    if (i % 2) {  // polygon rows only, one with points a little past the border (its box inside)
      rows.clear();
      for (int r = 0; r < 3; ++r) {
        rows += "3";
        for (int k = 0; k < 8; ++k) std::snprintf(line, sizeof line, " %.9g", unit(rng)), rows += line;
        rows += "\n";
      }
      rows += "4 -0.002 0.2 0.5 0.2 0.5 1.00001 0.3 0.8\n";  // box: x -0.002 .. 0.5, y 0.2 .. 1.00001
    }
    test::write_file(dir.file("labels/train/" + std::to_string(i) + ".txt"), rows);
  }
  const auto images = list_images({dir.file("images/train")}, "d.yaml");
  const DatasetIndex fresh = index_split(images, IndexOptions{80, 1, true});
  const DatasetIndex cached = index_split(images, IndexOptions{80, 1, true});
  ASSERT_FALSE(fresh.from_cache);
  ASSERT_TRUE(cached.from_cache);
  ASSERT_EQ(cached.records.size(), fresh.records.size());
  size_t values = 0;
  for (size_t i = 0; i < fresh.records.size(); ++i) {
    ASSERT_EQ(cached.records[i].rows.size(), fresh.records[i].rows.size());
    for (size_t r = 0; r < fresh.records[i].rows.size(); ++r) {
      const LabelRow &a = fresh.records[i].rows[r], &b = cached.records[i].rows[r];
      EXPECT_EQ(std::memcmp(a.box.data(), b.box.data(), sizeof a.box), 0) << i << " " << r;
      ASSERT_EQ(a.polygon.size(), b.polygon.size());
      if (!a.polygon.empty()) {  // (memcmp of two empty vectors' null pointers is undefined)
        EXPECT_EQ(std::memcmp(a.polygon.data(), b.polygon.data(), a.polygon.size() * sizeof(float)), 0) << i << " " << r;
      }
      values += 5 + a.polygon.size();
    }
  }
  EXPECT_GT(values, 500u);
}

// Upstream's IMG_FORMATS beyond JPEG and PNG: a BMP is verified like any image (kept, its size read), a
// truncated one skipped naming the file; without the OpenCV plugin both are skipped saying so.
TEST(DatasetIndexFormats, BmpImagesAreVerifiedLikeTheOthers) {
  test::TempDir dir;
  fs::create_directories(dir.file("images/train"));
  fs::create_directories(dir.file("labels/train"));
  const std::vector<uint8_t> bmp = test::encode_bmp(test::coordinate_image(16, 12));
  test::write_bytes(dir.file("images/train/a.bmp"), bmp);
  test::write_bytes(dir.file("images/train/cut.bmp"), std::vector<uint8_t>(bmp.begin(), bmp.begin() + 100));
  test::write_file(dir.file("labels/train/a.txt"), "0 0.5 0.5 0.25 0.25\n");
  test::write_file(dir.file("labels/train/cut.txt"), "0 0.5 0.5 0.25 0.25\n");
  const DatasetIndex idx = index_split(list_images({dir.file("images/train")}, "d.yaml"), IndexOptions{80, 2, false});
  std::map<std::string, std::string> reasons;
  for (const auto& s : idx.skipped) reasons[fs::path(s.path).filename().string()] = s.reason;
  if (!video_support_problem().empty()) {
    EXPECT_TRUE(idx.records.empty());
    EXPECT_NE(reasons["a.bmp"].find("a.bmp: not a JPEG or PNG"), std::string::npos) << reasons["a.bmp"];
    GTEST_SKIP() << video_support_problem();
  }
  ASSERT_EQ(idx.records.size(), 1u);
  EXPECT_EQ(fs::path(idx.records[0].image).filename(), "a.bmp");
  EXPECT_EQ(idx.records[0].width, 16);
  EXPECT_EQ(idx.records[0].height, 12);
  ASSERT_EQ(idx.records[0].rows.size(), 1u);
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_EQ(reasons["cut.bmp"], dir.file("images/train/cut.bmp") + ": corrupt or unsupported image (OpenCV could not decode it)");
  EXPECT_NE(describe(idx, "train").find("train: 2 images, 1 labelled, 0 without label file, 0 empty, 1 skipped, 1 boxes"),
            std::string::npos) << describe(idx, "train");
}

// An image the OpenCV plugin decodes (BMP, a CMYK JPEG) is verified again when the cache was written under
// another plugin state (it may have been skipped for want of the plugin); JPEG and PNG entries are reused
// whatever the state. Shown by changing a value in each cached entry: a reused entry keeps the change.
TEST(DatasetIndexFormats, PluginEntriesAreReusedOnlyUnderTheirPluginState) {
  if (!video_support_problem().empty()) GTEST_SKIP() << video_support_problem();
  test::TempDir dir;
  fs::create_directories(dir.file("images/train"));
  fs::create_directories(dir.file("labels/train"));
  test::write_bytes(dir.file("images/train/a.bmp"), test::encode_bmp(test::coordinate_image(16, 12)));
  test::write_bytes(dir.file("images/train/b.jpg"), test::encode_jpeg(test::coordinate_image(16, 12)));
  test::write_file(dir.file("labels/train/a.txt"), "0 0.5 0.5 0.25 0.25\n");
  test::write_file(dir.file("labels/train/b.txt"), "0 0.5 0.5 0.25 0.25\n");
  const auto images = list_images({dir.file("images/train")}, "d.yaml");
  const DatasetIndex first = index_split(images, IndexOptions{80, 2, true});
  ASSERT_EQ(first.records.size(), 2u);
  auto read_cache = [&] {
    std::ifstream in(first.cache_path, std::ios::binary);
    return decode_label_cache(std::string(std::istreambuf_iterator<char>(in), {}));
  };
  const LabelCache written = read_cache();
  EXPECT_EQ(written.plugin, PluginState::kLoaded);
  EXPECT_TRUE(written.entries.at(dir.file("images/train/a.bmp")).check.needs_plugin);
  EXPECT_FALSE(written.entries.at(dir.file("images/train/b.jpg")).check.needs_plugin);
  auto centre_x = [](const DatasetIndex& idx) {
    std::map<std::string, float> x;
    for (const auto& r : idx.records) x[fs::path(r.image).filename().string()] = r.rows.at(0).box[1];
    return x;
  };
  for (const PluginState state : {PluginState::kMissing, PluginState::kLoaded}) {
    LabelCache changed = written;
    changed.plugin = state;
    for (auto& [image, entry] : changed.entries) entry.check.record.rows.at(0).box[1] = 0.375f;
    test::write_file(first.cache_path, encode_label_cache(changed));
    const DatasetIndex again = index_split(images, IndexOptions{80, 2, true});
    const bool same_state = state == PluginState::kLoaded;
    EXPECT_EQ(again.verified, same_state ? 0 : 1);
    EXPECT_EQ(centre_x(again)["a.bmp"], same_state ? 0.375f : 0.5f);
    EXPECT_EQ(centre_x(again)["b.jpg"], 0.375f);
    EXPECT_EQ(read_cache().plugin, PluginState::kLoaded);  // rewritten under this run's state
  }
}

TEST(ImageFiles, LabelPathRuleAndTxtLists) {
  EXPECT_EQ(label_path_for("/d/images/train/a.jpg"), "/d/labels/train/a.txt");
  EXPECT_EQ(label_path_for("/images/x/images/b.PNG"), "/images/x/labels/b.txt");  // the last /images/ only
  EXPECT_EQ(label_path_for("rel/c.d.jpeg"), "rel/c.d.txt");
  test::TempDir dir;
  fs::create_directories(dir.file("images"));
  test::write_bytes(dir.file("images/a.jpg"), {1});
  test::write_bytes(dir.file("images/b.jpg"), {1});
  test::write_file(dir.file("list.txt"), "./images/b.jpg\nimages/a.jpg\n\n" + dir.file("images/a.jpg") + "\n");
  auto images = list_images({dir.file("list.txt")}, "d.yaml");
  EXPECT_EQ(images, (std::vector<std::string>{dir.file("images/a.jpg"), dir.file("images/b.jpg")}));
  // Trailing tabs are whitespace too, and a folder in a list stands for its images (detect.py's lists).
  fs::create_directories(dir.file("more"));
  test::write_bytes(dir.file("more/c.jpg"), {1});
  test::write_file(dir.file("list2.txt"), "images/a.jpg\t\r\nmore\n");
  images = list_images({dir.file("list2.txt")}, "d.yaml");
  EXPECT_EQ(images, (std::vector<std::string>{dir.file("images/a.jpg"), dir.file("more/c.jpg")}));
  try {
    list_images({dir.file("nope")}, "d.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("d.yaml: " + dir.file("nope") + " does not exist"), std::string::npos) << e.what();
  }
}

// detect.py's --source glob: `*` within a folder, `**` across folders (none or many, as Python's
// recursive glob); the matches filtered by what is wanted; a pattern matching nothing is an error.
TEST(ImageFiles, GlobPatterns) {
  test::TempDir dir;
  fs::create_directories(dir.file("d/sub/deeper"));
  for (const char* f : {"d/a.jpg", "d/b.png", "d/notes.txt", "d/sub/c.jpg", "d/sub/deeper/e.jpg", "d/clip.mp4"})
    test::write_bytes(dir.file(f), {1});
  const auto images = [](const std::string& path) { return has_image_extension(path); };
  EXPECT_EQ(list_files({dir.file("d/*.jpg")}, "--source", images), (std::vector<std::string>{dir.file("d/a.jpg")}));
  EXPECT_EQ(list_files({dir.file("d/*")}, "--source", images),
            (std::vector<std::string>{dir.file("d/a.jpg"), dir.file("d/b.png")}));  // not the folder, the .txt or the video
  EXPECT_EQ(list_files({dir.file("d/**/*.jpg")}, "--source", images),
            (std::vector<std::string>{dir.file("d/a.jpg"), dir.file("d/sub/c.jpg"), dir.file("d/sub/deeper/e.jpg")}));
  const auto media = [](const std::string& path) { return has_image_extension(path) || (path.size() > 4 && path.substr(path.size() - 4) == ".mp4"); };
  EXPECT_EQ(list_files({dir.file("d/[bc]*")}, "--source", media),
            (std::vector<std::string>{dir.file("d/b.png"), dir.file("d/clip.mp4")}));
  EXPECT_NE(test::error_message([&] { list_files({dir.file("d/*.gif")}, "--source", images); })
                .find("--source: no file matches " + dir.file("d/*.gif")),
            std::string::npos);
  // As Python's glob: `*` stays within a name (img_* is not img_set/...), `**` skips hidden folders, and
  // a folder link loop lists each file once.
  fs::create_directories(dir.file("d/img_set"));
  fs::create_directories(dir.file("d/.cache"));
  test::write_bytes(dir.file("d/img_set/x.jpg"), {1});
  test::write_bytes(dir.file("d/img_1.jpg"), {1});
  test::write_bytes(dir.file("d/.cache/h.jpg"), {1});
  EXPECT_EQ(list_files({dir.file("d/**/img_*.jpg")}, "--source", images), (std::vector<std::string>{dir.file("d/img_1.jpg")}));
  fs::create_directory_symlink(dir.file("d"), dir.file("d/sub/loop"));
  const auto all = list_files({dir.file("d")}, "--source", images);
  EXPECT_EQ(std::count(all.begin(), all.end(), dir.file("d/a.jpg")) + std::count(all.begin(), all.end(), dir.file("d/sub/loop/a.jpg")), 1)
      << all.size() << " files";
  EXPECT_EQ(list_files({dir.file("d/**/*.jpg")}, "--source", images).size(), all.size() - 1);  // less b.png
  // A folder's listing leaves hidden files and folders out, as Python's glob of upstream's listings does
  // (macOS's ._x.jpg beside x.jpg, a .thumbs folder).
  test::write_bytes(dir.file("d/._a.jpg"), {1});
  EXPECT_EQ(std::count(all.begin(), all.end(), dir.file("d/.cache/h.jpg")), 0);
  const auto again = list_files({dir.file("d")}, "--source", images);
  EXPECT_EQ(std::count(again.begin(), again.end(), dir.file("d/._a.jpg")), 0);
  EXPECT_EQ(again, all);
}

// Lines of a .txt list: "./x" is the list's folder (upstream's replace), other relative lines the working
// folder's where they exist there (upstream), else the list's (kestrel's: lists travel with their files).
TEST(ImageFiles, TxtListLinesAsUpstreamResolvesThem) {
  test::TempDir dir;
  fs::create_directories(dir.file("images"));
  test::write_bytes(dir.file("images/a.jpg"), {1});
  const std::string from_here = "data/demo/images/val/000000000139.jpg";  // tests run from the source tree
  ASSERT_TRUE(fs::exists(from_here));
  test::write_file(dir.file("list.txt"), "./images/a.jpg\n" + from_here + "\n");
  EXPECT_EQ(list_images({dir.file("list.txt")}, "d.yaml"), (std::vector<std::string>{dir.file("images/a.jpg"), from_here}));
  fs::copy_file(dir.file("list.txt"), dir.file("LIST.TXT"));  // the suffix in any case
  EXPECT_EQ(list_images({dir.file("LIST.TXT")}, "d.yaml"), (std::vector<std::string>{dir.file("images/a.jpg"), from_here}));
  // A list that cannot be read is an error (upstream's open() raises), not a split without its images.
  ::chmod(dir.file("list.txt").c_str(), 0);
  if (::access(dir.file("list.txt").c_str(), R_OK) == 0) GTEST_SKIP() << "this user reads files whatever their mode (root)";
  EXPECT_EQ(test::error_message([&] { list_images({dir.file("list.txt")}, "d.yaml"); }),
            "d.yaml: cannot read the list " + dir.file("list.txt") + " (Permission denied)");
}

// A file given by name that is of no supported kind (a README passed as --source) is named as such, not
// as missing; the formats the message lists are the ones has_image_extension takes.
TEST(ImageFiles, AFileOfAnotherKindIsNamed) {
  test::TempDir dir;
  test::write_file(dir.file("README.md"), "text");
  const auto images = [](const std::string& path) { return has_image_extension(path); };
  const std::string message = test::error_message([&] { list_files({dir.file("README.md")}, "--source", images); });
  EXPECT_NE(message.find("--source: " + dir.file("README.md") + " is not a file of a supported format (.md; supported images: "),
            std::string::npos) << message;
  EXPECT_NE(test::error_message([&] { list_files({dir.file("none.jpg")}, "--source", images); }).find("does not exist"),
            std::string::npos);
  std::istringstream formats(image_formats_text().substr(std::string("images:").size()));
  int listed = 0;
  for (std::string ext; formats >> ext; ++listed) EXPECT_TRUE(has_image_extension("x." + ext)) << ext;
  EXPECT_EQ(listed, 10);
}

TEST(DatasetConfig, DemoYamlAndErrors) {
  DatasetConfig cfg = load_dataset_config("data/demo/demo.yaml");
  EXPECT_EQ(cfg.nc, 80);
  ASSERT_EQ(cfg.names.size(), 80u);
  EXPECT_EQ(cfg.names[0], "person");
  EXPECT_EQ(cfg.names[79], "toothbrush");
  EXPECT_EQ(list_images(cfg.train, cfg.source).size(), 32u);
  EXPECT_EQ(list_images(cfg.val, cfg.source).size(), 16u);
  // the copy under configs/data points at the same images
  DatasetConfig other = load_dataset_config("configs/data/demo.yaml");
  EXPECT_EQ(list_images(other.train, other.source), list_images(cfg.train, cfg.source));

  test::TempDir dir;
  auto error_of = [&](const std::string& text) -> std::string {
    test::write_file(dir.file("d.yaml"), text);
    try {
      load_dataset_config(dir.file("d.yaml"));
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(error_of("val: a\nnames: [x]\n").find("missing key 'train'"), std::string::npos);
  EXPECT_NE(error_of("train: a\nval: a\nnc: 2\nnames: [x]\n").find("'nc' is 2 but 'names' lists 1 classes"), std::string::npos);
  // An empty or null name (a comma typo: PyYAML refuses "[a, , b]") is an error at its line, not a class "null".
  for (const char* names : {"[a, , b]", "[a, ~, b]", "{0: a, 1: }", "[a, null]"})
    EXPECT_NE(error_of(std::string("train: a\nval: a\nnames: ") + names + "\n").find("d.yaml:3: a class name in 'names' is empty"),
              std::string::npos) << names;
  EXPECT_NE(error_of("train: a\nval: a\nnames: {0: x, 2: y}\n").find("without gaps (missing 1)"), std::string::npos);
  EXPECT_NE(error_of("train: [a\n").find("malformed YAML"), std::string::npos);
  EXPECT_NE(error_of("train: a\nval: a\n").find("give 'names'"), std::string::npos);
  // A list as 'path' was ignored: the splits were then looked for (and reported missing) beside the YAML.
  EXPECT_NE(error_of("path: [/x]\ntrain: a\nval: a\nnames: [x]\n").find("d.yaml:1: 'path' must be a folder, not a list or mapping"),
            std::string::npos) << error_of("path: [/x]\ntrain: a\nval: a\nnames: [x]\n");
  // fuzzing finding: a giant nc without names built that many class names (2e9 strings) before any check
  EXPECT_NE(error_of("train: a\nval: a\nnc: 2000000000\n").find("d.yaml: 'nc' is 2000000000, above the limit of 1000000 classes"),
            std::string::npos) << error_of("train: a\nval: a\nnc: 2000000000\n");
  EXPECT_EQ(error_of("train: a\nval: a\nnc: 1000\n"), "(no error)");
  // yaml-cpp's own message was "bad conversion"
  EXPECT_NE(error_of("train: a\nval: a\nnc: abc\n").find("d.yaml:3: 'nc' must be a whole number of classes, got 'abc'"),
            std::string::npos) << error_of("train: a\nval: a\nnc: abc\n");
  EXPECT_NE(error_of("train: a\nval: a\nnc: 2.5\n").find("'nc' must be a whole number of classes, got '2.5'"), std::string::npos);
  EXPECT_NE(error_of("train: a\nval: a\nnc: 0\nnames: [a]\n").find("d.yaml:3: 'nc' must be >= 1, got 0"), std::string::npos);
  auto names = load_dataset_config((error_of("path: sub\ntrain: t\nval: [v1, /abs/v2]\nnames: [a, b]\n"), dir.file("d.yaml")));
  EXPECT_EQ(names.nc, 2);
  EXPECT_EQ(names.train, std::vector<std::string>{dir.file("sub/t")});
  EXPECT_EQ(names.val, (std::vector<std::string>{dir.file("sub/v1"), "/abs/v2"}));
  // A single path "../x" that does not exist is tried as "x" (upstream's check_dataset; Roboflow's exports),
  // a list's entries are not.
  std::filesystem::create_directories(dir.file("valid/images"));
  const DatasetConfig roboflow = load_dataset_config(
      (error_of("train: ../valid/images\nval: ../valid/images\nnames: [a]\n"), dir.file("d.yaml")));
  EXPECT_EQ(roboflow.train, std::vector<std::string>{dir.file("valid/images")});
  const DatasetConfig listed = load_dataset_config(
      (error_of("train: [../valid/images]\nval: ../valid/images\nnames: [a]\n"), dir.file("d.yaml")));
  EXPECT_EQ(listed.train, std::vector<std::string>{fs::path(dir.file("../valid/images")).lexically_normal().string()});
  // A missing split with upstream's `download:` (a URL or a script) names what upstream would fetch.
  const std::string url_error =
      error_of("path: ../datasets/coco128\ntrain: images/train2017\nval: images/train2017\nnames: [a]\n"
               "download: https://ultralytics.com/assets/coco128.zip\n");
  EXPECT_NE(url_error.find("images/train2017 does not exist. Upstream would run the file's 'download' "
                           "(https://ultralytics.com/assets/coco128.zip); kestrel does not download: put the dataset under " +
                           std::filesystem::path(dir.file("../datasets/coco128")).lexically_normal().string()),
            std::string::npos) << url_error;
  EXPECT_NE(error_of("train: t\nval: v\nnames: [a]\ndownload: |\n  import os\n  os.system('true')\n").find("(a Python script)"),
            std::string::npos);
  // YOLOv7's coco.yaml: `download: bash ./scripts/get_coco.sh`, which upstream runs as a shell command.
  const std::string shell_error = error_of("train: t\nval: v\nnames: [a]\ndownload: bash ./scripts/get_coco.sh\n");
  EXPECT_NE(shell_error.find("(a shell command)"), std::string::npos) << shell_error;
  EXPECT_NE(shell_error.find("Relative entries resolve against the YAML's folder"), std::string::npos) << shell_error;
  // Present data: `download` is not consulted.
  std::filesystem::create_directories(dir.file("t"));
  std::filesystem::create_directories(dir.file("v"));
  EXPECT_EQ(error_of("train: t\nval: v\nnames: [a]\ndownload: https://example.com/x.zip\n"), "(no error)");
}

}  // namespace
}  // namespace kestrel::data

namespace kestrel::data {
namespace {

// A subfolder that cannot be listed stops the listing (files must not go missing in silence), and the error
// names that subfolder, not the readable folder given. Root reads every folder: there the case cannot arise.
TEST(ImageListing, AnUnreadableSubfolderIsNamed) {
  if (::geteuid() == 0) GTEST_SKIP() << "root lists folders of mode 000";
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("images/secret"));
  std::filesystem::permissions(dir.file("images/secret"), std::filesystem::perms::none);
  const std::string message = test::error_message([&] { list_images({dir.file("images")}, "test.yaml"); });
  std::filesystem::permissions(dir.file("images/secret"), std::filesystem::perms::owner_all);
  EXPECT_NE(message.find("cannot list " + dir.file("images/secret") + " ("), std::string::npos) << message;
}

// Upstream's dataset YAMLs (data/coco128.yaml ...) are not shipped: the message says so and what to do.
// Relative entries resolve against the YAML's folder; where that misses but the working folder (upstream's
// repository) has the entry, as YOLOv7's data/coco.yaml with ./coco/train2017.txt, the fix is named.
TEST(DatasetYaml, UpstreamsFilesAndItsPathRuleAreExplained) {
  for (const char* given : {"coco128.yaml", "data/coco128.yaml"})
    EXPECT_NE(test::error_message([&] { load_dataset_config(given); })
                  .find(std::string(given) + ": dataset file not found (kestrel ships no upstream dataset YAML and downloads nothing"),
              std::string::npos) << given;
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("coco/images"));
  std::filesystem::create_directories(dir.file("data"));
  test::write_file(dir.file("data/coco.yaml"), "train: ./coco/images\nval: ./coco/images\nnames: [a]\n");
  const fs::path before = fs::current_path();
  fs::current_path(dir.path());
  const std::string message = test::error_message([] { load_dataset_config("data/coco.yaml"); });
  fs::current_path(before);
  EXPECT_EQ(message, "data/coco.yaml: train entry ./coco/images is " + dir.file("data/coco/images") + ", which does not exist; " +
                         dir.file("coco/images") + " does: kestrel resolves relative paths against the YAML's folder, upstream "
                         "against its repository's (usually the working folder). Set `path: " + dir.path() +
                         "` in the YAML, or give absolute paths");
  // With that path: the same entries load.
  test::write_file(dir.file("data/coco.yaml"), "path: " + dir.path() + "\ntrain: ./coco/images\nval: ./coco/images\nnames: [a]\n");
  EXPECT_EQ(load_dataset_config(dir.file("data/coco.yaml")).train, std::vector<std::string>{dir.file("coco/images")});
}

// v7.0 unpacks an archive given as --data (recognised by content); kestrel says to unpack it (it read the
// archive's bytes as YAML: "unknown escape character").
TEST(DatasetYaml, AnArchiveIsNamedWhateverItsName) {
  test::TempDir dir;
  for (const char* name : {"coco128.zip", "coco128.yaml"}) {
    test::write_file(dir.file(name), std::string("PK\x03\x04\x14\x00", 6));
    EXPECT_EQ(test::error_message([&] { load_dataset_config(dir.file(name)); }),
              dir.file(name) + ": an archive; unpack it and give the dataset YAML inside (kestrel does not unpack --data)");
  }
}

// A source named like an image that is a FIFO is said to be one (it was "not a file of a supported format (.jpg;
// supported ... jpg ...)").
TEST(ImageListing, AFifoNamedLikeAnImageIsSaidToBeOne) {
  test::TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("x.jpg").c_str(), 0600), 0);
  const std::string message = test::error_message(
      [&] { list_files({dir.file("x.jpg")}, "--source", [](const std::string& p) { return has_image_extension(p); }); });
  EXPECT_EQ(message, "--source: " + dir.file("x.jpg") + " is not a regular file (a FIFO, socket or device)");
}

}  // namespace
}  // namespace kestrel::data
