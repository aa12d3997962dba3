#include "kestrel/train/evolution_folder.h"

#include "kestrel/core/python_repr.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "kestrel/core/atomic_file.h"
#include "kestrel/core/error.h"
#include "kestrel/core/regular_file.h"
#include "kestrel/core/stop_signal.h"
#include "kestrel/core/yaml_file.h"
#include "kestrel/eval/plots.h"
#include "kestrel/train/hyperparameters.h"
#include "kestrel/train/run_files.h"
#include "kestrel/train/training_run.h"

namespace kestrel::train {
namespace fs = std::filesystem;
namespace {

// What Ctrl-C prints during an evolution outside a training (a training says its own).
constexpr const char* kStopEvolutionNote = "\nStopping the evolution after this training (again to stop at once)\n";

const std::vector<std::string> kResultColumns = {"metrics/precision", "metrics/recall", "metrics/mAP_0.5",
                                                 "metrics/mAP_0.5:0.95", "val/box_loss", "val/obj_loss", "val/cls_loss"};

bool blank(const std::string& line) { return line.find_first_not_of(" \t\r\n") == std::string::npos; }

// A number of evolve.csv or results.csv. Results may be nan or inf (a generation that diverged: its val
// losses; upstream writes and reads them, and its fitness needs only the mAPs); genes must be finite.
double parse_number(const std::string& text, const std::string& path, size_t line, bool finite) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && (!finite || std::isfinite(v))) return v;
  } catch (const std::exception&) {
  }
  fail(path, ":", line, ": \"", text, finite ? "\" is not a finite number" : "\" is not a number");
}

// The last row of a run's results.csv: P, R, mAP50, mAP50-95, val box/obj/cls (columns 4-10).
std::vector<double> final_results(const std::string& results_csv) {
  std::ifstream in(results_csv);
  if (!in) fail(results_csv, ": cannot read the generation's results");
  std::string line, last;
  size_t n = 0;
  while (std::getline(in, line))
    if (!blank(line)) last = line, ++n;
  if (n < 2) fail(results_csv, ": no epoch row");
  const auto cells = split_csv_row(last);
  if (cells.size() < 11) fail(results_csv, ":", n, ": expected at least 11 columns");
  std::vector<double> r;
  for (size_t c = 4; c <= 10; ++c) r.push_back(parse_number(cells[c], results_csv, n, /*finite=*/false));
  return r;
}

std::string format_row(const std::vector<std::string>& cells) {
  std::string out;
  for (size_t i = 0; i < cells.size(); ++i) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%20s", cells[i].c_str());
    out += buf;
    if (i + 1 < cells.size()) out += ",";
  }
  return out + "\n";
}

// evolve.csv holds upstream's %.5g.
std::string csv_number(double v) { return python_percent_g(v, 5); }

// print_mutation's header and value lines (hyp_evolve.yaml's comment, the console block): cells right-aligned
// in 20 characters, joined by ", ".
std::string padded_list(const std::vector<std::string>& cells) {
  std::string out;
  for (size_t i = 0; i < cells.size(); ++i) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%20s", i ? ", " : "", cells[i].c_str());
    out += buf;
  }
  return out;
}

}  // namespace

// A mAP that is not a number (never written by a validation; a hand-edited row) counts as 0.
double row_fitness(const EvolveRow& row) {
  const auto finite = [](double v) { return std::isfinite(v) ? v : 0.0; };
  return fitness(finite(row.results[2]), finite(row.results[3]));
}

const EvolveRow& fittest(const std::vector<EvolveRow>& rows) {
  if (rows.empty()) fail("evolution: no row to choose the fittest from");
  return *std::max_element(rows.begin(), rows.end(), [](const EvolveRow& a, const EvolveRow& b) { return row_fitness(a) < row_fitness(b); });
}


