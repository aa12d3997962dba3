#include "kestrel/train/run_files.h"

#include "kestrel/core/python_repr.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>


#include "kestrel/core/atomic_file.h"
#include "kestrel/core/error.h"

namespace kestrel::train {

namespace fs = std::filesystem;

std::string make_run_dir(const std::string& project, const std::string& name, bool exist_ok, bool with_weights) {
  std::error_code ec;
  // As upstream's increment_path(Path(project) / name): the path normalised first, so "sub/exp" nests,
  // "exp/" increments to exp2 (not exp/2), and an empty name increments the project itself.
  fs::path dir = (fs::path(project) / name).lexically_normal();
  if (!dir.has_filename() && dir.has_parent_path()) dir = dir.parent_path();
  const std::string base = dir.string();
  if (!exist_ok) {
    // Claimed by creating it: create_directory fails on a folder that exists, so two runs started at once
    // cannot both take expN (checking first and creating after could).
    if (dir.has_parent_path() && !fs::create_directories(dir.parent_path(), ec) && ec)  // say why (a read-only folder)
      fail(dir.parent_path().string(), ": cannot create the project folder (", ec.message(), ")");
    for (int n = 2; !fs::create_directory(dir, ec); ++n) {
      if (ec && !fs::exists(dir)) fail(dir.string(), ": cannot create the run folder (", ec.message(), ")");
      dir = base + std::to_string(n);
    }
  }
  fs::create_directories(with_weights ? dir / "weights" : dir, ec);
  if (ec) fail(dir.string(), ": cannot create the run folder (", ec.message(), ")");
  return dir.string();
}

const std::vector<std::string>& ResultsCsv::columns() {
  static const std::vector<std::string> c = {
      "epoch",          "train/box_loss", "train/obj_loss",    "train/cls_loss",       "metrics/precision",
      "metrics/recall", "metrics/mAP_0.5", "metrics/mAP_0.5:0.95", "val/box_loss",      "val/obj_loss",
      "val/cls_loss",   "x/lr0",          "x/lr1",             "x/lr2"};
  return c;
}

void ResultsCsv::append(int epoch, const std::vector<double>& values) const {
  if (values.size() + 1 != columns().size())
    fail("results.csv: ", values.size(), " values for ", columns().size() - 1, " columns");
  const bool header = !fs::exists(path_);
  std::ofstream out(path_, std::ios::app);
  if (!out) fail(path_, ": cannot append (", std::strerror(errno), ")");
  char cell[64];
  std::string line;
  if (header) {
    for (size_t i = 0; i < columns().size(); ++i) {
      std::snprintf(cell, sizeof cell, "%20s", columns()[i].c_str());
      line += (i ? "," : "") + std::string(cell);
    }
    line += "\n";
  }
  line += python_percent_g(static_cast<double>(epoch), 5, 20);
  for (double v : values) line += "," + python_percent_g(v, 5, 20);
  out << line << "\n";
  out.close();  // the buffered row reaches the file here: a full disk shows at the close, not at <<
  if (out.fail()) fail(path_, ": write failed (", std::strerror(errno), ")");
}

int ResultsCsv::drop_rows_from(int epoch) const {
  std::ifstream in(path_);
  if (!in) return 0;
  std::string text, line;
  int dropped = 0;
  for (bool header = true; std::getline(in, line); header = false) {
    // A row starts with its epoch ("%20.5g"); the header and anything unreadable are kept as they are.
    char* end = nullptr;
    const double row_epoch = header ? -1 : std::strtod(line.c_str(), &end);
    if (!header && end != line.c_str() && *end == ',' && row_epoch >= epoch) {
      ++dropped;
      continue;
    }
    text += line + "\n";
  }
  if (dropped > 0) write_file_atomic(path_, {text}, Durability::kFlushed);
  return dropped;
}

}  // namespace kestrel::train
