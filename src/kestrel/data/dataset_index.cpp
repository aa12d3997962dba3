#include "kestrel/data/dataset_index.h"

#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "kestrel/core/error.h"
#include "kestrel/data/image_files.h"
#include "kestrel/data/image_io.h"

namespace kestrel::data {
namespace fs = std::filesystem;
namespace {

// 2: label lines end at \r, \v and \f too (as upstream's splitlines), so older caches parsed some files differently.
constexpr int kCacheVersion = 2;
constexpr int kMinImageSide = 10;  // upstream: "image size <10 pixels"

// FNV-1a over every image and label path with its size and modification time, and nc.
std::string fingerprint(const std::vector<std::string>& images, int nc) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  mix(&nc, sizeof nc);
  for (const auto& image : images) {
    for (const std::string& path : {image, label_path_for(image)}) {
      struct stat st {};
      const bool exists = ::stat(path.c_str(), &st) == 0;
      mix(path.data(), path.size());
      const int64_t facts[3] = {exists ? 1 : 0, exists ? static_cast<int64_t>(st.st_size) : 0,
                                exists ? static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec : 0};
      mix(facts, sizeof facts);
    }
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

struct Verified {
  bool ok = false;
  ImageRecord record;
  std::string problem, warning;
  int duplicates = 0;
  bool label_missing = false;
};

Verified verify_sample(const std::string& image, int nc) {
  Verified v;
  v.record.image = image;
  v.record.label = label_path_for(image);
  try {
    const DecodedImage decoded = decode_image_file(image);
    v.record.width = decoded.image.cols;
    v.record.height = decoded.image.rows;
    if (v.record.width < kMinImageSide || v.record.height < kMinImageSide)
      fail(image, ": image size ", v.record.width, "x", v.record.height, " is below 10 pixels");
    if (!decoded.warning.empty()) v.warning = cat(image, ": decoded with a warning: ", decoded.warning);
    std::error_code ec;
    if (fs::exists(v.record.label, ec)) {
      const auto bytes = read_file_bytes(v.record.label);
      ParsedLabels parsed = parse_labels(std::string(bytes.begin(), bytes.end()), v.record.label, nc);
      v.duplicates = parsed.duplicates_removed;
      if (!parsed.all_polygons())
        for (auto& r : parsed.rows) r.polygon.clear();
      v.record.rows = std::move(parsed.rows);
      if (v.duplicates) v.warning = cat(v.record.label, ": ", v.duplicates, " duplicate row(s) removed");
    } else {
      v.label_missing = true;
    }
    v.ok = true;
  } catch (const Error& e) {
    v.problem = e.what();
  }
  return v;
}

// Records and skipped files refer to images by their position in the listing (the fingerprint
// guarantees the same listing): paths need not be UTF-8, JSON strings must be.
nlohmann::json to_json(const DatasetIndex& index, const std::vector<std::string>& images, const std::string& hash) {
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < images.size(); ++i) position[images[i]] = i;
  nlohmann::json records = nlohmann::json::array();
  for (const auto& r : index.records) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& row : r.rows) rows.push_back({row.box, row.polygon});
    records.push_back({position.at(r.image), r.width, r.height, rows});
  }
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& s : index.skipped) skipped.push_back({position.at(s.path), s.reason});
  const auto& c = index.counts;
  return {{"version", kCacheVersion}, {"hash", hash}, {"records", records}, {"skipped", skipped}, {"warnings", index.warnings},
          {"counts", {c.images, c.labelled, c.missing, c.empty, c.corrupt, c.duplicates, c.boxes}}};
}

bool from_json(const nlohmann::json& j, const std::vector<std::string>& images, const std::string& hash, DatasetIndex& index) {
  if (j.value("version", 0) != kCacheVersion || j.value("hash", "") != hash) return false;
  for (const auto& r : j.at("records")) {
    const std::string& image = images.at(r.at(0).get<size_t>());
    ImageRecord rec{image, label_path_for(image), r.at(1), r.at(2), {}};
    for (const auto& row : r.at(3)) rec.rows.push_back({row.at(0).get<std::array<float, 5>>(), row.at(1).get<std::vector<float>>()});
    index.records.push_back(std::move(rec));
  }
  for (const auto& s : j.at("skipped")) index.skipped.push_back({images.at(s.at(0).get<size_t>()), s.at(1)});
  index.warnings = j.at("warnings").get<std::vector<std::string>>();
  const auto c = j.at("counts").get<std::vector<int>>();
  index.counts = {c.at(0), c.at(1), c.at(2), c.at(3), c.at(4), c.at(5), c.at(6)};
  return true;
}

