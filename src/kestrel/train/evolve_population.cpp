#include "kestrel/train/evolve_population.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <optional>

#include <yaml-cpp/yaml.h>

#include "kestrel/core/atomic_file.h"
#include "kestrel/core/error.h"
#include "kestrel/core/yaml_file.h"
#include "kestrel/data/hyp.h"
#include "kestrel/train/hyperparameters.h"

namespace kestrel::train {
namespace fs = std::filesystem;
namespace {

// The genes' values of one mapping (a hyperparameter file or a population entry), checked as a hyp
// file's augmentation keys; nullopt with the missing keys when it lacks some. Errors name `path`.
std::optional<Individual> gene_values(const YAML::Node& map, const std::vector<Gene>& genes, const std::string& path,
                                      std::string* missing) {
  data::augment_options_from_yaml(map, path);  // numbers, finite, probabilities <= 1, scale < 1 ...
  Individual values;
  for (const Gene& g : genes) {
    const YAML::Node v = map[g.key];
    if (!v) {
      *missing += " " + g.key;
      continue;
    }
    values.push_back(v.as<double>());  // a number: augment_options_from_yaml checked every augmentation key
  }
  if (!missing->empty()) return std::nullopt;
  return values;
}

// The population of the first generation: the resumed one, else the seed files', then uniform random
// values within the bounds up to options.size. The draws depend on --seed and on a resumed population's
// values (a resumed evolution does not repeat the draws of the run it continues).
std::vector<Individual> initial_population(const std::vector<Gene>& genes, const PopulationOptions& options, uint64_t seed,
                                           std::mt19937_64& rng) {
  std::vector<Individual> population;
  std::string resumed_bits;  // the resumed values' bytes, hashed into the seed
  if (!options.resume_file.empty()) {
    population = read_population_file(options.resume_file, genes);
    for (const Individual& individual : population)
      resumed_bits.append(reinterpret_cast<const char*>(individual.data()), individual.size() * sizeof(double));
  } else if (!options.seed_dir.empty()) {
    std::vector<std::string> skipped;
    population = read_seed_individuals(options.seed_dir, genes, &skipped);
    for (const std::string& s : skipped) std::cerr << "WARNING: --evolve_population: skipped " << s << "\n";
    if (population.empty())
      std::cerr << "WARNING: --evolve_population " << options.seed_dir << ": no hyperparameter file with every gene; "
                << "all " << options.size << " individuals are random\n";
  }
  const std::string source = options.resume_file.empty() ? options.seed_dir : options.resume_file;
  if (static_cast<int>(population.size()) > options.size)
    fail(source, ": ", population.size(), " individuals, the population holds ", options.size);
  const uint64_t text_hash = std::hash<std::string>()(resumed_bits);
  std::seed_seq seeds{seed & 0xffffffffu, seed >> 32, text_hash & 0xffffffffu, text_hash >> 32};
  rng.seed(seeds);
  while (static_cast<int>(population.size()) < options.size) {
    Individual random;
    for (const Gene& g : genes) random.push_back(std::uniform_real_distribution<double>(g.lower, g.upper)(rng));
    population.push_back(std::move(random));
  }
  return population;
}

// `hyp` with the genes' values of `individual`.
HypValues with_genes(HypValues hyp, const std::vector<Gene>& genes, const Individual& individual) {
  for (auto& [key, value] : hyp)
    for (size_t j = 0; j < genes.size(); ++j)
      if (genes[j].key == key) value = individual[j];
  return hyp;
}

}  // namespace

std::vector<Gene> population_genes(const HypValues& hyp) {
  std::vector<Gene> genes;
  for (const auto& [key, value] : hyp)
    for (const Gene& g : evolution_genes())
      if (g.genetic && g.key == key) genes.push_back(g);
  return genes;
}

GeneticRates genetic_rates(int generation, int generations, int population) {
  const double progress = static_cast<double>(generation) / generations;  // g / G
  GeneticRates r;
  r.elite = 2 + static_cast<int>(3 * progress);
  // int() of a Python float truncates toward zero; max(2, ...) then bounds it.
  const double tournament = std::min(10, population) - static_cast<double>(generation) / (generations / 10.0);
  r.tournament = std::min(population, std::max(2, static_cast<int>(std::trunc(tournament))));
  r.crossover = std::max(0.5, std::min(1.0, 1.0 - progress));
  r.mutation = std::max(0.01, std::min(0.5, 0.5 - progress));
  return r;
}

double genetic_score(const EvolveRow& row) { return row.results[2]; }

std::vector<Individual> breed(const std::vector<Individual>& population, const std::vector<double>& fitness,
                              const std::vector<Gene>& genes, const GeneticRates& rates, std::mt19937_64& rng) {
  const int n = static_cast<int>(population.size());
  if (n < 2 || fitness.size() != population.size()) fail("evolution: a population of at least 2, each with a fitness");
  const int elite = std::min(rates.elite, n);
  std::uniform_real_distribution<double> unit(0.0, 1.0), step(-0.1, 0.1);
  std::uniform_int_distribution<int> any(0, n - 1);
  // Parents: n - elite tournament winners (each tournament draws distinct individuals), then the elite.
  std::vector<int> parents, order(n);
  std::iota(order.begin(), order.end(), 0);
  for (int t = 0; t < n - elite; ++t) {
    std::shuffle(order.begin(), order.end(), rng);
    const auto entrants = order.begin() + std::min(rates.tournament, n);
    parents.push_back(*std::max_element(order.begin(), entrants, [&](int a, int b) { return fitness[a] < fitness[b]; }));
  }
  std::vector<int> ranked(n);
  std::iota(ranked.begin(), ranked.end(), 0);
  std::stable_sort(ranked.begin(), ranked.end(), [&](int a, int b) { return fitness[a] > fitness[b]; });
  parents.insert(parents.end(), ranked.begin(), ranked.begin() + elite);
  const int length = static_cast<int>(genes.size());
  std::vector<Individual> next;
  for (int i = 0; i < n; ++i) {
    const Individual& first = population[parents[any(rng)]];
    const Individual& second = population[parents[any(rng)]];
    Individual child = first;
    if (unit(rng) < rates.crossover && length > 1) {  // one point in 1 .. length-1: the second parent's tail
      const int point = std::uniform_int_distribution<int>(1, length - 1)(rng);
      std::copy(second.begin() + point, second.end(), child.begin() + point);
    }
    for (int j = 0; j < length; ++j)
      if (unit(rng) < rates.mutation) child[j] = std::clamp(child[j] + step(rng), genes[j].lower, genes[j].upper);
    next.push_back(std::move(child));
  }
  return next;
}

std::vector<Individual> read_seed_individuals(const std::string& dir, const std::vector<Gene>& genes,
                                              std::vector<std::string>* skipped) {
  if (!fs::is_directory(dir)) fail("--evolve_population ", dir, ": not a folder of hyperparameter files");
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".yaml" && entry.is_regular_file()) files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  std::vector<Individual> seeds;
  for (const std::string& file : files) {
    const YAML::Node root = load_yaml_file(file, "hyperparameter");
    if (!root.IsMap()) fail(file, ": a hyperparameter file is a YAML mapping of key: value");
    std::string missing;
    if (auto values = gene_values(root, genes, file, &missing)) seeds.push_back(std::move(*values));
    else skipped->push_back(file + " (lacks" + missing + ")");
  }
  return seeds;
}

