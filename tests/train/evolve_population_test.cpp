// --evolve with --evolve_population / --resume_evolve: YOLOv5 HEAD's genetic algorithm. Its schedule
// against values worked out by hand from upstream's formulas, the breeding rules as invariants
// (selection never picks the least fit, one-point crossover, +-0.1 mutation within the bounds), the
// population file, seed folders, and two generations end to end with a resume.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "kestrel/core/error.h"
#include "kestrel/train/evolve_population.h"
#include "kestrel/train/hyperparameters.h"
#include "test_support.h"
#include "train/evolve_test_support.h"

namespace kestrel::train {
namespace {
namespace fs = std::filesystem;

// Upstream (train.py at HEAD), g = generation, G = generations, pop = 50:
//   elite = 2 + int(3 * g / G); tournament = max(2, int(min(10, pop) - g / (G / 10)));
//   crossover = max(0.5, min(1, 1 - g / G)); mutation = max(0.01, min(0.5, 0.5 - g / G)).
TEST(EvolvePopulation, ScheduleIsUpstreams) {
  struct Case {
    int g, G, pop, elite, tournament;
    double crossover, mutation;
  };
  const Case cases[] = {
      {0, 300, 50, 2, 10, 1.0, 0.5},           // start
      {60, 300, 50, 2, 8, 0.8, 0.3},           // 3 * 0.2 = 0.6 -> 0; 10 - 60/30 = 8
      {150, 300, 50, 3, 5, 0.5, 0.01},         // halfway: 3 * 0.5 -> 1; 10 - 5; 1 - 0.5; 0.5 - 0.5 -> 0.01
      {299, 300, 50, 4, 2, 0.5, 0.01},         // 3 * 0.997 -> 2 (never 5); 10 - 9.97 = 0.03 -> 0 -> 2
      {1, 3, 50, 3, 6, 1 - 1.0 / 3, 0.5 - 1.0 / 3},  // 10 - 1/0.3 = 6.67 -> 6
      {7, 10, 50, 4, 3, 0.5, 0.01},            // 3 * 0.7 = 2.1 -> 2; 10 - 7
      {3, 10, 4, 2, 2, 0.7, 0.2},              // min(10, 4) - 3 = 1 -> 2
      {0, 5, 3, 2, 3, 1.0, 0.5},               // a tournament of the whole population of 3
  };
  for (const Case& c : cases) {
    const GeneticRates r = genetic_rates(c.g, c.G, c.pop);
    EXPECT_EQ(r.elite, c.elite) << c.g << "/" << c.G;
    EXPECT_EQ(r.tournament, c.tournament) << c.g << "/" << c.G;
    EXPECT_NEAR(r.crossover, c.crossover, 1e-12) << c.g << "/" << c.G;
    EXPECT_NEAR(r.mutation, c.mutation, 1e-12) << c.g << "/" << c.G;
  }
}

// HEAD ranks by mAP50 (fitness_scores.append(results[2])); hyp_evolve.yaml keeps print_mutation's fitness.
TEST(EvolvePopulation, RanksByMap50NotByFitness) {
  const EvolveRow loose{{0.5, 0.5, 0.6, 0.10, 0, 0, 0}, {}};  // fitness 0.06 + 0.09 = 0.15
  const EvolveRow tight{{0.5, 0.5, 0.4, 0.35, 0, 0, 0}, {}};  // fitness 0.04 + 0.315 = 0.355
  EXPECT_GT(genetic_score(loose), genetic_score(tight));
  EXPECT_LT(row_fitness(loose), row_fitness(tight));
}

TEST(EvolvePopulation, GenesAreTheAugmentationKeysInFileOrder) {
  const std::vector<Gene> low = population_genes(load_hyperparameters("configs/hyps/hyp.scratch-low.yaml").values);
  std::vector<std::string> keys;
  for (const Gene& g : low) keys.push_back(g.key);
  // HEAD's meta entries flagged True, in hyp.scratch-low.yaml's order.
  const std::vector<std::string> expected = {"hsv_h", "hsv_s", "hsv_v", "degrees", "translate", "scale", "shear",
                                             "perspective", "flipud", "fliplr", "mosaic", "mixup", "copy_paste"};
  EXPECT_EQ(keys, expected);
  EXPECT_EQ(low[3].upper, 45.0);      // degrees (0, 45)
  EXPECT_EQ(low[7].upper, 0.001);     // perspective (0, 0.001)
  EXPECT_EQ(low[0].lower, 0.0);
  const std::vector<Gene> p5 = population_genes(load_hyperparameters("configs/hyps/hyp.scratch.p5.yaml").values);
  std::set<std::string> p5_keys;
  for (const Gene& g : p5) p5_keys.insert(g.key);
  EXPECT_EQ(p5.size(), 14u);
  EXPECT_TRUE(p5_keys.count("paste_in")) << "YOLOv7's paste_in is evolved too";
}

std::vector<Gene> wide_genes(int n) {  // bounds far from the test's values: only mutation can reach them
  std::vector<Gene> genes;
  for (int j = 0; j < n; ++j) genes.push_back({"g" + std::to_string(j), 1, -1000.0, 1000.0});
  return genes;
}

// Individual i holds 100 i + j in gene j: every value says where it came from.
std::vector<Individual> marked_population(int n, int length) {
  std::vector<Individual> p(n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < length; ++j) p[i].push_back(100.0 * i + j);
  return p;
}

TEST(EvolvePopulation, SelectionNeverBreedsTheLeastFit) {
  const auto genes = wide_genes(4);
  const auto population = marked_population(6, 4);
  const std::vector<double> fitness = {0.3, 0.1, 0.6, 0.05, 0.5, 0.2};  // individual 3 is the least fit
  std::mt19937_64 rng(7);
  GeneticRates copies{2, 2, 0.0, 0.0};  // no crossover, no mutation: children are copies of parents
  std::set<int> seen;
  for (int round = 0; round < 200; ++round) {
    const auto next = breed(population, fitness, genes, copies, rng);
    ASSERT_EQ(next.size(), population.size());
    for (const Individual& child : next) {
      const int parent = static_cast<int>(child[0] / 100);
      ASSERT_EQ(child, population[parent]);
      EXPECT_NE(parent, 3) << "a tournament of two always has a fitter entrant than the least fit";
      seen.insert(parent);
    }
  }
  EXPECT_EQ(seen.size(), 5u) << "every other individual can win a tournament of two";
  // A tournament of the whole population: every winner is the fittest; the elite adds the second.
  GeneticRates everyone{2, 6, 0.0, 0.0};
  std::set<int> parents;
  for (int round = 0; round < 50; ++round)
    for (const Individual& child : breed(population, fitness, genes, everyone, rng))
      parents.insert(static_cast<int>(child[0] / 100));
  EXPECT_EQ(parents, (std::set<int>{2, 4}));
}

TEST(EvolvePopulation, CrossoverJoinsAHeadAndATailAtOnePoint) {
  const int length = 5;
  const auto genes = wide_genes(length);
  const auto population = marked_population(8, length);
  const std::vector<double> fitness(8, 0.5);
  std::mt19937_64 rng(11);
  std::set<int> points;
  for (int round = 0; round < 100; ++round)
    for (const Individual& child : breed(population, fitness, genes, GeneticRates{2, 3, 1.0, 0.0}, rng)) {
      const int head = static_cast<int>(child[0] / 100), tail = static_cast<int>(child[length - 1] / 100);
      int point = length;  // first gene from the tail parent
      for (int j = 0; j < length; ++j) {
        ASSERT_EQ(std::fmod(child[j], 100.0), j) << "gene " << j << " moved position";
        const int from = static_cast<int>(child[j] / 100);
        if (from != head && point == length) point = j;
        if (point < length) {
          ASSERT_EQ(from, tail) << "genes after the point come from one parent";
        }
      }
      if (head != tail) {
        EXPECT_GE(point, 1);
        EXPECT_LE(point, length - 1);
        points.insert(point);
      }
    }
  EXPECT_EQ(points, (std::set<int>{1, 2, 3, 4})) << "every crossover point of 1 .. length-1 occurs";
}

TEST(EvolvePopulation, MutationMovesEachGeneByAtMostATenthWithinTheBounds) {
  auto genes = wide_genes(3);
  genes[2].upper = 200.05;  // individual 2's gene 2 is 202: clipped to the bound
  const auto population = marked_population(3, 3);
  const std::vector<double> fitness = {0.1, 0.2, 0.3};
  std::mt19937_64 rng(5);
  int clipped = 0;
  for (int round = 0; round < 100; ++round)
    for (const Individual& child : breed(population, fitness, genes, GeneticRates{2, 2, 0.0, 1.0}, rng)) {
      const int parent = static_cast<int>(std::lround(child[0] / 100));
      for (int j = 0; j < 3; ++j) {
        const double before = population[parent][j];
        if (before > genes[j].upper) {
          EXPECT_EQ(child[j], genes[j].upper);
          ++clipped;
          continue;
        }
        EXPECT_NE(child[j], before) << "mutation rate 1 changes every gene";
        EXPECT_LE(std::fabs(child[j] - before), 0.1 + 1e-12);
        EXPECT_LE(child[j], genes[j].upper);
      }
    }
  EXPECT_GT(clipped, 0);
}

TEST(EvolvePopulation, PopulationFileRoundTripsAndNamesItsFaults) {
  test::TempDir dir;
  const auto genes = population_genes(load_hyperparameters("configs/hyps/hyp.scratch-low.yaml").values);
  std::vector<Individual> population;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 4; ++i) {
    Individual x;
    for (const Gene& g : genes) x.push_back(std::uniform_real_distribution<double>(g.lower, g.upper)(rng));
    population.push_back(x);
  }
  const std::string path = dir.file("evolve_population.yaml");
  write_population_file(path, 7, population, genes);
  std::ifstream in(path);
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first, "gen7number0:");  // upstream's entry names
  const auto back = read_population_file(path, genes);
  ASSERT_EQ(back.size(), population.size());
  for (size_t i = 0; i < back.size(); ++i)
    for (size_t j = 0; j < genes.size(); ++j)
      EXPECT_NEAR(back[i][j], population[i][j], 1e-9 * std::max(1.0, std::fabs(population[i][j])));

