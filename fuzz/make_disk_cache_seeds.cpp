// Writes real --cache disk files (write_disk_cache) with the stamp and key disk_cache_fuzz reads them with:
//   make_disk_cache_seeds <out_dir>
#include <cstdio>
#include <string>

#include "kestrel/data/disk_cache.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <out_dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const kestrel::FileStamp stamp{1234, 5678};
  const kestrel::data::ResizeKey key{16, true};
  cv::Mat landscape(12, 16, CV_8UC3), portrait(16, 5, CV_8UC3);
  cv::randu(landscape, 0, 256);
  cv::randu(portrait, 0, 256);
  kestrel::data::write_disk_cache(dir + "/landscape.npy", {landscape, cv::Size(640, 480)}, stamp, key);
  kestrel::data::write_disk_cache(dir + "/portrait.npy", {portrait, cv::Size(100, 320)}, stamp, key);
  return 0;
}
