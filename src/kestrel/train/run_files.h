// The files of a training run under runs/train/<name>/: the run folder itself (upstream's
// increment_path: exp, exp2, exp3 ...) and results.csv with upstream's columns and formatting.
#pragma once
#include <string>
#include <vector>

namespace kestrel::train {

// project/name, or project/name2, name3 ... when it exists (unless exist_ok). The folder is created,
// with a weights/ subfolder for training runs (with_weights).
std::string make_run_dir(const std::string& project, const std::string& name, bool exist_ok, bool with_weights = true);

// YOLOv5's results.csv: one header line of right-aligned column names (%20s), then one row per epoch
// (%20.5g), comma-separated. The header is written when the file does not exist yet.
class ResultsCsv {
 public:
  static const std::vector<std::string>& columns();  // epoch, train/box_loss, ..., x/lr2
  explicit ResultsCsv(std::string path) : path_(std::move(path)) {}
  void append(int epoch, const std::vector<double>& values) const;  // values: columns() without "epoch"
  // A resumed run: drops the rows of epochs from `epoch` on (logged before a crash or a failed save, they
  // will be logged again), rewriting the file atomically. Returns how many were dropped.
  int drop_rows_from(int epoch) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kestrel::train
