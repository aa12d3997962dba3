// Upstream's --evolve (YOLOv5 v7.0 / YOLOv7): hyperparameter evolution. Each generation picks a parent
// among the five fittest rows of evolve.csv (fitness-weighted), multiplies each gene by
// clip(1 + gain x [U < 0.8] x N(0,1) x U' x 0.2, 0.3, 3), clips it to its bounds, rounds to 5 digits,
// trains with validation only after the final epoch and no checkpoints, and appends the final P, R,
// mAP50, mAP50-95, val losses and the hyperparameters to evolve.csv; hyp_evolve.yaml holds the best row.
// The first generation trains the given hyperparameters clipped and rounded alike.
//
// Difference: kestrel seeds the mutations with --seed (and the generation and the rows so far), so an
// evolution is reproducible; upstream seeds with the clock.
#pragma once
#include <random>
#include <string>
#include <vector>

#include "kestrel/train/evolution_folder.h"

namespace kestrel::train {

struct Gene {
  std::string key;
  double gain, lower, upper;  // mutation gain (0: fixed) and the bounds of upstream's meta table
  bool genetic = false;       // evolved by HEAD's genetic algorithm (its meta flag True: the augmentation keys)
};

// Upstream's meta table (lr0 ... copy_paste, and YOLOv7's paste_in, which HEAD's table lacks).
const std::vector<Gene>& evolution_genes();

// Upstream's "Constrain to limits": each gene's value clipped to its bounds and rounded to 5 decimals as
// Python's round(v, 5); keys without a gene are kept.
void constrain_hyperparameters(HypValues& hyp);

// One mutation of `parent`'s genes (keys without a gene are kept); retried until a gene changes.
HypValues mutate_hyperparameters(const HypValues& parent, std::mt19937_64& rng);

// The parent: one of the top min(5, rows) by fitness, drawn with weights fitness - min + 1e-6.
HypValues select_parent(const std::vector<EvolveRow>& rows, std::mt19937_64& rng);

// `generations` trainings of `base` (its --hyp, or the defaults) under <project>/<name>; with exist_ok an
// evolve.csv there is continued (the command line: --resume, as train.py; and without --project it
// evolves into runs/evolve).
EvolveResult evolve(const TrainOptions& base, int generations);

}  // namespace kestrel::train
