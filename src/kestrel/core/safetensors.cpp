#include "kestrel/core/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "kestrel/core/atomic_file.h"
#include "kestrel/core/error.h"
#include "kestrel/core/regular_file.h"
#include "kestrel/core/json_number.h"

namespace kestrel {
namespace {

const std::map<std::string, at::ScalarType>& dtypes() {
  static const std::map<std::string, at::ScalarType> table = {
      {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16}, {"I64", at::kLong},
      {"I32", at::kInt},    {"I16", at::kShort}, {"I8", at::kChar},   {"U8", at::kByte},       {"BOOL", at::kBool}};
  return table;
}

std::string dtype_name(at::ScalarType type, const std::string& key) {
  for (const auto& [name, t] : dtypes())
    if (t == type) return name;
  fail("safetensors: tensor '", key, "' has unsupported dtype ", at::toString(type));
}

// Header lengths beyond this are corrupt files, not real checkpoints (the JSON of a 1,000-layer
// model is well under 1 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// A header number that must be a whole number >= 0 (nlohmann would cast 1.5 to 1, and 1e300 or -1 out of
// range: undefined behaviour or a wrapped value).
uint64_t whole_number(const nlohmann::json& v, const std::string& path, const std::string& key, const char* what) {
  const std::optional<int64_t> x = json_whole_number(v, 0, INT64_MAX);
  if (!x) fail(path, ": tensor '", key, "': ", what, " must be whole numbers from 0 to 2^63-1, not ", json_shown(v));
  return static_cast<uint64_t>(*x);
}

// One tensor's header entry, checked against the data it points into.
struct Entry {
  std::string key;
  at::ScalarType type;
  std::vector<int64_t> shape;
  uint64_t begin, end;  // byte offsets in the data after the header
};

// Notes the header's top-level keys as nlohmann's SAX parser reads them, and the first one given twice.
// (A parser callback would do the same, but nlohmann's callback parser rescans the parent object at every
// closing brace: a crafted header of a million small entries then took hours.)
struct TopLevelKeys : nlohmann::json::json_sax_t {
  std::set<std::string> seen;
  std::string repeated;
  int depth = 0;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return ++depth, true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return ++depth, true; }
  bool end_array() override { return --depth, true; }
  bool key(string_t& k) override {
    if (depth == 1 && !seen.insert(k).second && repeated.empty()) repeated = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) override { throw e; }
};

// The header's bytes parsed as JSON: a tensor named twice is refused (nlohmann keeps the last, silently; the
// format forbids it, as the Rust library).
nlohmann::json parse_header(const std::string& path, const std::string& text) {
  TopLevelKeys keys;
  nlohmann::json header;
  try {
    nlohmann::json::sax_parse(text, &keys);
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": corrupt safetensors header: ", e.what());
  }
  if (!keys.repeated.empty()) fail(path, ": corrupt safetensors header: '", keys.repeated, "' is given twice");
  if (!header.is_object()) fail(path, ": corrupt safetensors header: not a JSON object");
  return header;
}

