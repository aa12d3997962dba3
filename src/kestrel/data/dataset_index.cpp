#include "kestrel/data/dataset_index.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "kestrel/core/error.h"
#include "kestrel/core/json_number.h"
#include "kestrel/data/image_files.h"
#include "kestrel/data/image_io.h"
#include "kestrel/data/video_io.h"

namespace kestrel::data {
namespace fs = std::filesystem;
namespace {

// 2: label lines end at \r, \v and \f too (as upstream's splitlines), so older caches parsed some files differently.
// 3: images other than JPEG and PNG are decoded (OpenCV plugin); older caches list them all as skipped.
constexpr int kCacheVersion = 3;
constexpr int kMinImageSide = 10;  // upstream: "image size <10 pixels"

bool is_jpeg_or_png_name(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

// FNV-1a over every image and label path with its size and modification time, and nc. When the split has
// images in other formats (BMP, TIFF ...), also whether the OpenCV plugin that decodes them loads: a cache
// made without it lists them as skipped, one made with it as images. (Only then: loading it takes time.)
std::string fingerprint(const std::vector<std::string>& images, int nc) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  mix(&nc, sizeof nc);
  if (!std::all_of(images.begin(), images.end(), is_jpeg_or_png_name)) {
    const char plugin = video_support_problem().empty() ? 1 : 0;
    mix(&plugin, 1);
  }
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

// A label value as the shortest decimal that reads back as the same float ("0.5213", not the double
// 0.52130001783370972 that nlohmann would write for it): a cache half the size, parsed twice as fast.
// The value that goes through the file is the same float; the check keeps that true at any boundary.
double shortest_float(float v) {
  char text[32];
  const auto written = std::to_chars(text, text + sizeof text, v);
  double d = 0;
  if (written.ec != std::errc() || std::from_chars(text, written.ptr, d).ec != std::errc()) return v;
  return static_cast<float>(d) == v ? d : static_cast<double>(v);
}

// Records and skipped files refer to images by their position in the listing (the fingerprint
// guarantees the same listing): paths need not be UTF-8, JSON strings must be.
nlohmann::json to_json(const DatasetIndex& index, const std::vector<std::string>& images, const std::string& hash) {
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < images.size(); ++i) position[images[i]] = i;
  nlohmann::json records = nlohmann::json::array();
  for (const auto& r : index.records) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& row : r.rows) {
      nlohmann::json box = nlohmann::json::array(), polygon = nlohmann::json::array();
      for (float v : row.box) box.push_back(shortest_float(v));
      for (float v : row.polygon) polygon.push_back(shortest_float(v));
      rows.push_back({std::move(box), std::move(polygon)});
    }
    records.push_back({position.at(r.image), r.width, r.height, rows});
  }
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& s : index.skipped) skipped.push_back({position.at(s.path), s.reason});
  const auto& c = index.counts;
  return {{"version", kCacheVersion}, {"hash", hash}, {"records", records}, {"skipped", skipped}, {"warnings", index.warnings},
          {"counts", {c.images, c.labelled, c.missing, c.empty, c.corrupt, c.duplicates, c.boxes}}};
}

// A corrupt cache (damaged, edited) must not be trusted: every value is checked as parse_labels and
// verify_sample would have left it; a problem throws and the split is verified again.
int64_t cached_whole(const nlohmann::json& v, int64_t min, int64_t max, const char* what) {
  const std::optional<int64_t> x = json_whole_number(v, min, max);
  if (!x) fail("corrupt ", what);
  return *x;
}

float cached_coordinate(const nlohmann::json& v) {
  const double x = v.get<double>();
  if (!(x >= 0 && x <= 1)) fail("corrupt label coordinate");
  return static_cast<float>(x);
}

LabelRow cached_row(const nlohmann::json& row, int nc) {
  const nlohmann::json& box = row.at(0);
  const nlohmann::json& polygon = row.at(1);
  if (!box.is_array() || box.size() != 5 || !polygon.is_array() || (!polygon.empty() && (polygon.size() < 6 || polygon.size() % 2)))
    fail("corrupt label row");
  LabelRow r;
  const double cls = box[0].get<double>();
  if (!(cls >= 0 && cls == std::floor(cls) && cls < (nc > 0 ? nc : 1 << 24))) fail("corrupt class");
  r.box[0] = static_cast<float>(cls);
  for (size_t i = 1; i < 5; ++i) r.box[i] = cached_coordinate(box[i]);
  for (const auto& v : polygon) r.polygon.push_back(cached_coordinate(v));
  return r;
}

bool from_json(const nlohmann::json& j, const std::vector<std::string>& images, const std::string& hash, int nc,
               DatasetIndex& index) {
  if (j.value("version", 0) != kCacheVersion || j.value("hash", "") != hash) return false;
  const int64_t n = static_cast<int64_t>(images.size());
  std::vector<bool> seen(images.size());
  auto position = [&](const nlohmann::json& v) {
    const auto i = static_cast<size_t>(cached_whole(v, 0, n - 1, "image position"));
    if (seen[i]) fail("corrupt cache: an image listed twice");
    seen[i] = true;
    return i;
  };
  size_t boxes = 0, next = 0;
  for (const auto& r : j.at("records")) {
    const size_t i = position(r.at(0));
    if (i < next) fail("corrupt cache: records out of order");
    next = i + 1;
    const std::string& image = images[i];
    ImageRecord rec{image, label_path_for(image), static_cast<int>(cached_whole(r.at(1), kMinImageSide, INT_MAX, "image size")),
                    static_cast<int>(cached_whole(r.at(2), kMinImageSide, INT_MAX, "image size")), {}};
    for (const auto& row : r.at(3)) rec.rows.push_back(cached_row(row, nc));
    boxes += rec.rows.size();
    index.records.push_back(std::move(rec));
  }
  for (const auto& s : j.at("skipped")) index.skipped.push_back({images[position(s.at(0))], s.at(1)});
  index.warnings = j.at("warnings").get<std::vector<std::string>>();
  const auto& c = j.at("counts");
  if (!c.is_array() || c.size() != 7) fail("corrupt counts");
  int counts[7];
  for (size_t i = 0; i < 7; ++i) counts[i] = static_cast<int>(cached_whole(c[i], 0, INT_MAX, "counts"));
  index.counts = {counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], counts[6]};
  const IndexCounts& k = index.counts;
  if (k.images != n || index.records.size() + index.skipped.size() != images.size() ||
      static_cast<size_t>(k.corrupt) != index.skipped.size() || static_cast<size_t>(k.boxes) != boxes ||
      static_cast<size_t>(k.labelled) + k.missing + k.empty != index.records.size())
    fail("corrupt cache: counts do not match its records");
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
      if (from_json(nlohmann::json::parse(in), images, hash, options.nc, index)) {
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
    // Per process: the ranks of a data-parallel run index the same split at once.
    const std::string tmp = cat(index.cache_path, ".tmp", ::getpid());
    try {
      {
        std::ofstream out(tmp);
        if (!out) fail("cannot write");
        // Reasons and warnings quote file names; bytes that are not UTF-8 are replaced in the cache only.
        out << to_json(index, images, hash).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        if (!out) fail("write failed");
      }
      fs::rename(tmp, index.cache_path);
    } catch (const std::exception& e) {
      std::error_code ec;
      fs::remove(tmp, ec);  // a partial file of this process
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
  if (index.warnings.size() > limit) out << "  ... and " << index.warnings.size() - limit << " more warnings\n";
  return out.str();
}

}  // namespace kestrel::data
