// The YOLOv5 dataset YAML: path, train, val, optional test (each a folder, a .txt list of images,
// an image, or a list of those), nc, names (list or {index: name} map).
#pragma once
#include <string>
#include <vector>

namespace kestrel::data {

struct DatasetConfig {
  std::string source;                      // the YAML file
  std::string root;                        // `path`, resolved against the YAML's folder
  std::vector<std::string> train, val, test;  // resolved entries (folders, .txt lists, images)
  int nc = 0;
  std::vector<std::string> names;          // nc entries

  const std::vector<std::string>& split(const std::string& name) const;  // "train" | "val" | "test"
  // The same, failing with the file and split when the file has none (a missing or empty entry).
  const std::vector<std::string>& existing_split(const std::string& name) const;
};

// Relative paths resolve against the YAML file's folder (upstream resolves `path` against its
// repository root; kestrel has none, and the YAML's folder keeps datasets relocatable).
// Errors name the file: missing file, malformed YAML, missing train/val, nc disagreeing with names.
DatasetConfig load_dataset_config(const std::string& path);

}  // namespace kestrel::data