  test::write_file(dir.file("lacks.yaml"), "gen1number0:\n  hsv_h: 0.1\n");
  std::string message = test::error_message([&] { read_population_file(dir.file("lacks.yaml"), genes); });
  EXPECT_NE(message.find("lacks.yaml:1: 'gen1number0' lacks hsv_s"), std::string::npos) << message;
  test::write_file(dir.file("text.yaml"), "gen1number0:\n  hsv_h: fast\n");
  message = test::error_message([&] { read_population_file(dir.file("text.yaml"), genes); });
  EXPECT_NE(message.find("text.yaml:2: 'hsv_h' must be a number"), std::string::npos) << message;
  for (const char* bad : {"[1, 2]\n", "gen1number0: 3\n", "{unclosed\n", ""}) {
    test::write_file(dir.file("bad.yaml"), bad);
    message = test::error_message([&] { read_population_file(dir.file("bad.yaml"), genes); });
    EXPECT_NE(message.find("bad.yaml"), std::string::npos) << bad << ": " << message;
  }
  message = test::error_message([&] { read_population_file(dir.file("missing.yaml"), genes); });
  EXPECT_NE(message.find("missing.yaml"), std::string::npos) << message;
  // Values a hyp file could not hold are refused when read, with the line.
  test::write_file(dir.file("range.yaml"), "gen1number0:\n  hsv_h: 0.1\n  mosaic: 1.5\n");
  message = test::error_message([&] { read_population_file(dir.file("range.yaml"), genes); });
  EXPECT_NE(message.find("range.yaml:3: 'mosaic' is a probability: at most 1, got 1.5"), std::string::npos) << message;
  test::write_file(dir.file("key.yaml"), "? [a, b]\n: {hsv_h: 0.1}\n");
  message = test::error_message([&] { read_population_file(dir.file("key.yaml"), genes); });
  EXPECT_NE(message.find("key.yaml:1: an entry's name must be text"), std::string::npos) << message;
}

