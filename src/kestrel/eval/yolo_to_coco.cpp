#include "kestrel/eval/yolo_to_coco.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kestrel/core/error.h"

namespace kestrel::eval {
namespace {

namespace fs = std::filesystem;

// ---- image headers ---------------------------------------------------------------------------

// Sequential big-endian reads from the start of a file; every short read is an error naming the file.
class HeaderReader {
 public:
  explicit HeaderReader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    if (!in_) fail(path, ": cannot open the image");
  }
  const std::string& path() const { return path_; }
  uint32_t u8() {
    const int c = in_.get();
    if (c == EOF) fail(path_, ": image header is truncated");
    return static_cast<uint32_t>(c);
  }
  uint32_t big_endian(int bytes) {
    uint32_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | u8();
    return v;
  }
  std::string bytes(size_t n) {
    std::string s(n, '\0');
    in_.read(s.data(), static_cast<std::streamsize>(n));
    if (static_cast<size_t>(in_.gcount()) != n) fail(path_, ": image header is truncated");
    return s;
  }
  void skip(size_t n) { in_.seekg(static_cast<std::streamoff>(n), std::ios::cur); }

 private:
  std::string path_;
  std::ifstream in_;
};

// EXIF orientation (1..8) from an APP1 payload ("Exif\0\0" + TIFF). A malformed block reads as 1 (no
// rotation), which is what decoders do with it.
int exif_orientation(const std::string& payload) {
  if (payload.size() < 14 || payload.compare(0, 6, std::string("Exif\0\0", 6)) != 0) return 1;
  const std::string_view tiff(payload.data() + 6, payload.size() - 6);
  const bool little = tiff.substr(0, 2) == "II";
  if (!little && tiff.substr(0, 2) != "MM") return 1;
  auto get = [&](size_t at, int n) {  // caller keeps `at + n` in range
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      const uint32_t byte = static_cast<uint8_t>(tiff[at + (little ? n - 1 - i : i)]);
      v = (v << 8) | byte;
    }
    return v;
  };
  if (get(2, 2) != 42) return 1;
  const size_t ifd = get(4, 4);
  if (ifd + 2 > tiff.size()) return 1;
  const uint32_t entries = get(ifd, 2);
  for (uint32_t i = 0; i < entries; ++i) {
    const size_t entry = ifd + 2 + 12 * static_cast<size_t>(i);
    if (entry + 12 > tiff.size()) return 1;
    if (get(entry, 2) != 0x0112) continue;
    const uint32_t value = get(entry + 2, 2) == 3 ? get(entry + 8, 2) : 1;  // type 3 = SHORT
    return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

bool is_start_of_frame(uint32_t marker) {
  return marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
}

// Walks the marker segments after SOI up to the first frame header (SOFn: precision, height, width).
ImageSize jpeg_size(HeaderReader& r) {
  int orientation = 1;
  for (;;) {
    if (r.u8() != 0xFF) fail(r.path(), ": corrupt JPEG (expected a marker)");
    uint32_t marker = r.u8();
    while (marker == 0xFF) marker = r.u8();  // fill bytes
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) continue;  // markers without a length
    if (marker == 0xD9 || marker == 0xDA) fail(r.path(), ": JPEG has no frame header before its image data");
    const uint32_t length = r.big_endian(2);  // includes its own two bytes
    if (length < 2) fail(r.path(), ": corrupt JPEG segment length ", length);
    if (is_start_of_frame(marker)) {
      if (length < 7) fail(r.path(), ": corrupt JPEG frame header");
      r.u8();  // sample precision
      const int height = static_cast<int>(r.big_endian(2));
      const int width = static_cast<int>(r.big_endian(2));
      if (width == 0 || height == 0) fail(r.path(), ": JPEG frame header gives size ", width, "x", height);
      return orientation >= 5 ? ImageSize{height, width} : ImageSize{width, height};
    }
    if (marker == 0xE1 && orientation == 1) {
      orientation = exif_orientation(r.bytes(length - 2));
    } else {
      r.skip(length - 2);
    }
  }
}

// The IHDR chunk must come first: length (13), "IHDR", width, height.
ImageSize png_size(HeaderReader& r) {
  r.big_endian(4);
  if (r.bytes(4) != "IHDR") fail(r.path(), ": corrupt PNG (first chunk is not IHDR)");
  const uint32_t width = r.big_endian(4), height = r.big_endian(4);
  if (width == 0 || height == 0 || width > INT_MAX || height > INT_MAX)
    fail(r.path(), ": PNG header gives size ", width, "x", height);
  return {static_cast<int>(width), static_cast<int>(height)};
}

// ---- labels ----------------------------------------------------------------------------------

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

double parse_number(const std::string& token, const std::string& where) {
  char* end = nullptr;
  const double v = std::strtod(token.c_str(), &end);
  if (end != token.c_str() + token.size() || !std::isfinite(v)) fail(where, ": '", token, "' is not a number");
  return v;
}

// [class, cx, cy, w, h] normalised, from a box row or a polygon row.
std::array<double, 5> parse_label_row(const std::vector<std::string>& tokens, const std::string& where,
                                      int64_t num_classes) {
  const size_t n = tokens.size();
  if (n != 5 && (n < 7 || n % 2 == 0))
    fail(where, ": expected 5 values (class x_center y_center width height) or a polygon "
                "(class x1 y1 x2 y2 x3 y3 ...), got ", n);
  std::vector<double> v;
  for (const std::string& t : tokens) v.push_back(parse_number(t, where));
  if (v[0] != std::floor(v[0]) || v[0] < 0 || v[0] >= static_cast<double>(num_classes))
    fail(where, ": class ", tokens[0], " is not one of the dataset's classes 0..", num_classes - 1);
  for (size_t i = 1; i < n; ++i)
    if (v[i] < 0 || v[i] > 1) fail(where, ": coordinate ", tokens[i], " is outside [0, 1] (labels are normalised)");
  if (n == 5) return {v[0], v[1], v[2], v[3], v[4]};
  double x1 = 1, y1 = 1, x2 = 0, y2 = 0;  // polygon -> its bounding box
  for (size_t i = 1; i < n; i += 2) {
    x1 = std::min(x1, v[i]), x2 = std::max(x2, v[i]);
    y1 = std::min(y1, v[i + 1]), y2 = std::max(y2, v[i + 1]);
  }
  return {v[0], (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1};
}

// Integer stems when they are all decimal and distinct, else 1..n.
std::vector<int64_t> image_ids(const std::vector<std::string>& paths) {
  std::vector<int64_t> ids;
  std::set<int64_t> seen;
  for (const std::string& p : paths) {
    const std::string stem = fs::path(p).stem().string();
    const bool decimal = !stem.empty() && stem.size() <= 18 &&
                         std::all_of(stem.begin(), stem.end(), [](unsigned char c) { return std::isdigit(c); });
    if (!decimal || !seen.insert(std::stoll(stem)).second) break;
    ids.push_back(std::stoll(stem));
  }
  if (ids.size() == paths.size()) return ids;
  ids.resize(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) ids[i] = static_cast<int64_t>(i) + 1;
  return ids;
}

}  // namespace

ImageSize read_image_size(const std::string& path) {
  HeaderReader r(path);
  const uint32_t first = r.u8(), second = r.u8();
  if (first == 0xFF && second == 0xD8) return jpeg_size(r);
  if (first == 0x89 && second == 'P') {
    if (r.bytes(6) != std::string("NG\r\n\x1a\n", 6)) fail(path, ": corrupt PNG signature");
    return png_size(r);
  }
  fail(path, ": not a JPEG or PNG file");
}

std::vector<YoloImage> list_yolo_images(const std::string& images_dir) {
  if (!fs::is_directory(images_dir)) fail(images_dir, ": not a folder of images");
  static const std::set<std::string> readable = {".jpg", ".jpeg", ".png", ".mpo"};
  static const std::set<std::string> other = {".bmp", ".dng", ".tif", ".tiff", ".webp", ".pfm"};
  std::vector<std::string> paths;
  const auto options = fs::directory_options::follow_directory_symlink;
  for (const auto& entry : fs::recursive_directory_iterator(images_dir, options)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = lower(entry.path().extension().string());
    if (readable.count(ext)) paths.push_back(entry.path().string());
    if (other.count(ext)) fail(entry.path().string(), ": only JPEG and PNG images can be converted to COCO");
  }
  if (paths.empty()) fail(images_dir, ": no JPEG or PNG images in the folder");
  std::sort(paths.begin(), paths.end());
  const std::vector<int64_t> ids = image_ids(paths);
  std::vector<YoloImage> out(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) out[i] = {paths[i], ids[i], read_image_size(paths[i])};
  return out;
}

std::string yolo_label_path(const std::string& image_path) {
  std::string p = fs::absolute(image_path).lexically_normal().string();
  const std::string images = "/images/", labels = "/labels/";
  const size_t at = p.rfind(images);
  if (at != std::string::npos) p.replace(at, images.size(), labels);
  const size_t dot = p.rfind('.');
  if (dot != std::string::npos && dot > p.rfind('/')) p.erase(dot);
  return p + ".txt";
}

std::vector<YoloBox> read_yolo_labels(const std::string& label_path, ImageSize size, int64_t num_classes) {
  std::ifstream in(label_path);
  if (!in) {
    if (!fs::exists(label_path)) return {};  // an image without a label file has no objects
    fail(label_path, ": cannot read the label file");
  }
  std::vector<YoloBox> boxes;
  std::set<std::array<double, 5>> seen;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream fields(line);
    std::vector<std::string> tokens;
    for (std::string t; fields >> t;) tokens.push_back(t);
    if (tokens.empty()) continue;
    const auto row = parse_label_row(tokens, cat(label_path, ":", number), num_classes);
    if (!seen.insert(row).second) continue;
    const auto [cls, cx, cy, w, h] = row;
    boxes.push_back({static_cast<int64_t>(cls), (cx - w / 2) * size.width, (cy - h / 2) * size.height,
                     w * size.width, h * size.height});
  }
  return boxes;
}