// One tensor's entry: a known dtype, a shape of whole numbers whose bytes do not overflow, offsets inside the
// data_size bytes and exactly as many bytes as the shape and dtype need. (nlohmann's own type errors are
// caught by the caller.)
Entry parse_entry(const std::string& path, const std::string& key, const nlohmann::json& value, uint64_t data_size) {
  Entry e{key, at::kFloat, {}, 0, 0};
  const std::string dtype = value.at("dtype").get<std::string>();
  auto it = dtypes().find(dtype);
  if (it == dtypes().end()) fail(path, ": tensor '", key, "' has unsupported dtype '", dtype, "'");
  e.type = it->second;
  const auto& shape = value.at("shape");
  if (!shape.is_array()) fail(path, ": tensor '", key, "': shape must be a list");
  // ATen's limit; kestrel's tensors have at most 6 (YOLOv7's anchor_grid), and ATen's checks of a shape
  // of 100,000 dimensions take minutes.
  constexpr size_t kMaxDims = 64;
  if (shape.size() > kMaxDims) fail(path, ": tensor '", key, "' has ", shape.size(), " dimensions; at most ", kMaxDims);
  // Bytes the shape needs, multiplied in order as ATen does: an overflow is a lying header, not an allocation.
  // The strides too (the product of the dimensions, a 0 counting as 1): [0, 2^62, 2^62] is empty but its
  // strides overflow ATen's.
  uint64_t bytes = at::elementSize(e.type), stride_bytes = bytes;
  bool overflow = false;
  for (const auto& d : shape) {
    if (d.is_number_integer() && !d.is_number_unsigned()) fail(path, ": tensor '", key, "' has a negative dimension");
    const uint64_t dim = whole_number(d, path, key, "shape dimensions");
    e.shape.push_back(static_cast<int64_t>(dim));
    overflow |= __builtin_mul_overflow(bytes, dim, &bytes);
    overflow |= __builtin_mul_overflow(stride_bytes, std::max<uint64_t>(dim, 1), &stride_bytes);
  }
  if (overflow || stride_bytes > static_cast<uint64_t>(INT64_MAX))
    fail(path, ": tensor '", key, "' has an impossibly large shape ", shape.dump());
  const auto& offsets = value.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2) fail(path, ": tensor '", key, "': data_offsets must be [begin, end]");
  e.begin = whole_number(offsets[0], path, key, "data_offsets");
  e.end = whole_number(offsets[1], path, key, "data_offsets");
  if (e.begin > e.end || e.end > data_size)
    fail(path, ": tensor '", key, "' lies outside the file (offsets ", e.begin, "..", e.end, ", data ", data_size, " bytes; truncated?)");
  if (e.end - e.begin != bytes)
    fail(path, ": tensor '", key, "' has ", e.end - e.begin, " bytes but its shape and dtype need ", bytes);
  return e;
}

// Sorts the entries by offset and checks that they cover the data exactly: no overlaps, no holes (the
// format's rule: bytes no tensor owns are a damaged or tampered file).
void check_layout(const std::string& path, std::vector<Entry>& entries, uint64_t data_size) {
  // By begin, then end: an empty tensor at the offset where the next one starts is no overlap.
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  for (size_t i = 1; i < entries.size(); ++i)
    if (entries[i].begin < entries[i - 1].end) fail(path, ": tensors '", entries[i - 1].key, "' and '", entries[i].key, "' overlap");
  uint64_t covered = 0;
  for (const Entry& e : entries) {
    if (e.begin != covered) fail(path, ": corrupt safetensors file: bytes ", covered, "..", e.begin, " of the data belong to no tensor");
    covered = e.end;
  }
  if (covered != data_size) fail(path, ": corrupt safetensors file: bytes ", covered, "..", data_size, " of the data belong to no tensor");
}