std::vector<Individual> read_population_file(const std::string& path, const std::vector<Gene>& genes) {
  const YAML::Node root = load_yaml_file(path, "evolve population");
  if (!root.IsMap() || root.size() == 0)
    fail(path, ": an evolve_population.yaml maps gen<g>number<i> to the augmentation hyperparameters");
  std::vector<Individual> population;
  for (const auto& item : root) {
    const int line = item.first.Mark().line + 1;
    std::string name;
    try {
      name = item.first.as<std::string>();
    } catch (const YAML::Exception&) {
      fail(path, ":", line, ": an entry's name must be text (gen<g>number<i>)");
    }
    if (!item.second.IsMap()) fail(path, ":", line, ": '", name, "' must map keys to values");
    std::string missing;
    auto values = gene_values(item.second, genes, path, &missing);
    if (!values) fail(path, ":", line, ": '", name, "' lacks", missing);
    population.push_back(std::move(*values));
  }
  return population;
}

void write_population_file(const std::string& path, int generation, const std::vector<Individual>& population,
                           const std::vector<Gene>& genes) {
  std::string yaml;
  for (size_t i = 0; i < population.size(); ++i) {
    yaml += "gen" + std::to_string(generation) + "number" + std::to_string(i) + ":\n";
    for (size_t j = 0; j < genes.size(); ++j) yaml += "  " + genes[j].key + ": " + yaml_float(population[i][j]) + "\n";
  }
  write_file_atomic(path, {yaml}, Durability::kFlushed);
}

EvolveResult evolve_population(const TrainOptions& base, int generations, const PopulationOptions& options) {
  const Hyperparameters start = evolution_start(base, generations);
  if (options.size < 2) fail("evolution: a population needs at least 2 individuals, got ", options.size);
  const std::vector<Gene> genes = population_genes(start.values);
  if (genes.empty()) fail(base.hyp, ": no augmentation hyperparameter to evolve");
  std::mt19937_64 rng;
  // Read (and checked) before the folder is made: a bad file leaves nothing behind.
  std::vector<Individual> population = initial_population(genes, options, base.seed, rng);
  EvolutionFolder folder(base, start.values);
  const std::string population_file = (fs::path(folder.dir()) / "evolve_population.yaml").string();
  EvolveResult result;
  result.save_dir = folder.dir();
  double best_map50 = -1;
  Individual best;
  // The population about to be trained is always on disk: --resume_evolve starts from it.
  write_population_file(population_file, 0, population, genes);
  for (int gen = 0; gen < generations && !result.interrupted; ++gen) {
    std::vector<double> map50;  // genetic_score of each individual
    for (size_t i = 0; i < population.size(); ++i) {
      const auto row = folder.train_and_record(with_genes(start.values, genes, population[i]),
                                               cat("generation ", gen + 1, "/", generations, ", individual ", i + 1, "/",
                                                   population.size()));
      if (!row) {
        result.interrupted = true;
        break;
      }
      map50.push_back(genetic_score(*row));
    }
    if (result.interrupted) break;
    const size_t fittest = std::max_element(map50.begin(), map50.end()) - map50.begin();
    if (map50[fittest] > best_map50) {
      best_map50 = map50[fittest];
      best = population[fittest];
    }
    result.generations = gen + 1;
    population = breed(population, map50, genes, genetic_rates(gen, generations, options.size), rng);
    write_population_file(population_file, gen + 1, population, genes);
  }
  if (!best.empty()) {
    std::cout << "Best solution found (mAP50 " << yaml_float(best_map50) << "):";
    for (size_t j = 0; j < genes.size(); ++j) std::cout << " " << genes[j].key << "=" << yaml_float(best[j]);
    std::cout << "\n";
  }
  folder.finish(result);
  std::cout << "The population to train next (--resume_evolve): " << population_file << "\n";
  return result;
}

}  // namespace kestrel::train