// What upstream's yaml.dump writes (PyYAML 6: keys sorted as text, 1.0e-05), pasted from its output.
TEST(EvolvePopulation, ReadsUpstreamsPopulationFile) {
  test::TempDir dir;
  test::write_file(dir.file("evolve_population.yaml"),
                   "gen3number10:\n  copy_paste: 0.0\n  degrees: 0.0\n  fliplr: 0.5\n  flipud: 0.0\n  hsv_h: 0.015\n"
                   "  hsv_s: 0.7\n  hsv_v: 0.4\n  mixup: 0.0\n  mosaic: 1.0\n  perspective: 1.0e-05\n  scale: 0.5\n"
                   "  shear: 0.0\n  translate: 0.1\n"
                   "gen3number2:\n  copy_paste: 0.3\n  degrees: 1.5\n  fliplr: 0.4\n  flipud: 0.1\n  hsv_h: 0.02\n"
                   "  hsv_s: 0.6\n  hsv_v: 0.3\n  mixup: 0.05\n  mosaic: 0.9\n  perspective: 0.0\n  scale: 0.25\n"
                   "  shear: 2.0\n  translate: 0.2\n");
  const auto genes = population_genes(load_hyperparameters("configs/hyps/hyp.scratch-low.yaml").values);
  const auto population = read_population_file(dir.file("evolve_population.yaml"), genes);
  ASSERT_EQ(population.size(), 2u);
  // In the genes' order (hsv_h hsv_s hsv_v degrees translate scale shear perspective flipud fliplr mosaic mixup copy_paste).
  EXPECT_EQ(population[0], (Individual{0.015, 0.7, 0.4, 0.0, 0.1, 0.5, 0.0, 1e-5, 0.0, 0.5, 1.0, 0.0, 0.0}));
  EXPECT_EQ(population[1], (Individual{0.02, 0.6, 0.3, 1.5, 0.2, 0.25, 2.0, 0.0, 0.1, 0.4, 0.9, 0.05, 0.3}));
}