nlohmann::json yolo_to_coco(const std::string& images_dir, const std::vector<std::string>& names) {
  if (names.empty()) fail(images_dir, ": cannot convert to COCO without class names");
  const int64_t num_classes = static_cast<int64_t>(names.size());
  nlohmann::json images = nlohmann::json::array(), annotations = nlohmann::json::array();
  int64_t next_id = 1;
  for (const YoloImage& image : list_yolo_images(images_dir)) {
    images.push_back({{"id", image.id},
                      {"file_name", fs::path(image.path).lexically_relative(images_dir).string()},
                      {"width", image.size.width},
                      {"height", image.size.height}});
    for (const YoloBox& b : read_yolo_labels(yolo_label_path(image.path), image.size, num_classes))
      annotations.push_back({{"id", next_id++}, {"image_id", image.id}, {"category_id", b.class_index},
                             {"bbox", {b.x, b.y, b.w, b.h}}, {"area", b.w * b.h}, {"iscrowd", 0}});
  }
  nlohmann::json categories = nlohmann::json::array();
  for (int64_t i = 0; i < num_classes; ++i) categories.push_back({{"id", i}, {"name", names[i]}});
  return {{"info", {{"description", "YOLO split " + images_dir + ", converted by kestrel"}}},
          {"images", images},
          {"annotations", annotations},
          {"categories", categories}};
}

void write_yolo_as_coco(const std::string& images_dir, const std::vector<std::string>& names,
                        const std::string& json_path) {
  const std::string text = yolo_to_coco(images_dir, names).dump();
  const std::string temporary = json_path + ".tmp";  // written whole, then renamed into place
  {
    std::ofstream out(temporary, std::ios::binary);
    if (!(out << text)) fail(json_path, ": cannot write the COCO annotation file");
  }
  std::error_code error;
  fs::rename(temporary, json_path, error);
  if (error) fail(json_path, ": cannot write the COCO annotation file (", error.message(), ")");
}

}  // namespace kestrel::eval
