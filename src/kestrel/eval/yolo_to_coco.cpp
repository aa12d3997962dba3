#include "kestrel/eval/yolo_to_coco.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "kestrel/core/atomic_file.h"
#include "kestrel/core/error.h"
#include "kestrel/core/utf8.h"
#include "kestrel/data/image_files.h"

namespace kestrel::eval {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string file_name(const std::string& image, const std::string& images_root) {
  if (images_root.empty()) return image;
  const fs::path relative = fs::path(image).lexically_relative(images_root);
  if (relative.empty() || *relative.begin() == "..") return image;
  return relative.string();
}

}  // namespace

std::vector<int64_t> coco_image_ids(const std::vector<std::string>& paths) {
  std::vector<int64_t> ids;
  std::set<int64_t> seen;
  for (const std::string& path : paths) {
    const std::string stem = fs::path(path).stem().string();
    const bool decimal = !stem.empty() && stem.size() <= 18 &&
                         std::all_of(stem.begin(), stem.end(), [](unsigned char c) { return std::isdigit(c); });
    if (!decimal || !seen.insert(std::stoll(stem)).second) break;
    ids.push_back(std::stoll(stem));
  }
  if (ids.size() == paths.size()) return ids;
  std::vector<size_t> order(paths.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return paths[a] < paths[b]; });
  ids.assign(paths.size(), 0);
  for (size_t rank = 0; rank < order.size(); ++rank) ids[order[rank]] = static_cast<int64_t>(rank) + 1;
  return ids;
}

std::vector<int64_t> coco_image_ids(const std::vector<std::string>& paths, const CocoAnnotations& annotations) {
  std::vector<int64_t> ids = coco_image_ids(paths);
  const bool named = std::any_of(annotations.file_names.begin(), annotations.file_names.end(),
                                 [](const std::string& n) { return !n.empty(); });
  if (!named) return ids;
  // file_name -> id, looked up by the path's trailing components, longest first
  std::map<std::string, int64_t> by_name;
  for (size_t i = 0; i < annotations.file_names.size(); ++i)
    if (!annotations.file_names[i].empty())
      by_name.emplace(fs::path(annotations.file_names[i]).lexically_normal().generic_string(), annotations.image_ids[i]);
  int64_t unknown = annotations.image_ids.empty()
                        ? 0 : *std::max_element(annotations.image_ids.begin(), annotations.image_ids.end());
  for (size_t k = 0; k < paths.size(); ++k) {
    const fs::path path = fs::path(paths[k]).lexically_normal();
    std::vector<std::string> parts;
    for (const auto& part : path) parts.push_back(part.generic_string());
    std::optional<int64_t> found;
    std::string suffix;
    for (size_t i = parts.size(); i-- > 0;) {  // x.jpg, val/x.jpg, images/val/x.jpg ... the longest match wins
      suffix = suffix.empty() ? parts[i] : parts[i] + "/" + suffix;
      if (const auto it = by_name.find(suffix); it != by_name.end()) found = it->second;
    }
    ids[k] = found ? *found : ++unknown;
  }
  return ids;
}

const std::vector<int>& coco80_to_coco91_ids() {
  static const std::vector<int> ids = [] {
    const std::set<int> unused = {12, 26, 29, 30, 45, 66, 68, 69, 71, 83};
    std::vector<int> v;
    for (int id = 1; id <= 90; ++id)
      if (!unused.count(id)) v.push_back(id);
    return v;
  }();
  return ids;
}

bool has_coco_val_path(const data::DatasetConfig& cfg) {
  return cfg.val.size() == 1 && ends_with(fs::path(cfg.val[0]).lexically_normal().string(), "coco/val2017.txt");
}

bool has_coco_yaml_name(const data::DatasetConfig& cfg) {
  return ends_with(fs::path(cfg.source).filename().string(), "coco.yaml");
}

bool is_coco_dataset(const data::DatasetConfig& cfg) { return has_coco_yaml_name(cfg) || has_coco_val_path(cfg); }

std::vector<int> coco_category_ids(bool is_coco, size_t nc) {
  const std::vector<int>& coco = coco80_to_coco91_ids();
  if (!is_coco || nc > coco.size()) return {};
  return {coco.begin(), coco.begin() + static_cast<std::ptrdiff_t>(nc)};
}