TEST(EvolvePopulation, SeedFolderSkipsFilesLackingAGene) {
  test::TempDir dir;
  fs::create_directories(dir.file("seeds"));
  for (const char* name : {"hyp.scratch-low.yaml", "hyp.scratch.p5.yaml", "hyp.scratch.tiny.yaml"})
    fs::copy_file(fs::path("configs/hyps") / name, fs::path(dir.file("seeds")) / name);
  test::write_file(dir.file("seeds/notes.txt"), "not a hyperparameter file");
  const auto p5 = load_hyperparameters("configs/hyps/hyp.scratch.p5.yaml");
  const auto genes = population_genes(p5.values);
  std::vector<std::string> skipped;
  const auto seeds = read_seed_individuals(dir.file("seeds"), genes, &skipped);
  ASSERT_EQ(seeds.size(), 2u) << "p5 and tiny; scratch-low has no paste_in";
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("hyp.scratch-low.yaml (lacks paste_in)"), std::string::npos) << skipped[0];
  // Name order: p5 before tiny; the values are the files'.
  for (size_t j = 0; j < genes.size(); ++j)
    for (const auto& [k, v] : p5.values)
      if (k == genes[j].key) {
        EXPECT_EQ(seeds[0][j], v) << k;
      }
  std::string message = test::error_message([&] { read_seed_individuals(dir.file("nowhere"), genes, &skipped); });
  EXPECT_NE(message.find("nowhere: not a folder"), std::string::npos) << message;
  fs::create_directories(dir.file("seeds/folder.yaml"));  // not a file: not a seed
  skipped.clear();
  EXPECT_EQ(read_seed_individuals(dir.file("seeds"), genes, &skipped).size(), 2u);
  // A seed the trainer would refuse is refused when read, naming the file and line.
  test::write_file(dir.file("seeds/hyp.zz.yaml"), "hsv_h: 0.015\nscale: 1.2\n");
  message = test::error_message([&] { read_seed_individuals(dir.file("seeds"), genes, &skipped); });
  EXPECT_NE(message.find("hyp.zz.yaml:2: 'scale' is a gain below 1"), std::string::npos) << message;
}