std::vector<EvolveRow> read_evolve_csv(const std::string& path, std::vector<std::string>* hyp_columns) {
  std::vector<EvolveRow> rows;
  if (!fs::exists(path)) return rows;
  require_regular_file(path);  // a folder of that name would only fail after a generation's training
  std::ifstream in(path);
  if (!in) return rows;
  std::string line;
  std::vector<std::string> header;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (blank(line)) continue;
    const auto cells = split_csv_row(line);
    if (header.empty()) {
      header = cells;
      if (header.size() < kResultColumns.size() + 1 || !std::equal(kResultColumns.begin(), kResultColumns.end(), header.begin()))
        fail(path, ":", n, ": not an evolve.csv header (", kResultColumns[0], ", ...)");
      if (hyp_columns) hyp_columns->assign(header.begin() + static_cast<long>(kResultColumns.size()), header.end());
      continue;
    }
    if (cells.size() != header.size()) fail(path, ":", n, ": ", cells.size(), " columns, the header has ", header.size());
    EvolveRow row;
    for (size_t c = 0; c < cells.size(); ++c) {
      const double v = parse_number(cells[c], path, n, /*finite=*/c >= kResultColumns.size());
      if (c < kResultColumns.size()) row.results.push_back(v);
      else row.hyp.emplace_back(header[c], v);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

Hyperparameters evolution_start(const TrainOptions& base, int generations) {
  if (generations < 1) fail("--evolve ", generations, ": expected at least one generation");
  if (!base.resume.empty()) fail("--evolve: the command line turns --resume into continuing the folder (exist_ok); a training state cannot be resumed here");
  const Hyperparameters h = base.hyp.empty() ? default_hyperparameters() : load_hyperparameters(base.hyp);
  print_hyperparameter_warnings(h, base.hyp, std::cout);
  return h;
}

EvolutionFolder::EvolutionFolder(const TrainOptions& base, const HypValues& start)
    : base_(base), stop_(kStopEvolutionNote) {
  // <project>/<name> as given (the command line turns train.py's default project into runs/evolve).
  dir_ = make_run_dir(base.project, base.name, base.exist_ok, /*with_weights=*/false);
  csv_ = (fs::path(dir_) / "evolve.csv").string();
  hyp_file_ = (fs::path(dir_) / "hyp_generation.yaml").string();
  // An evolve.csv already there (--exist-ok) supplies the parents: it must evolve the same hyperparameters,
  // or its keys would silently replace --hyp's (a YOLOv7 file's paste_in and loss_ota dropped, or added).
  // Its header names the columns, also of a file without rows (which then gets no second header).
  std::vector<std::string> columns;
  rows_ = read_evolve_csv(csv_, &columns);
  if (!columns.empty()) {
    std::set<std::string> given, found;
    for (const auto& [k, v] : start) given.insert(k);
    for (const auto& k : columns) found.insert(k);
    if (given != found) {
      std::string missing, extra;
      for (const auto& k : given) if (!found.count(k)) missing += " " + k;
      for (const auto& k : found) if (!given.count(k)) extra += " " + k;
      fail(csv_, ": its generations evolve other hyperparameters than ", base.hyp.empty() ? "the default recipe" : base.hyp,
           " (", missing.empty() ? "" : "not in it:" + missing, missing.empty() || extra.empty() ? "" : "; ",
           extra.empty() ? "" : "not in " + std::string(base.hyp.empty() ? "the recipe" : base.hyp) + ":" + extra,
           "): evolve into another --name, or give the --hyp it was started with",
           found.count("anchors") && !given.count("anchors")
               ? " (upstream's train.py adds 'anchors: 3' to a file without it: add that line to the --hyp)"
               : "");
    }
    header_keys_ = columns;  // the file's column order
  }
}

std::optional<EvolveRow> EvolutionFolder::train_and_record(const HypValues& hyp, const std::string& progress) {
  if (StopSignal::requested()) return std::nullopt;  // Ctrl-C after the last training's final step, or between two
  std::string yaml;
  for (const auto& [k, v] : hyp) yaml += k + ": " + yaml_float(v) + "\n";
  write_file_atomic(hyp_file_, {yaml}, Durability::kFlushed);
  TrainOptions o = base_;
  o.hyp = hyp_file_;
  o.noval = true;  // validate after the final epoch only
  o.save_weights = false;  // upstream: evolve implies nosave, and no final checkpoint either
  o.noplots = true;  // upstream: plots = not evolve
  o.tensorboard = false;  // upstream: no TensorBoard logger under evolve (one event file per generation else)
  o.hyp_warnings = false;  // said once, of --hyp (evolution_start): hyp_generation.yaml is not the user's file
  o.project = dir_;
  o.name = "generation";
  o.exist_ok = true;
  std::cout << "--evolve: " << progress << std::endl;  // flushed: a log file shows where the evolution is
  // generation/ is reused: its results.csv holds this generation's epochs only (they go to <dir>/results.csv).
  std::error_code ec;
  fs::remove(fs::path(dir_) / o.name / "results.csv", ec);
  const TrainResult run = train(o);
  fs::remove(hyp_file_);
  if (run.interrupted) return std::nullopt;
  const std::string generation_results = (fs::path(run.save_dir) / "results.csv").string();
  EvolveRow row{final_results(generation_results), hyp};
  append_results(generation_results);
  // The row in the file's column order (a file of an earlier run may order the same keys otherwise), and
  // kept as the file holds it (%.5g), as read_evolve_csv would read it back.
  const bool fresh = header_keys_.empty();
  if (fresh)
    for (const auto& [k, v] : hyp) header_keys_.push_back(k);
  std::map<std::string, double> by_key(hyp.begin(), hyp.end());
  std::vector<std::string> cells;
  EvolveRow recorded;
  for (double v : row.results) {
    cells.push_back(csv_number(v));
    recorded.results.push_back(std::stod(cells.back()));
  }
  for (const std::string& k : header_keys_) {
    cells.push_back(csv_number(by_key.at(k)));
    recorded.hyp.emplace_back(k, std::stod(cells.back()));
  }
  const bool empty_file = !fs::exists(csv_) || fs::file_size(csv_, ec) == 0;  // an empty file gets its header too
  std::ofstream out(csv_, std::ios::app);
  if (fresh || empty_file) {
    std::vector<std::string> header = kResultColumns;
    header.insert(header.end(), header_keys_.begin(), header_keys_.end());
    out << format_row(header);
  }
  out << format_row(cells);
  out.close();
  if (!out) fail(csv_, ": cannot append the generation's row");
  rows_.push_back(std::move(recorded));
  // hyp_evolve.yaml: the fittest row so far, under upstream's header (print_mutation's).
  const EvolveRow& best = fittest(rows_);
  const size_t best_row = static_cast<size_t>(&best - rows_.data());
  std::vector<std::string> best_values;
  for (double v : best.results) best_values.push_back(csv_number(v));
  std::string best_yaml = "# YOLOv5 Hyperparameter Evolution Results\n# Best generation: " + std::to_string(best_row) +
                          "\n# Last generation: " + std::to_string(rows_.size() - 1) + "\n# " +
                          padded_list(kResultColumns) + "\n# " + padded_list(best_values) + "\n\n";
  for (const auto& [k, v] : best.hyp) best_yaml += k + ": " + yaml_float(v) + "\n";
  write_file_atomic((fs::path(dir_) / "hyp_evolve.yaml").string(), {best_yaml}, Durability::kFlushed);
  // print_mutation's lines: every column's name and this generation's values (as trained, not rounded).
  std::vector<std::string> keys = kResultColumns, values;
  keys.insert(keys.end(), header_keys_.begin(), header_keys_.end());
  for (double v : row.results) values.push_back(python_percent_g(v, 5));
  for (const auto& k : header_keys_) values.push_back(python_percent_g(by_key.at(k), 5));
  std::cout << "evolve: " << rows_.size() << " generations finished, current result:\nevolve: " << padded_list(keys)
            << "\nevolve: " << padded_list(values) << "\n\n\n";
  return row;
}

// Upstream trains every generation in the evolution folder, so its results.csv gathers all their epochs;
// here each generation reuses generation/ and its rows are appended to <dir>/results.csv (header once).
void EvolutionFolder::append_results(const std::string& generation_results) const {
  std::ifstream in(generation_results);
  std::string line, header, rows;
  while (std::getline(in, line)) {
    if (blank(line)) continue;
    if (header.empty()) header = line + "\n";
    else rows += line + "\n";
  }
  const std::string all = (fs::path(dir_) / "results.csv").string();
  std::error_code ec;
  const bool fresh = !fs::exists(all) || fs::file_size(all, ec) == 0;
  std::ofstream out(all, std::ios::app);
  out << (fresh ? header : std::string()) << rows;
  out.close();
  if (!out) fail(all, ": cannot append the generation's epochs");
}

void EvolutionFolder::finish(EvolveResult& result) const {
  result.interrupted = result.interrupted || StopSignal::requested();
  result.best_fitness = rows_.empty() ? 0.0 : row_fitness(fittest(rows_));
  if (result.generations > 0 && !rows_.empty()) {  // upstream's plot_evolve (not with --noplots) and its listing of the fittest row
    std::vector<std::string> keys = header_keys_;
    std::vector<std::vector<double>> values;
    std::vector<double> fitness;
    for (const EvolveRow& row : rows_) {
      values.emplace_back();
      for (const auto& [k, v] : row.hyp) values.back().push_back(v);
      fitness.push_back(row_fitness(row));
    }
    const std::string png = (fs::path(dir_) / "evolve.png").string();
    if (!base_.noplots) eval::plot_evolve(keys, values, fitness, png);
    const size_t best = static_cast<size_t>(&fittest(rows_) - rows_.data());
    std::cout << "Best results from row " << best << " of " << csv_ << ":\n";
    for (size_t k = 0; k < keys.size(); ++k) {
      char line[160];
      std::snprintf(line, sizeof line, "%15s: %.3g", keys[k].c_str(), values[best][k]);
      std::cout << line << "\n";
    }
    if (!base_.noplots) std::cout << "Saved " << png << "\n";
  }
  // train.py's closing lines (its usage example with kestrel's command).
  std::cout << "Hyperparameter evolution " << (result.interrupted ? "stopped after " : "finished ") << result.generations
            << " generations\n";
  if (rows_.empty()) {
    std::cout << "Nothing recorded in " << dir_ << "\n";
    return;
  }
  const std::string best_yaml = (fs::path(dir_) / "hyp_evolve.yaml").string();
  std::cout << "Results saved to " << dir_ << "\nUsage example: $ kestrel train --hyp " << shell_word(best_yaml) << "\n";
}

}  // namespace kestrel::train