std::vector<int> coco_category_ids_for(const std::vector<std::string>& names, const CocoAnnotations& annotations,
                                       bool is_coco) {
  std::map<std::string, int64_t> by_name;
  for (size_t i = 0; i < annotations.category_names.size(); ++i)
    if (!annotations.category_names[i].empty()) by_name.emplace(annotations.category_names[i], annotations.category_ids[i]);
  const std::set<int64_t> listed(annotations.category_ids.begin(), annotations.category_ids.end());
  std::vector<int> ids;
  for (const std::string& name : names) {
    const auto it = by_name.find(name);
    if (it == by_name.end()) break;
    if (it->second < INT32_MIN || it->second > INT32_MAX)  // predictions carry int ids (as COCO's own)
      fail(annotations.source, ": category '", name, "' has id ", it->second, ", beyond the 32-bit ids kestrel writes");
    ids.push_back(static_cast<int>(it->second));
  }
  if (ids.size() == names.size()) return ids;
  // val.py's coco80_to_coco91_class()[c] for any class count up to 80 (--single-cls: class 0, person).
  const std::vector<int> coco = coco_category_ids(is_coco, names.size());
  if (!coco.empty() && std::all_of(coco.begin(), coco.end(), [&](int id) { return listed.count(id); }))
    return coco;
  ids.clear();
  for (size_t c = 0; c < names.size(); ++c) {
    if (!listed.count(static_cast<int64_t>(c)))
      fail(annotations.source, ": its categories match neither the dataset's class names nor their indices (class ", c, " '",
           names[c], "' is neither a category name nor a category id there)");
    ids.push_back(static_cast<int>(c));
  }
  return ids;
}

nlohmann::json coco_annotations(const data::DatasetIndex& index, const std::vector<std::string>& names,
                                const std::string& images_root) {
  std::vector<std::string> paths;
  for (const data::ImageRecord& r : index.records) paths.push_back(r.image);
  const std::vector<int64_t> ids = coco_image_ids(paths);
  nlohmann::json images = nlohmann::json::array(), annotations = nlohmann::json::array();
  int64_t next_id = 1;
  for (size_t i = 0; i < index.records.size(); ++i) {
    const data::ImageRecord& r = index.records[i];
    const std::string name = file_name(r.image, images_root);
    // JSON holds UTF-8: written with replacement characters, the name would match no image when val reads it back.
    if (drop_invalid_utf8(name).dropped)
      fail(r.image, ": the file name is not UTF-8, which a COCO JSON file cannot hold; rename the image (and its label file)");
    images.push_back({{"id", ids[i]},
                      {"file_name", name},
                      {"width", r.width},
                      {"height", r.height}});
    const double W = r.width, H = r.height;
    for (const data::LabelRow& row : r.rows) {
      const auto cls = static_cast<int64_t>(row.box[0]);
      if (cls < 0 || cls >= static_cast<int64_t>(names.size()))
        fail(r.label, ": class ", cls, " has no name (the dataset names ", names.size(), " classes)");
      const double cx = row.box[1], cy = row.box[2], w = row.box[3] * W, h = row.box[4] * H;
      annotations.push_back({{"id", next_id++}, {"image_id", ids[i]}, {"category_id", cls},
                             {"bbox", {cx * W - w / 2, cy * H - h / 2, w, h}}, {"area", w * h}, {"iscrowd", 0}});
    }
  }
  nlohmann::json categories = nlohmann::json::array();
  for (size_t i = 0; i < names.size(); ++i) categories.push_back({{"id", i}, {"name", names[i]}});
  const std::string from = images_root.empty() ? "YOLO split" : "YOLO split " + images_root;
  return {{"info", {{"description", from + ", converted by kestrel"}}},
          {"images", images},
          {"annotations", annotations},
          {"categories", categories}};
}

nlohmann::json yolo_to_coco(const std::string& images_dir, const std::vector<std::string>& names) {
  if (names.empty()) fail(images_dir, ": cannot convert to COCO without class names");
  if (!fs::is_directory(images_dir)) fail(images_dir, ": not a folder of images");
  // Absolute, so that the images -> labels rule also finds a "/images/" at the start of a relative path.
  fs::path absolute = fs::absolute(images_dir).lexically_normal();
  if (absolute.filename().empty()) absolute = absolute.parent_path();  // "images/val/" -> ".../images/val"
  const std::string root = absolute.string();
  const std::vector<std::string> listed = data::list_images({root}, images_dir);
  if (listed.empty()) fail(images_dir, ": no images in the folder");
  const data::DatasetIndex index =
      data::index_split(listed, data::IndexOptions{static_cast<int>(names.size()), 0, false});
  if (!index.skipped.empty()) {
    std::string reasons;
    constexpr size_t kShown = 50;
    for (size_t i = 0; i < index.skipped.size() && i < kShown; ++i) reasons += "\n  " + index.skipped[i].reason;
    if (index.skipped.size() > kShown) reasons += cat("\n  ... and ", index.skipped.size() - kShown, " more");
    fail(images_dir, ": ", index.skipped.size(), " of ", listed.size(),
         " image(s) failed verification, and a COCO ground-truth file must not silently lose images:", reasons);
  }
  return coco_annotations(index, names, root);
}

void write_yolo_as_coco(const std::string& images_dir, const std::vector<std::string>& names,
                        const std::string& json_path) {
  write_file_atomic(json_path, {yolo_to_coco(images_dir, names).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)}, Durability::kFlushed);
}

}  // namespace kestrel::eval
