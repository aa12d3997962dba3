// read_disk_cache on an arbitrary file: it must never throw or crash, only hit or miss with a reason; a hit
// must have the shape the key promises (long side img_size, 3 channels) and a non-zero original size.
// Seeds (make_seeds) are real cache files written by write_disk_cache with the stamp and key used here.
#include <algorithm>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "kestrel/data/disk_cache.h"

using namespace kestrel;

namespace {
const FileStamp kStamp{1234, 5678};
const data::ResizeKey kKey{16, true};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::scratch_file("cache", ".npy");
  fuzz::write_file(path, data, size);
  try {
    std::string why;
    const auto hit = data::read_disk_cache(path, kStamp, kKey, &why);
    if (hit) {
      const cv::Mat& m = hit->image;
      if (m.type() != CV_8UC3 || std::max(m.rows, m.cols) != kKey.img_size) fuzz::finding("hit with the wrong shape");
      if (hit->original.width <= 0 || hit->original.height <= 0) fuzz::finding("hit with a non-positive original size");
    } else if (why.empty()) {
      fuzz::finding("miss without a reason");
    }
  } catch (const std::exception& e) {
    fuzz::finding(std::string("read_disk_cache threw: ") + e.what());
  }
  return 0;
}
