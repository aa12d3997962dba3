// index_split reading an arbitrary label cache (<labels>.kestrel.cache, binary: label_cache.h): the split
// is the three images ds/images/{a,b,c}.jpg (relative to a per-process scratch folder; they do not exist,
// so their stamps are fixed: size -1, time 0, and the seeds carry them). The harness appends the file's
// checksum to the input, so that mutations reach the checks behind it. A cache that is corrupt must be
// rebuilt with a note, never crash or throw; one that is used must describe the listing: each record an
// image of the listing (once, in order) at least 10 pixels a side, rows with a class below nc and
// coordinates in 0..1, polygons of >= 3 points, counts that agree with the records. Seeds
// (make_index_seeds): caches of the absent listing with kept and skipped entries, without the checksum.
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "kestrel/data/dataset_index.h"
#include "kestrel/data/image_files.h"
#include "kestrel/data/label_cache.h"

using namespace kestrel;

namespace {
const std::vector<std::string> kImages = {"ds/images/a.jpg", "ds/images/b.jpg", "ds/images/c.jpg"};
constexpr int kNc = 3;
std::string home, scratch;

void check(const data::DatasetIndex& index) {
  if (!index.from_cache) return;  // rebuilt: a stale or rejected cache
  size_t next = 0, boxes = 0;
  for (const auto& r : index.records) {
    while (next < kImages.size() && kImages[next] != r.image) ++next;
    if (next++ == kImages.size()) fuzz::finding("record of an unknown, repeated or unordered image: " + r.image);
    if (r.label != data::label_path_for(r.image)) fuzz::finding("record with the wrong label path");
    if (r.width < 10 || r.height < 10) fuzz::finding("record of an image below 10 pixels");
    for (const auto& row : r.rows) {
      if (!(row.box[0] >= 0 && row.box[0] < kNc && row.box[0] == std::floor(row.box[0]))) fuzz::finding("class out of range");
      for (int i = 1; i < 5; ++i)
        if (!(row.box[i] >= 0 && row.box[i] <= 1)) fuzz::finding("box value outside 0..1");
      if (!row.polygon.empty() && (row.polygon.size() < 6 || row.polygon.size() % 2 != 0)) fuzz::finding("bad polygon size");
      for (float v : row.polygon)
        if (!(v >= 0 && v <= 1)) fuzz::finding("polygon value outside 0..1");
    }
    boxes += r.rows.size();
  }
  for (const auto& s : index.skipped) {
    bool listed = false;
    for (const auto& image : kImages) listed |= s.path == image;
    if (!listed) fuzz::finding("skipped file outside the listing: " + s.path);
  }
  const auto& c = index.counts;
  if (c.images != static_cast<int>(kImages.size()) || index.records.size() + index.skipped.size() != kImages.size())
    fuzz::finding("cache used whose counts or records do not cover the listing");
  if (c.labelled < 0 || c.missing < 0 || c.empty < 0 || c.corrupt < 0 || c.duplicates < 0 ||
      c.boxes != static_cast<int>(boxes) || c.corrupt != static_cast<int>(index.skipped.size()) ||
      c.labelled + c.missing + c.empty != static_cast<int>(index.records.size()))
    fuzz::finding("cache used with inconsistent counts");
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  char cwd[PATH_MAX];
  if (!::getcwd(cwd, sizeof cwd)) std::abort();
  home = cwd;
  scratch = fuzz::scratch_file("index", "");
  ::mkdir(scratch.c_str(), 0700);
  ::mkdir((scratch + "/ds").c_str(), 0700);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (::chdir(scratch.c_str()) != 0) std::abort();  // relative paths: the seeds' fingerprint holds for any process
  std::string bytes(reinterpret_cast<const char*>(data), size);
  const uint64_t sum = data::label_cache_checksum(bytes.data(), bytes.size());
  bytes.append(reinterpret_cast<const char*>(&sum), sizeof sum);
  fuzz::write_file("ds/labels.kestrel.cache", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  try {
    data::IndexOptions options;
    options.nc = kNc;
    options.workers = 1;
    check(data::index_split(kImages, options));
  } catch (const std::exception& e) {
    fuzz::finding(std::string("index_split threw on a cache: ") + typeid(e).name() + ": " + e.what());
  }
  if (::chdir(home.c_str()) != 0) std::abort();
  return 0;
}
