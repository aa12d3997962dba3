// Label caches for dataset_index_fuzz: index_split over ds/images/{a,b,c}.jpg with real files (a: two
// boxes, b: polygons, c: not an image) and with no files; the first cache gets the fingerprint of the
// second (the harness's listing of absent files); written as records.json and absent.json (*.kestrel.cache
// files are git-ignored). make_index_seeds <out_dir>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "kestrel/data/dataset_index.h"

namespace fs = std::filesystem;

static nlohmann::json index_in(const fs::path& dir, bool with_files) {
  fs::create_directories(dir / "ds/images");
  fs::create_directories(dir / "ds/labels");
  fs::current_path(dir);
  if (with_files) {
    cv::Mat img(24, 32, CV_8UC3);
    cv::randu(img, 0, 256);
    cv::imwrite("ds/images/a.jpg", img);
    cv::imwrite("ds/images/b.jpg", img);
    std::ofstream("ds/images/c.jpg") << "not a jpeg";
    std::ofstream("ds/labels/a.txt") << "0 0.5 0.5 0.25 0.25\n2 0.1 0.2 0.1 0.2\n2 0.1 0.2 0.1 0.2\n";
    std::ofstream("ds/labels/b.txt") << "1 0.1 0.1 0.9 0.1 0.5 0.8\n0 0.2 0.2 0.4 0.2 0.4 0.4 0.2 0.4\n";
  }
  kestrel::data::IndexOptions o;
  o.nc = 3;
  o.workers = 1;
  kestrel::data::index_split({"ds/images/a.jpg", "ds/images/b.jpg", "ds/images/c.jpg"}, o);
  std::ifstream in("ds/labels.kestrel.cache");
  return nlohmann::json::parse(in);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <out_dir>\n", argv[0]);
    return 2;
  }
  const fs::path out = fs::absolute(argv[1]);
  const fs::path tmp = fs::temp_directory_path() / ("kestrel-index-seeds-" + std::to_string(::getpid()));
  nlohmann::json full = index_in(tmp / "files", true);
  const nlohmann::json absent = index_in(tmp / "absent", false);
  full["hash"] = absent["hash"];
  std::ofstream(out / "records.json") << full.dump();
  std::ofstream(out / "absent.json") << absent.dump();
  fs::current_path(out);
  fs::remove_all(tmp);
  return 0;
}
