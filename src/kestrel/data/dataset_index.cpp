#include "kestrel/data/dataset_index.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "kestrel/core/ascii_lower.h"
#include "kestrel/core/atomic_file.h"
#include "kestrel/core/error.h"
#include "kestrel/data/image_files.h"
#include "kestrel/data/image_io.h"
#include "kestrel/data/label_cache.h"
#include "kestrel/data/video_io.h"

namespace kestrel::data {
namespace fs = std::filesystem;
namespace {

bool is_jpeg_or_png_name(const std::string& path) {
  const std::string ext = ascii_lower(fs::path(path).extension().string());
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

// Classes are not checked here (check_classes, after the cache).
SampleCheck verify_sample(const std::string& image) {
  SampleCheck v;
  v.record.image = image;
  v.record.label = label_path_for(image);
  try {
    // A file that cannot be read now (permissions, a flaky mount) may be readable next time: said, not cached.
    std::error_code ec;
    for (const std::string& file : {image, v.record.label})
      if (::access(file.c_str(), R_OK) != 0 && (errno == EACCES || errno == EPERM || errno == EIO)) {
        v.passing = true;
        fail(file, ": cannot be read (", std::strerror(errno), ")");
      }
    const std::vector<uint8_t> bytes = read_file_bytes(image);
    // Upstream's check: PIL must identify the content as one of IMG_FORMATS (a PPM named .jpg is refused).
    if (const std::string format = format_upstream_datasets_refuse(bytes); !format.empty())
      fail(image, ": invalid image format ", format, " (by its content; datasets take JPEG, PNG, BMP, TIFF, WebP, as upstream)");
    v.needs_plugin = decoded_by_plugin(bytes);
    const DecodedImage decoded = decode_image(bytes, image);
    v.record.width = decoded.image.cols;
    v.record.height = decoded.image.rows;
    if (v.record.width < kMinImageSide || v.record.height < kMinImageSide)
      fail(image, ": image size ", v.record.width, "x", v.record.height, " is below 10 pixels");
    if (!decoded.warning.empty()) v.warning = cat(image, ": decoded with a warning: ", decoded.warning);
    if (fs::exists(v.record.label, ec)) {
      const auto text = read_file_bytes(v.record.label);
      ParsedLabels parsed = parse_labels(std::string(text.begin(), text.end()), v.record.label, /*nc=*/0);
      v.duplicates = parsed.duplicates_removed;
      if (!parsed.all_polygons())
        for (auto& r : parsed.rows) r.polygon.clear();
      v.record.rows = std::move(parsed.rows);
      if (v.duplicates)  // after a decoder warning, not instead of it
        v.warning += cat(v.warning.empty() ? "" : "; ", v.record.label, ": ", v.duplicates, " duplicate row(s) removed");
    } else {
      v.label_missing = true;
    }
    v.ok = true;
  } catch (const Error& e) {
    v.problem = e.what();
  } catch (const std::exception& e) {  // e.g. bad_alloc for a header that claims a huge image under a memory limit
    v.problem = cat(image, ": ", e.what());
    v.passing = true;
  } catch (...) {
    v.problem = cat(image, ": unreadable (unknown error)");
    v.passing = true;
  }
  return v;
}

std::string cache_path_for(const std::vector<std::string>& images) {
  if (images.empty()) return "";
  return fs::path(label_path_for(images.front())).parent_path().string() + ".kestrel.cache";
}

// A verified sample with a class >= nc (nc > 0) becomes a skipped one, with the message the label file's
// parse gives under nc (its first such row, with the line). The cache holds outcomes without this check
// (as upstream's, which train.py checks against nc afterwards), so that --single-cls (no check) and another
// nc reuse it.
// A class above kMaxClassIndex failed the parse without nc already: with nc, it is one beyond nc, said so.
void check_classes(SampleCheck& v, int nc) {
  if (nc <= 0) return;
  if (!v.ok && v.problem.find(kBeyondAnyClassIndex) == std::string::npos) return;
  if (v.ok) {
    float largest = -1;
    for (const LabelRow& row : v.record.rows) largest = std::max(largest, row.box[0]);
    if (largest < static_cast<float>(nc)) return;
    v.ok = false;
    v.problem = cat(v.record.label, ": class ", largest, kExceedsDatasetNc, nc, " (classes 0..", nc - 1, ")");
  }
  try {  // the file's own first offending row (it was parsed without the check before)
    const auto text = read_file_bytes(v.record.label);
    (void)parse_labels(std::string(text.begin(), text.end()), v.record.label, nc);
  } catch (const Error& e) {
    v.problem = e.what();
  }
}

// The cache file's entries (outcomes without the class check), or none with a note when it is missing or
// damaged; one written with a class check by an earlier version (nc != 0) is rebuilt.
LabelCache read_cache(const std::string& path, std::string& note) {
  constexpr int nc = 0;
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return {};
  try {
    // A FIFO there would block the read (a hang); it is passed over (and left: the write that follows
    // refuses to replace what is not a regular file, said in the note).
    if (!fs::is_regular_file(path, ec)) fail("not a regular file");
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot be read");
    const std::string bytes(std::istreambuf_iterator<char>(in), {});
    if (!bytes.empty() && bytes[0] == '{') return {};  // the JSON cache of kestrel before version 4: rebuilt quietly
    LabelCache cache = decode_label_cache(bytes);
    if (cache.nc == nc) return cache;
  } catch (const std::exception& e) {
    note = cat("ignored unreadable cache ", path, " (", e.what(), ")");
  }
  return {};
}

}  // namespace

namespace {

// verify_sample of images[i] for every i in to_verify, into results[i], on options.workers threads (0: one
// per hardware thread). Results land in image order, so the index is the same for any thread count.
void verify_in_parallel(const std::vector<std::string>& images, const std::vector<size_t>& to_verify,
                        const IndexOptions& options, std::vector<SampleCheck>& results) {
  std::atomic<size_t> next{0};
  const int threads = std::max(1, options.workers > 0 ? options.workers : static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  const auto join_all = [&pool] {
    for (auto& th : pool) th.join();
  };
  try {  // verify_sample catches everything; a thread that cannot be started must not leave joinable ones behind
    for (int t = 0; t < std::min<int>(threads, static_cast<int>(std::max<size_t>(to_verify.size(), 1))); ++t)
      pool.emplace_back([&] {
        for (size_t k = next++; k < to_verify.size(); k = next++) results[to_verify[k]] = verify_sample(images[to_verify[k]]);
      });
  } catch (...) {
    next = to_verify.size();  // the running threads stop after their current image
    join_all();
    throw;
  }
  join_all();
}

// The split's counts, kept records, skipped files and warnings from every listed image's outcome.
void tally(std::vector<SampleCheck>& results, DatasetIndex& index) {
  auto& c = index.counts;
  c.images = static_cast<int>(results.size());
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
}

}  // namespace

DatasetIndex index_split(const std::vector<std::string>& images, const IndexOptions& options) {
  DatasetIndex index;
  index.cache_path = options.use_cache ? cache_path_for(images) : "";
  const bool other_formats = !std::all_of(images.begin(), images.end(), is_jpeg_or_png_name);
  // Loading the plugin takes time: only asked when some image needs it (by its name, or a cached CMYK JPEG).
  const auto plugin_state = [] { return video_support_problem().empty() ? PluginState::kLoaded : PluginState::kMissing; };
  PluginState plugin = other_formats ? plugin_state() : PluginState::kUnknown;
  LabelCache cache = read_cache(index.cache_path, index.cache_note);
  const auto needs_plugin = [](const std::string& image, const SampleCheck& check) {
    return !is_jpeg_or_png_name(image) || check.needs_plugin;
  };
  if (plugin == PluginState::kUnknown &&
      std::any_of(cache.entries.begin(), cache.entries.end(), [](const auto& e) { return e.second.check.needs_plugin; }))
    plugin = plugin_state();

  // Each image's outcome from the cache while its image and label file are unchanged; the others (and
  // images of other formats checked under another plugin state) verified again. Stamps are taken before
  // the files are read: a file changed meanwhile is verified again next time.
  std::vector<SampleCheck> results(images.size());
  std::vector<FileStamp> image_stamps(images.size()), label_stamps(images.size());
  std::vector<size_t> to_verify;
  std::unordered_map<std::string, size_t> first_listed;  // an image listed twice is verified once
  std::vector<size_t> repeats;
  for (size_t i = 0; i < images.size(); ++i) {
    if (!first_listed.emplace(images[i], i).second) {
      repeats.push_back(i);
      continue;
    }
    image_stamps[i] = stamp_of(images[i]);
    label_stamps[i] = stamp_of(label_path_for(images[i]));
    const auto it = cache.entries.find(images[i]);
    const bool reusable = it != cache.entries.end() && it->second.image == image_stamps[i] &&
                          it->second.label == label_stamps[i] &&
                          (!needs_plugin(images[i], it->second.check) || cache.plugin == plugin);
    if (reusable) results[i] = std::move(it->second.check);
    else to_verify.push_back(i);
    if (it != cache.entries.end()) cache.entries.erase(it);  // what is left: entries of images not listed
  }

  verify_in_parallel(images, to_verify, options, results);
  index.verified = static_cast<int>(to_verify.size());
  std::vector<bool> verified_now(images.size());
  for (size_t i : to_verify) verified_now[i] = true;
  for (size_t i : repeats) {
    const size_t first = first_listed.at(images[i]);
    results[i] = results[first];
    index.verified += verified_now[first];  // counted per listing, as counts.images
  }
  index.from_cache = !images.empty() && to_verify.empty();

  // A CMYK JPEG verified just now loaded the plugin: the state its entry holds under.
  if (plugin == PluginState::kUnknown &&
      std::any_of(results.begin(), results.end(), [](const SampleCheck& c) { return c.needs_plugin; }))
    plugin = plugin_state();
  if (!index.cache_path.empty() && (!index.from_cache || cache.plugin != plugin)) {
    // Entries of images not in this listing (another list file of the same label folder) are kept while
    // their files are unchanged.
    LabelCache out;
    out.nc = 0;  // no class check (check_classes)
    out.plugin = plugin;
    for (auto& [image, entry] : cache.entries)
      if (entry.image == stamp_of(image) && entry.label == stamp_of(label_path_for(image)) &&
          (!needs_plugin(image, entry.check) || cache.plugin == plugin))  // the file's plugin state becomes this one's
        out.entries.emplace(image, std::move(entry));
    for (const auto& [image, i] : first_listed)
      if (!results[i].passing) out.entries[image] = CacheEntry{image_stamps[i], label_stamps[i], results[i]};
    try {
      write_file_atomic(index.cache_path, {encode_label_cache(out)}, Durability::kRename);
    } catch (const Error& e) {
      index.cache_note = cat("cache not writable: ", e.what());
      index.cache_path.clear();
    }
  }

  for (SampleCheck& v : results) check_classes(v, options.nc);
  tally(results, index);
  return index;
}

void require_usable(const DatasetIndex& index, const std::string& source, const std::string& split,
                    const std::vector<std::string>& entries) {
  if (!index.records.empty()) return;
  std::string where;
  for (const std::string& e : entries) where += (where.empty() ? "" : ", ") + e;
  if (index.counts.images == 0) fail(source, ": the ", split, " split (", where, ") has no images");
  fail(source, ": none of the ", index.counts.images, " images of the ", split, " split (", where, ") is usable (",
       index.skipped.size(), " skipped, listed above)");
}

std::string describe(const DatasetIndex& index, const std::string& split, size_t limit) {
  const auto& c = index.counts;
  std::ostringstream out;
  out << split << ": " << c.images << " images, " << c.labelled << " labelled, " << c.missing << " without label file, "
      << c.empty << " empty, " << c.corrupt << " skipped, " << c.boxes << " boxes";
  if (c.duplicates) out << ", " << c.duplicates << " duplicate rows removed";
  if (index.from_cache) out << " (from cache " << index.cache_path << ")";
  else if (index.verified < c.images && !index.cache_path.empty())
    out << " (" << index.verified << " verified, the others from cache " << index.cache_path << ")";
  out << "\n";
  if (!index.cache_note.empty()) out << "  note: " << index.cache_note << "\n";
  for (size_t i = 0; i < index.skipped.size() && i < limit; ++i) out << "  skipped " << index.skipped[i].reason << "\n";
  if (index.skipped.size() > limit) out << "  ... and " << index.skipped.size() - limit << " more skipped\n";
  // Upstream stops at a class beyond nc; kestrel skips the image. Many such images usually mean a wrong nc or
  // names in the dataset YAML, which one line should say, however long the list above.
  const auto beyond_nc = std::count_if(index.skipped.begin(), index.skipped.end(), [](const auto& s) {
    return s.reason.find(kExceedsDatasetNc) != std::string::npos;
  });
  if (beyond_nc > 0)
    out << "  " << beyond_nc << " of the skipped images have classes beyond the dataset's nc: are nc and names in the "
        << "dataset YAML right?\n";
  for (size_t i = 0; i < index.warnings.size() && i < limit; ++i) out << "  warning " << index.warnings[i] << "\n";
  if (index.warnings.size() > limit) out << "  ... and " << index.warnings.size() - limit << " more warnings\n";
  return out.str();
}

}  // namespace kestrel::data
