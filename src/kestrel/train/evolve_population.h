// YOLOv5 HEAD's hyperparameter evolution (train.py after v7.0, --evolve_population / --resume_evolve): a
// genetic algorithm over the augmentation hyperparameters. A population of 50 individuals, each a vector of
// augmentation values: the *.yaml files of a folder first, random values within the bounds for the rest
// (or a saved evolve_population.yaml). Every generation trains each individual (validation after the
// final epoch, no weights), scores it by its mAP50, and breeds the next population: tournament winners
// plus the elite, one-point crossover, uniform +-0.1 mutation clipped to the bounds; elite size,
// tournament size, crossover and mutation rates move with the generation as upstream's schedule.
// Every training is a row of evolve.csv and hyp_evolve.yaml holds the fittest row (0.1 mAP50 + 0.9
// mAP50-95, upstream's print_mutation), as with the v7.0 scheme (evolve.h).
//
// Deliberate differences (docs/design.md): the genes are the augmentation keys the --hyp file has,
// YOLOv7's paste_in included (upstream's table lacks it and fails on YOLOv7 files); seed files are read in
// name order (upstream: directory order, reversed) and one lacking a gene is skipped with a warning
// (upstream: a KeyError); every individual's values are checked as a hyp file's before anything trains;
// more than 50 individuals are refused; evolve_population.yaml always holds the population to train next,
// in numeric order (upstream writes it, keys sorted as text, from the second generation on, before
// training it, so a resume trains its last generation again); exactly pop - elite tournament winners plus
// the elite are the parents (upstream's elite may hold more on tied fitness); one gene gets no crossover
// (upstream fails); the draws are seeded by --seed (and a resumed population).
#pragma once
#include <random>
#include <string>
#include <vector>

#include "kestrel/train/evolve.h"

namespace kestrel::train {

struct PopulationOptions {
  std::string seed_dir;     // --evolve_population: hyperparameter files (*.yaml), the first individuals
  std::string resume_file;  // --resume_evolve: an evolve_population.yaml; overrides seed_dir
  int size = 50;            // upstream's pop_size
};

// The genes: the augmentation keys of `hyp` (hsv_h ... copy_paste, paste_in) in its order, with the
// bounds of evolution_genes().
std::vector<Gene> population_genes(const HypValues& hyp);

// Upstream's schedule at `generation` (0-based) of `generations`.
struct GeneticRates {
  int elite = 2;              // 2 + int(3 g / G)
  int tournament = 10;        // max(2, int(min(10, pop) - g / (G / 10))), at most pop
  double crossover = 1.0;     // max(0.5, min(1, 1 - g / G))
  double mutation = 0.5;      // max(0.01, min(0.5, 0.5 - g / G))
};
GeneticRates genetic_rates(int generation, int generations, int population);

using Individual = std::vector<double>;  // one value per gene

// What the genetic algorithm ranks individuals by: mAP50 (HEAD's results[2]), not the 0.1/0.9 fitness that
// picks hyp_evolve.yaml's row.
double genetic_score(const EvolveRow& row);

// The next population (same size) from `population` scored by `fitness` (higher is better).
std::vector<Individual> breed(const std::vector<Individual>& population, const std::vector<double>& fitness,
                              const std::vector<Gene>& genes, const GeneticRates& rates, std::mt19937_64& rng);

// The gene values of every *.yaml file in `dir` (name order), checked as hyp files; files lacking a gene
// are skipped, named in `skipped`.
std::vector<Individual> read_seed_individuals(const std::string& dir, const std::vector<Gene>& genes,
                                              std::vector<std::string>* skipped);
// evolve_population.yaml: {gen<g>number<i>: {gene: value}}, upstream's layout; entries are read in file
// order, values checked as a hyp file's.
std::vector<Individual> read_population_file(const std::string& path, const std::vector<Gene>& genes);
void write_population_file(const std::string& path, int generation, const std::vector<Individual>& population,
                           const std::vector<Gene>& genes);

// `generations` generations of `options.size` trainings each, into the evolution folder of `base`.
EvolveResult evolve_population(const TrainOptions& base, int generations, const PopulationOptions& options);

}  // namespace kestrel::train
