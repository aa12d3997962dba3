// One evolution folder (runs/evolve/<name>) as upstream's print_mutation keeps it, shared by the v7.0
// scheme (evolve.h) and HEAD's genetic algorithm (evolve_population.h): each training's final results and
// hyperparameters a row of evolve.csv (upstream's columns, %20.5g), the fittest row in hyp_evolve.yaml,
// and at the end evolve.png (upstream's plot_evolve) and the fittest row listed.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kestrel/core/stop_signal.h"
#include "kestrel/train/trainer.h"

namespace kestrel::train {

using HypValues = std::vector<std::pair<std::string, double>>;  // file order

// A row of evolve.csv: the 7 results, then the hyperparameters in file order.
struct EvolveRow {
  std::vector<double> results;  // P, R, mAP50, mAP50-95, val box, obj, cls loss
  HypValues hyp;
};
// The rows of `path` (none when it does not exist); `hyp_columns`, when given, gets the header's
// hyperparameter columns (a file of a header alone has them too).
std::vector<EvolveRow> read_evolve_csv(const std::string& path, std::vector<std::string>* hyp_columns = nullptr);
// Upstream's fitness of a row, 0.1 mAP50 + 0.9 mAP50-95, and the first row of the greatest (rows not empty).
double row_fitness(const EvolveRow& row);
const EvolveRow& fittest(const std::vector<EvolveRow>& rows);

struct EvolveResult {
  std::string save_dir;       // runs/evolve/<name>
  int generations = 0;        // completed
  double best_fitness = 0;    // of the fittest row of evolve.csv (earlier runs' rows too, with --exist-ok)
  bool interrupted = false;   // stopped by Ctrl-C or SIGTERM
};

// Both schemes' start: `generations` at least 1, no --resume; the hyperparameters of --hyp (or the defaults),
// with its warnings (keys unused, keys missing) said once.
struct Hyperparameters;
Hyperparameters evolution_start(const TrainOptions& base, int generations);

// The folder <project>/<name> (the command line makes train.py's default project runs/evolve); trains one hyperparameter
// set at a time. While it lives, Ctrl-C stops the evolution after the training in hand (StopSignal).
class EvolutionFolder {
 public:
  // Makes the folder; an evolve.csv already there (--exist-ok) must evolve `start`'s keys.
  EvolutionFolder(const TrainOptions& base, const HypValues& start);
  const std::string& dir() const { return dir_; }
  const std::string& csv() const { return csv_; }
  // Trains `hyp` with validation after the final epoch only and no weights, in <dir>/generation, and
  // appends its row; nullopt when stopped (Ctrl-C during the training, or before it), nothing recorded then.
  std::optional<EvolveRow> train_and_record(const HypValues& hyp, const std::string& progress);
  // The rows of evolve.csv so far (an earlier run's too, with --exist-ok), as the file holds them.
  const std::vector<EvolveRow>& rows() const { return rows_; }
  // Completes `result` (interrupted by a Ctrl-C, the fittest row's fitness), then evolve.png (unless
  // --noplots) and the listing of the fittest row, as upstream's plot_evolve, and where the results are.
  void finish(EvolveResult& result) const;

 private:
  void append_results(const std::string& generation_results) const;

  TrainOptions base_;
  StopSignal stop_;
  std::string dir_, csv_, hyp_file_;
  std::vector<std::string> header_keys_;  // evolve.csv's hyperparameter columns, in order
  std::vector<EvolveRow> rows_;
};

}  // namespace kestrel::train
