// Label caches for dataset_index_fuzz, for its listing of absent files ds/images/{a,b,c}.jpg (stamps:
// size -1, time 0): records.bin (a: two boxes, a duplicate removed; b: polygons; c: skipped) and
// skipped.bin (all three skipped), written by encode_label_cache without the trailing checksum (the
// harness appends it to every input). make_index_seeds <out_dir>
#include <cstdio>
#include <fstream>
#include <string>

#include "kestrel/data/image_files.h"
#include "kestrel/data/label_cache.h"

using namespace kestrel::data;

static CacheEntry kept(const std::string& image, std::vector<LabelRow> rows, int duplicates) {
  CacheEntry e;  // stamps: absent files
  e.check.ok = true;
  e.check.record = {image, label_path_for(image), 32, 24, std::move(rows)};
  e.check.duplicates = duplicates;
  if (duplicates) e.check.warning = label_path_for(image) + ": 1 duplicate row(s) removed";
  return e;
}

static CacheEntry skipped(const std::string& image) {
  CacheEntry e;
  e.check.record.image = image;
  e.check.problem = image + ": corrupt or truncated JPEG";
  return e;
}

static void write_seed(const std::string& path, const LabelCache& cache) {
  std::string bytes = encode_label_cache(cache);
  bytes.resize(bytes.size() - 8);  // the checksum
  std::ofstream(path, std::ios::binary) << bytes;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <out_dir>\n", argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  LabelCache records;
  records.nc = 3;
  records.entries["ds/images/a.jpg"] = kept("ds/images/a.jpg", {{{0, 0.5f, 0.5f, 0.25f, 0.25f}, {}}, {{2, 0.1f, 0.2f, 0.1f, 0.2f}, {}}}, 1);
  records.entries["ds/images/b.jpg"] =
      kept("ds/images/b.jpg", {{{1, 0.5f, 0.45f, 0.8f, 0.7f}, {0.1f, 0.1f, 0.9f, 0.1f, 0.5f, 0.8f}},
                               {{0, 0.3f, 0.3f, 0.2f, 0.2f}, {0.2f, 0.2f, 0.4f, 0.2f, 0.4f, 0.4f, 0.2f, 0.4f}}}, 0);
  records.entries["ds/images/c.jpg"] = skipped("ds/images/c.jpg");
  write_seed(out + "/records.bin", records);
  LabelCache none;
  none.nc = 3;
  for (const char* image : {"ds/images/a.jpg", "ds/images/b.jpg", "ds/images/c.jpg"}) none.entries[image] = skipped(image);
  write_seed(out + "/skipped.bin", none);
  return 0;
}