// Reads one tensor's bytes from the data starting at data_start in the file.
at::Tensor read_tensor(const std::string& path, std::ifstream& in, uint64_t data_start, const Entry& e) {
  at::Tensor t;
  try {
    t = at::empty(e.shape, at::TensorOptions().dtype(e.type));
  } catch (const c10::Error& error) {  // out of memory, or a shape ATen refuses that the checks above let by
    fail(path, ": tensor '", e.key, "' of shape ", at::IntArrayRef(e.shape), " cannot be allocated: ", error.what_without_backtrace());
  }
  in.seekg(static_cast<std::streamoff>(data_start + e.begin));
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(e.end - e.begin));
  if (!in) fail(path, ": truncated while reading tensor '", e.key, "'");
  // A bool byte other than 0 or 1 is undefined behaviour wherever ATen reads it as bool.
  if (e.type == at::kBool) {
    const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel(); ++i)
      if (bytes[i] > 1) fail(path, ": tensor '", e.key, "' (BOOL) holds the byte ", int{bytes[i]}, " at element ", i, "; only 0 and 1 are booleans");
  }
  return t;
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> blobs;
  uint64_t offset = 0;
  for (const auto& [key, tensor] : tensors) {
    if (header.contains(key)) fail(path, ": duplicate tensor name '", key, "'");
    at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    const uint64_t bytes = t.numel() * t.element_size();
    header[key] = {{"dtype", dtype_name(t.scalar_type(), key)}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    blobs.push_back(t);
  }
  std::string json = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // U+FFFD for stray bytes (a path that is not UTF-8)
  json.append((8 - json.size() % 8) % 8, ' ');  // the spec allows space padding; keeps the data 8-byte aligned

  namespace fs = std::filesystem;
  const fs::path target(path);
  if (target.has_parent_path()) fs::create_directories(target.parent_path());
  const uint64_t n = json.size();
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>(n >> (8 * i));
  std::vector<std::string_view> parts = {{len, 8}, json};
  for (const auto& t : blobs) parts.emplace_back(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  write_file_atomic(path, parts, Durability::kFlushed);
}

namespace {

// How to convert an upstream checkpoint: the converter's full path where the source tree is, as messages are
// read from any working folder.
std::string import_hint() {
  const std::string in_tree = std::string(KESTREL_SOURCE_DIR) + "/tools/import_pt.py";
  const std::string tool = std::filesystem::exists(in_tree) ? in_tree : "tools/import_pt.py";
  return "convert it once with: python3 " + tool + " W.pt W.safetensors (docs/import.md)";
}

}  // namespace

SafetensorsContents load_safetensors(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) fail("a weights file is needed, but the path given is empty ('')");
  if (!fs::exists(path, ec)) {
    if (fs::path(path).extension() == ".pt") {
      // runs/train/exp/weights/best.pt, upstream's habit: kestrel's run wrote best.safetensors beside it.
      const fs::path ours = fs::path(path).replace_extension(".safetensors");
      if (fs::exists(ours, ec))
        fail(path, ": weights file not found; kestrel writes weights as .safetensors: ", ours.string());
      // train.py downloads a missing yolov5s.pt; kestrel downloads nothing and reads .safetensors only.
      fail(path, ": weights file not found (kestrel downloads nothing: get the upstream checkpoint and ", import_hint(), ")");
    }
    fail(path, ": weights file not found");
  }
  require_regular_file(path);  // a directory or a FIFO, named as such
  const uint64_t file_size = fs::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (!in || ec) fail(path, ": cannot be read");
  if (file_size < 8) fail(path, ": not a safetensors file (", file_size, " bytes)");
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  if (std::string(reinterpret_cast<const char*>(len), 4) == std::string("PK\x03\x04", 4))  // torch.save's zip archive
    fail(path, ": a PyTorch checkpoint (.pt, a zip archive), not safetensors; kestrel never unpickles weights: ", import_hint());
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  if (n < 2 || n > kMaxHeaderBytes || n > file_size - 8)
    fail(path, ": not a safetensors file (header length ", n, " does not fit a ", file_size, "-byte file; a PyTorch .pt "
               "checkpoint? ", import_hint(), ")");
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  const nlohmann::json header = parse_header(path, text);

  const uint64_t data_size = file_size - 8 - n;
  SafetensorsContents contents;
  std::vector<Entry> entries;
  try {
    for (const auto& [key, value] : header.items()) {
      if (key != "__metadata__") {
        entries.push_back(parse_entry(path, key, value, data_size));
        continue;
      }
      if (!value.is_object()) fail(path, ": corrupt safetensors header: __metadata__ is not a JSON object");
      for (const auto& [k, v] : value.items()) contents.metadata[k] = v.get<std::string>();
    }
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": corrupt safetensors header: ", e.what());
  }
  check_layout(path, entries, data_size);
  for (const Entry& e : entries) contents.tensors.emplace_back(e.key, read_tensor(path, in, 8 + n, e));
  return contents;
}

}  // namespace kestrel
