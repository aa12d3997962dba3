#include "kestrel/train/run_files.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "kestrel/core/error.h"

namespace kestrel::train {

namespace fs = std::filesystem;

std::string make_run_dir(const std::string& project, const std::string& name, bool exist_ok, bool with_weights) {
  fs::path dir = fs::path(project) / name;
  if (!exist_ok && fs::exists(dir))
    for (int n = 2;; ++n) {
      dir = fs::path(project) / (name + std::to_string(n));
      if (!fs::exists(dir)) break;
    }
  std::error_code ec;
  fs::create_directories(with_weights ? dir / "weights" : dir, ec);
  if (ec) fail(dir.string(), ": cannot create the run folder (", ec.message(), ")");
  return dir.string();
}

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(path, ": cannot write (", std::strerror(errno), ")");
    out << text;
    out.flush();
    if (!out) fail(path, ": write failed");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    fail(path, ": cannot move the new file into place");
  }
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
  std::snprintf(cell, sizeof cell, "%20.5g", static_cast<double>(epoch));
  line += cell;
  for (double v : values) {
    std::snprintf(cell, sizeof cell, "%20.5g", v);
    line += "," + std::string(cell);
  }
  out << line << "\n";
  if (!out) fail(path_, ": write failed");
}

}  // namespace kestrel::train
