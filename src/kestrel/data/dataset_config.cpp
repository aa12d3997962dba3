#include "kestrel/data/dataset_config.h"

#include <filesystem>
#include <fstream>
#include <map>

#include <yaml-cpp/yaml.h>

#include "kestrel/core/error.h"
#include "kestrel/core/yaml_file.h"

namespace kestrel::data {
namespace fs = std::filesystem;

namespace {

std::vector<std::string> resolve_entries(const YAML::Node& node, const fs::path& root, const std::string& source,
                                         const char* key) {
  std::vector<std::string> out;
  auto add = [&](const YAML::Node& n, bool single) {
    if (!n.IsScalar() || n.Scalar().empty()) fail(source, ": '", key, "' must be a path or a list of paths");
    const std::string text = n.Scalar();
    fs::path p(text);
    fs::path resolved = (p.is_absolute() ? p : root / p).lexically_normal();
    // Upstream's check_dataset: a single path "../x" that does not exist is tried as "x" (Roboflow's
    // exports name their splits ../train/images from a data.yaml inside the dataset folder).
    std::error_code ec;
    if (single && !fs::exists(resolved, ec) && text.rfind("../", 0) == 0)
      resolved = (root / text.substr(3)).lexically_normal();
    out.push_back(resolved.string());
  };
  if (!node || node.IsNull()) return out;
  if (node.IsSequence()) {
    for (const auto& n : node) add(n, false);
  } else {
    add(node, true);
  }
  return out;
}

// A class name: a scalar with text (yaml-cpp reads an empty or null entry, "[a, , b]", as the text "null").
std::string class_name(const YAML::Node& n, const std::string& source) {
  if (!n.IsScalar() || n.Scalar().empty() || n.Tag() == "tag:yaml.org,2002:null" || n.Scalar() == "~" || n.Scalar() == "null")
    fail(source, ":", n.Mark().line + 1, ": a class name in 'names' is empty, null or not a plain name");
  return n.Scalar();
}

std::vector<std::string> read_names(const YAML::Node& node, const std::string& source) {
  std::vector<std::string> names;
  if (!node) return names;
  if (node.IsSequence()) {
    for (const auto& n : node) names.push_back(class_name(n, source));
  } else if (node.IsMap()) {
    std::map<int, std::string> by_index;
    for (const auto& kv : node) {
      int index = -1;
      try {
        index = kv.first.as<int>();
      } catch (const YAML::Exception&) {
        fail(source, ":", kv.first.Mark().line + 1, ": class index '", kv.first.Scalar(), "' is not an integer");
      }
      by_index[index] = class_name(kv.second, source);
    }
    int expected = 0;
    for (const auto& [index, name] : by_index) {
      if (index != expected) fail(source, ": 'names' must number the classes 0, 1, 2 ... without gaps (missing ", expected, ")");
      names.push_back(name);
      ++expected;
    }
  } else {
    fail(source, ": 'names' must be a list or a map {index: name}");
  }
  return names;
}

}  // namespace

const std::vector<std::string>& DatasetConfig::split(const std::string& name) const {
  if (name == "train") return train;
  if (name == "val") return val;
  if (name == "test") return test;
  fail("unknown split '", name, "' (train, val or test)");
}

const std::vector<std::string>& DatasetConfig::existing_split(const std::string& name) const {
  const std::vector<std::string>& entries = split(name);
  if (entries.empty()) fail(source, ": no '", name, "' split (its '", name, ":' entry is missing or empty)");
  return entries;
}

// Upstream resolves relative entries (and a relative `path:`) against its repository's folder, which is
// usually the working folder; kestrel against the YAML's folder. A missing entry that exists from the working
// folder (YOLOv7's data/coco.yaml with ./coco/train2017.txt) is named, with the fix.
void check_entries_against_working_folder(const YAML::Node& root, const fs::path& base, const std::string& path) {
  std::error_code ec;
  fs::path alt_base = fs::current_path(ec);
  if (ec) return;
  if (root["path"] && root["path"].IsScalar() && !root["path"].Scalar().empty()) {
    if (fs::path(root["path"].Scalar()).is_absolute()) return;  // resolved alike either way
    alt_base /= root["path"].Scalar();
  }
  alt_base = alt_base.lexically_normal();
  if (fs::equivalent(alt_base, base, ec)) return;
  for (const char* key : {"train", "val"}) {  // (a test entry is read by val --task test alone, and named there)
    const YAML::Node node = root[key];
    if (!node || !(node.IsScalar() || node.IsSequence())) continue;
    std::vector<YAML::Node> entries;
    if (node.IsScalar()) entries.push_back(node);
    else for (const auto& n : node) entries.push_back(n);
    for (const YAML::Node& n : entries) {
      if (!n.IsScalar() || n.Scalar().empty() || fs::path(n.Scalar()).is_absolute()) continue;
      const fs::path ours = (base / n.Scalar()).lexically_normal(), theirs = (alt_base / n.Scalar()).lexically_normal();
      const bool roboflow = node.IsScalar() && n.Scalar().rfind("../", 0) == 0 && fs::exists(base / n.Scalar().substr(3), ec);
      if (fs::exists(ours, ec) || roboflow || !fs::exists(theirs, ec)) continue;
      fail(path, ": ", key, " entry ", n.Scalar(), " is ", ours.string(), ", which does not exist; ", theirs.string(),
           " does: kestrel resolves relative paths against the YAML's folder, upstream against its repository's "
           "(usually the working folder). Set `path: ", alt_base.string(), "` in the YAML, or give absolute paths");
    }
  }
}

DatasetConfig load_dataset_config(const std::string& path) {
  {  // upstream's data/coco128.yaml, coco.yaml ... download their data; kestrel ships neither and downloads nothing
    std::error_code ec;
    const fs::path given(path);
    if (!fs::exists(given, ec) && (given.parent_path().empty() || given.parent_path() == "data"))
      fail(path, ": dataset file not found (kestrel ships no upstream dataset YAML and downloads nothing: write one for "
                 "your copy of the data, with path, train, val and names; the bundled demo is ",
           (fs::path(KESTREL_SOURCE_DIR) / "data/demo/demo.yaml").string(), ")");
  }
  // v7.0's check_dataset unpacks an archive given as --data (is_zipfile / is_tarfile: by content) and reads
  // the YAML inside; kestrel reads YAML only, and says so rather than parsing the archive's bytes as YAML.
  {
    std::ifstream in(path, std::ios::binary);
    char head[262] = {};
    in.read(head, sizeof head);
    const std::string bytes(head, static_cast<size_t>(in.gcount()));
    if (bytes.rfind("PK\x03\x04", 0) == 0 || bytes.rfind("\x1f\x8b", 0) == 0 ||
        (bytes.size() >= 262 && bytes.compare(257, 5, "ustar") == 0))
      fail(path, ": an archive; unpack it and give the dataset YAML inside (kestrel does not unpack --data)");
  }
  YAML::Node root = load_yaml_file(path, "dataset");
  if (!root.IsMap()) fail(path, ": a dataset file is a YAML mapping with train, val and names");
  DatasetConfig cfg;
  cfg.source = path;
  const fs::path yaml_dir = fs::absolute(path).parent_path();
  fs::path base = yaml_dir;
  if (root["path"] && !root["path"].IsNull() && !root["path"].IsScalar())
    fail(path, ":", root["path"].Mark().line + 1, ": 'path' must be a folder, not a list or mapping");
  if (root["path"] && root["path"].IsScalar() && !root["path"].Scalar().empty()) {
    fs::path p(root["path"].Scalar());
    base = p.is_absolute() ? p : yaml_dir / p;
  }
  cfg.root = base.lexically_normal().string();
  try {
    cfg.train = resolve_entries(root["train"], base, path, "train");
    cfg.val = resolve_entries(root["val"], base, path, "val");
    cfg.test = resolve_entries(root["test"], base, path, "test");
    cfg.names = read_names(root["names"], path);
    if (const YAML::Node nc = root["nc"]) {
      try {
        cfg.nc = nc.as<int>();
      } catch (const YAML::Exception&) {  // yaml-cpp says only "bad conversion"
        fail(path, ":", nc.Mark().line + 1, ": 'nc' must be a whole number of classes, got '",
             nc.IsScalar() ? nc.Scalar().substr(0, 40) : std::string("a list or mapping"), "'");
      }
      if (cfg.nc < 1) fail(path, ":", nc.Mark().line + 1, ": 'nc' must be >= 1, got ", cfg.nc);
    }
  } catch (const YAML::Exception& e) {
    fail(path, ":", e.mark.line + 1, ": ", e.msg);
  }
  // Without `names`, classes are named class0, class1 ...: a mistyped nc (2000000000) built that many strings.
  constexpr int kMaxClasses = 1000000;
  if (cfg.nc > kMaxClasses) fail(path, ": 'nc' is ", cfg.nc, ", above the limit of ", kMaxClasses, " classes");
  check_entries_against_working_folder(root, base, path);
  if (cfg.train.empty()) fail(path, ": missing key 'train'");
  if (cfg.val.empty()) fail(path, ": missing key 'val'");
  if (cfg.names.empty() && cfg.nc < 1) fail(path, ": give 'names' (and optionally 'nc')");
  if (cfg.nc == 0) cfg.nc = static_cast<int>(cfg.names.size());
  if (cfg.names.empty())
    for (int i = 0; i < cfg.nc; ++i) cfg.names.push_back("class" + std::to_string(i));
  if (static_cast<int>(cfg.names.size()) != cfg.nc)
    fail(path, ": 'nc' is ", cfg.nc, " but 'names' lists ", cfg.names.size(), " classes");
  // Upstream's check_dataset runs the YAML's `download` (a URL or a Python script) when the train or val
  // data is missing; kestrel has no downloader, so the error says what upstream would have fetched.
  if (const YAML::Node download = root["download"]; download && download.IsScalar() && !download.Scalar().empty()) {
    for (const auto* split : {&cfg.train, &cfg.val})
      for (const std::string& entry : *split)
        if (!fs::exists(entry)) {
          const std::string& what = download.Scalar();
          const bool url = what.rfind("http://", 0) == 0 || what.rfind("https://", 0) == 0;
          const bool shell = what.rfind("bash ", 0) == 0;  // upstream runs it with os.system; other text as Python
          fail(path, ": ", entry, " does not exist. Upstream would run the file's 'download' (",
               url ? what : std::string(shell ? "a shell command" : "a Python script"),
               "); kestrel does not download: put the dataset under ", cfg.root,
               url ? std::string(" (e.g. unzip the archive at that URL there)") : std::string(""),
               ". Relative entries resolve against the YAML's folder (upstream: its repository's folder); ",
               "a `path:` in the YAML names the dataset's root");
        }
  }
  return cfg;
}

}  // namespace kestrel::data
