// Upstream's --evolve (YOLOv5 v7.0 / YOLOv7): hyperparameter evolution. Each generation picks a parent
// among the five fittest rows of evolve.csv (fitness-weighted), multiplies each gene by
// clip(1 + gain x [U < 0.8] x N(0,1) x U' x 0.2, 0.3, 3), clips it to its bounds, rounds to 5 digits,
// trains with validation only after the final epoch and no checkpoints, and appends the final P, R,
// mAP50, mAP50-95, val losses and the hyperparameters to evolve.csv; hyp_evolve.yaml holds the best row.
// The first generation trains the given hyperparameters unchanged.
//
// Difference: kestrel seeds the mutations with --seed (and the generation), so an evolution is
// reproducible; upstream seeds with the clock.
#pragma once
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kestrel/train/trainer.h"

namespace kestrel::train {

struct Gene {
  std::string key;
  double gain, lower, upper;  // mutation gain (0: fixed) and the bounds of upstream's meta table
};

// Upstream's meta table (lr0 ... copy_paste, and YOLOv7's paste_in).
const std::vector<Gene>& evolution_genes();

using HypValues = std::vector<std::pair<std::string, double>>;  // file order

// One mutation of `parent`'s genes (keys without a gene are kept); retried until a gene changes.
HypValues mutate_hyperparameters(const HypValues& parent, std::mt19937_64& rng);

// A row of evolve.csv: the 7 results, then the hyperparameters in file order.
struct EvolveRow {
  std::vector<double> results;  // P, R, mAP50, mAP50-95, val box, obj, cls loss
  HypValues hyp;
};
std::vector<EvolveRow> read_evolve_csv(const std::string& path);
// The parent: one of the top min(5, rows) by fitness, drawn with weights fitness - min + 1e-6.
HypValues select_parent(const std::vector<EvolveRow>& rows, std::mt19937_64& rng);

struct EvolveResult {
  std::string save_dir;       // runs/evolve/<name>
  int generations = 0;
  double best_fitness = 0;
};

// One evolution folder (<project>/<name>, project runs/train becoming runs/evolve as upstream): trains one
// hyperparameter set at a time and records it as upstream's print_mutation does, in evolve.csv (a row of
// results and values) and hyp_evolve.yaml (the fittest row so far); both evolution schemes use it.
class EvolutionFolder {
 public:
  // Makes the folder; an evolve.csv already there (--exist-ok) must evolve `start`'s keys.
  EvolutionFolder(const TrainOptions& base, const HypValues& start);
  const std::string& dir() const { return dir_; }
  const std::string& csv() const { return csv_; }
  // Trains `hyp` with validation after the final epoch only and no weights, in <dir>/generation, and
  // appends its row; nullopt when the training was interrupted (Ctrl-C), nothing recorded then.
  std::optional<EvolveRow> train_and_record(const HypValues& hyp, const std::string& progress);
  // The rows so far, and the fittest one's fitness (0.1 mAP50 + 0.9 mAP50-95).
  std::vector<EvolveRow> rows() const { return read_evolve_csv(csv_); }
  // evolve.png (unless --noplots) and the listing of the fittest row, as upstream's plot_evolve.
  void finish() const;

 private:
  TrainOptions base_;
  std::string dir_, csv_, hyp_file_;
};

// `generations` trainings of `base` (its --hyp, or the defaults) under <project>/../evolve: the
// project "runs/train" becomes "runs/evolve", as upstream.
EvolveResult evolve(const TrainOptions& base, int generations);

}  // namespace kestrel::train