std::string cache_path_for(const std::vector<std::string>& images) {
  if (images.empty()) return "";
  return fs::path(label_path_for(images.front())).parent_path().string() + ".kestrel.cache";
}

}  // namespace

DatasetIndex index_split(const std::vector<std::string>& images, const IndexOptions& options) {
  DatasetIndex index;
  index.cache_path = options.use_cache ? cache_path_for(images) : "";
  const std::string hash = fingerprint(images, options.nc);
  if (!index.cache_path.empty() && fs::exists(index.cache_path)) {
    try {
      std::ifstream in(index.cache_path);
      if (from_json(nlohmann::json::parse(in), images, hash, index)) {
        index.from_cache = true;
        return index;
      }
      index = DatasetIndex{};
      index.cache_path = cache_path_for(images);
    } catch (const std::exception& e) {
      index = DatasetIndex{};
      index.cache_path = cache_path_for(images);
      index.cache_note = cat("ignored unreadable cache ", index.cache_path, " (", e.what(), ")");
    }
  }

  // Verify in parallel; results land in image order so the index is the same for any thread count.
  std::vector<Verified> results(images.size());
  std::atomic<size_t> next{0};
  const int threads = std::max(1, options.workers > 0 ? options.workers : static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (size_t i = next++; i < images.size(); i = next++) results[i] = verify_sample(images[i], options.nc);
    });
  for (auto& th : pool) th.join();

  auto& c = index.counts;
  c.images = static_cast<int>(images.size());
  for (auto& v : results) {
    if (!v.ok) {
      ++c.corrupt;
      index.skipped.push_back({v.record.image, v.problem});
      continue;
    }
    c.duplicates += v.duplicates;
    if (v.label_missing) ++c.missing;
    else if (v.record.rows.empty()) ++c.empty;
    else ++c.labelled;
    c.boxes += static_cast<int>(v.record.rows.size());
    if (!v.warning.empty()) index.warnings.push_back(v.warning);
    index.records.push_back(std::move(v.record));
  }
  if (!index.cache_path.empty()) {
    try {
      const std::string tmp = index.cache_path + ".tmp";
      {
        std::ofstream out(tmp);
        if (!out) fail("cannot write");
        // Reasons and warnings quote file names; bytes that are not UTF-8 are replaced in the cache only.
        out << to_json(index, images, hash).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        if (!out) fail("write failed");
      }
      fs::rename(tmp, index.cache_path);
    } catch (const std::exception& e) {
      index.cache_note = cat("cache not writable: ", index.cache_path, " (", e.what(), ")");
      index.cache_path.clear();
    }
  }
  return index;
}

std::string describe(const DatasetIndex& index, const std::string& split, size_t limit) {
  const auto& c = index.counts;
  std::ostringstream out;
  out << split << ": " << c.images << " images, " << c.labelled << " labelled, " << c.missing << " without label file, "
      << c.empty << " empty, " << c.corrupt << " skipped, " << c.boxes << " boxes";
  if (c.duplicates) out << ", " << c.duplicates << " duplicate rows removed";
  out << (index.from_cache ? " (from cache " + index.cache_path + ")" : "") << "\n";
  if (!index.cache_note.empty()) out << "  note: " << index.cache_note << "\n";
  for (size_t i = 0; i < index.skipped.size() && i < limit; ++i) out << "  skipped " << index.skipped[i].reason << "\n";
  if (index.skipped.size() > limit) out << "  ... and " << index.skipped.size() - limit << " more skipped\n";
  for (size_t i = 0; i < index.warnings.size() && i < limit; ++i) out << "  warning " << index.warnings[i] << "\n";
  return out.str();
}

}  // namespace kestrel::data