TEST(EvolvePopulation, TwoGenerationsThenAResume) {
  test::TempDir dir;
  fs::create_directories(dir.file("seeds"));
  fs::copy_file("configs/hyps/hyp.scratch-high.yaml", dir.file("seeds/hyp.scratch-high.yaml"));
  const TrainOptions o = test_evolve::tiny_evolve_options("configs/hyps/hyp.scratch-low.yaml", dir.file("runs/train"));
  PopulationOptions p;
  p.seed_dir = dir.file("seeds");
  p.size = 3;
  const EvolveResult r = evolve_population(o, 2, p);
  EXPECT_EQ(r.generations, 2);
  const auto rows = read_evolve_csv((fs::path(r.save_dir) / "evolve.csv").string());
  ASSERT_EQ(rows.size(), 6u) << "2 generations of 3 trainings";
  const HypValues low = load_hyperparameters(o.hyp).values;
  std::map<std::string, double> high;
  for (const auto& [key, value] : load_hyperparameters(p.seed_dir + "/hyp.scratch-high.yaml").values) high[key] = value;
  const auto genes = population_genes(low);
  std::set<std::string> gene_keys;
  for (const Gene& g : genes) gene_keys.insert(g.key);
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].hyp.size(), low.size());
    for (size_t k = 0; k < low.size(); ++k) {
      const auto& [key, value] = rows[i].hyp[k];
      ASSERT_EQ(key, low[k].first);
      if (!gene_keys.count(key)) {
        EXPECT_NEAR(value, low[k].second, 1e-9) << key << " is not a gene: --hyp's value in every training";
      } else if (i == 0) {
        EXPECT_NEAR(value, high.at(key), 1e-4 * std::max(1.0, std::fabs(value))) << key << ": the seed file first";
      } else {
        for (const Gene& g : genes)
          if (g.key == key) {
            EXPECT_TRUE(value >= g.lower && value <= g.upper) << key << " " << value;
          }
      }
    }
    for (double v : rows[i].results) EXPECT_TRUE(std::isfinite(v));
  }
  // The population saved for --resume_evolve is the third generation's, not yet trained.
  const std::string saved = (fs::path(r.save_dir) / "evolve_population.yaml").string();
  const auto next = read_population_file(saved, genes);
  ASSERT_EQ(next.size(), 3u);
  std::ifstream in(saved);
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first, "gen2number0:");

  PopulationOptions resume;
  resume.resume_file = saved;
  resume.size = 3;
  const EvolveResult again = evolve_population(o, 1, resume);
  EXPECT_NE(again.save_dir, r.save_dir) << "a new folder, as upstream";
  const auto resumed = read_evolve_csv((fs::path(again.save_dir) / "evolve.csv").string());
  ASSERT_EQ(resumed.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = 0; j < genes.size(); ++j)
      for (const auto& [key, value] : resumed[i].hyp)
        if (key == genes[j].key) {
          EXPECT_NEAR(value, next[i][j], 1e-4 * std::max(1.0, std::fabs(value))) << key;
        }

  // More individuals than the population holds: refused before a folder is made.
  PopulationOptions small = resume;
  small.size = 2;
  const std::string message = test::error_message([&] { evolve_population(o, 1, small); });
  EXPECT_NE(message.find("3 individuals, the population holds 2"), std::string::npos) << message;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.file("runs/train")), fs::directory_iterator()), 2);
}

// An evolve.csv of an earlier run (continued with --resume) whose columns order the same keys otherwise: each new row
// goes under the file's columns, not in --hyp's order (which put each value under another key's name).
TEST(EvolvePopulation, RowsFollowTheColumnsOfAnEarlierEvolveCsv) {
  test::TempDir dir;
  const HypValues low = load_hyperparameters("configs/hyps/hyp.scratch-low.yaml").values;
  std::string header = "metrics/precision,metrics/recall,metrics/mAP_0.5,metrics/mAP_0.5:0.95,val/box_loss,val/obj_loss,val/cls_loss";
  std::string row = "0.1,0.2,0.3,0.4,0.1,0.1,0.1";
  for (auto it = low.rbegin(); it != low.rend(); ++it) header += "," + it->first, row += "," + std::to_string(it->second);
  fs::create_directories(dir.file("runs/exp"));
  test::write_file(dir.file("runs/exp/evolve.csv"), header + "\n" + row + "\n");
  TrainOptions o = test_evolve::tiny_evolve_options("configs/hyps/hyp.scratch-low.yaml", dir.file("runs"));
  o.name = "exp";
  o.exist_ok = true;
  PopulationOptions p;
  p.size = 2;
  ASSERT_EQ(evolve_population(o, 1, p).generations, 1);
  const auto rows = read_evolve_csv(dir.file("runs/exp/evolve.csv"));
  ASSERT_EQ(rows.size(), 3u);
  const std::map<std::string, double> given(low.begin(), low.end());
  std::set<std::string> genes;
  for (const Gene& g : population_genes(low)) genes.insert(g.key);
  for (size_t r = 1; r < 3; ++r)
    for (const auto& [key, value] : rows[r].hyp)
      if (!genes.count(key)) {
        EXPECT_NEAR(value, given.at(key), 1e-9) << key << ": not a gene, --hyp's value under its own name";
      }
}

// Ctrl-C in the first training: nothing recorded, the population to train is on disk for
// --resume_evolve, and the result says it was interrupted. An empty seed folder gives random individuals.
TEST(EvolvePopulation, InterruptedFirstTrainingLeavesThePopulationToResume) {
  test::TempDir dir;
  fs::create_directories(dir.file("seeds"));
  TrainOptions o = test_evolve::tiny_evolve_options("configs/hyps/hyp.scratch-low.yaml", dir.file("runs/train"));
  o.interrupt_after = 1;
  PopulationOptions p;
  p.seed_dir = dir.file("seeds");
  p.size = 3;
  const EvolveResult r = evolve_population(o, 2, p);
  EXPECT_TRUE(r.interrupted);
  EXPECT_EQ(r.generations, 0);
  EXPECT_FALSE(fs::exists(fs::path(r.save_dir) / "evolve.csv"));
  const auto genes = population_genes(load_hyperparameters(o.hyp).values);
  const auto saved = read_population_file((fs::path(r.save_dir) / "evolve_population.yaml").string(), genes);
  ASSERT_EQ(saved.size(), 3u);
  for (const Individual& x : saved)
    for (size_t j = 0; j < genes.size(); ++j) EXPECT_TRUE(x[j] >= genes[j].lower && x[j] <= genes[j].upper) << genes[j].key;
  EXPECT_NE(saved[0], saved[1]);
}

}  // namespace
}  // namespace kestrel::train
