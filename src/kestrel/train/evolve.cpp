#include "kestrel/train/evolve.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kestrel/core/error.h"
#include "kestrel/train/hyperparameters.h"

namespace kestrel::train {

const std::vector<Gene>& evolution_genes() {
  // Upstream's meta: {key: (mutation gain, lower limit, upper limit)}.
  static const std::vector<Gene> genes = {
      {"lr0", 1, 1e-5, 1e-1},            {"lrf", 1, 0.01, 1.0},              {"momentum", 0.3, 0.6, 0.98},
      {"weight_decay", 1, 0.0, 0.001},   {"warmup_epochs", 1, 0.0, 5.0},     {"warmup_momentum", 1, 0.0, 0.95},
      {"warmup_bias_lr", 1, 0.0, 0.2},   {"box", 1, 0.02, 0.2},              {"cls", 1, 0.2, 4.0},
      {"cls_pw", 1, 0.5, 2.0},           {"obj", 1, 0.2, 4.0},               {"obj_pw", 1, 0.5, 2.0},
      {"iou_t", 0, 0.1, 0.7},            {"anchor_t", 1, 2.0, 8.0},          {"anchors", 2, 2.0, 10.0},
      {"fl_gamma", 0, 0.0, 2.0},         {"hsv_h", 1, 0.0, 0.1, true},       {"hsv_s", 1, 0.0, 0.9, true},
      {"hsv_v", 1, 0.0, 0.9, true},      {"degrees", 1, 0.0, 45.0, true},    {"translate", 1, 0.0, 0.9, true},
      {"scale", 1, 0.0, 0.9, true},      {"shear", 1, 0.0, 10.0, true},      {"perspective", 0, 0.0, 0.001, true},
      {"flipud", 1, 0.0, 1.0, true},     {"fliplr", 0, 0.0, 1.0, true},      {"mosaic", 1, 0.0, 1.0, true},
      {"mixup", 1, 0.0, 1.0, true},      {"copy_paste", 1, 0.0, 1.0, true},  {"paste_in", 1, 0.0, 1.0, true}};
  return genes;
}

void constrain_hyperparameters(HypValues& hyp) {
  for (auto& [key, value] : hyp)
    for (const auto& g : evolution_genes())
      if (g.key == key) {
        // Python's round(v, 5): the decimal nearest to the exact binary value, as printf's %.5f
        // (std::round(v * 1e5) / 1e5 rounds the product, which differs on near-ties such as 0.021845).
        char text[64];
        std::snprintf(text, sizeof text, "%.5f", std::clamp(value, g.lower, g.upper));
        value = std::strtod(text, nullptr);
      }
}

HypValues mutate_hyperparameters(const HypValues& parent, std::mt19937_64& rng) {
  constexpr double kProbability = 0.8, kSigma = 0.2;
  std::vector<const Gene*> gene(parent.size(), nullptr);
  bool any_gain = false;
  for (size_t i = 0; i < parent.size(); ++i)
    for (const auto& g : evolution_genes())
      if (g.key == parent[i].first) gene[i] = &g, any_gain = any_gain || g.gain > 0;
  if (!any_gain) fail("--evolve: the hyperparameters have no gene to mutate");
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> factor(parent.size(), 1.0);
  // Upstream: one global uniform draw scales every gene's change; retry until something changes.
  while (std::all_of(factor.begin(), factor.end(), [](double f) { return f == 1.0; })) {
    const double scale = uniform(rng);
    for (size_t i = 0; i < parent.size(); ++i) {
      const double gain = gene[i] ? gene[i]->gain : 0.0;
      const double mutated = uniform(rng) < kProbability ? 1.0 : 0.0;
      factor[i] = std::clamp(gain * mutated * normal(rng) * scale * kSigma + 1.0, 0.3, 3.0);
    }
  }
  HypValues child = parent;
  for (size_t i = 0; i < child.size(); ++i) child[i].second *= factor[i];
  constrain_hyperparameters(child);
  return child;
}

HypValues select_parent(const std::vector<EvolveRow>& rows, std::mt19937_64& rng) {
  if (rows.empty()) fail("--evolve: no generation to choose a parent from");
  std::vector<const EvolveRow*> sorted;
  for (const auto& r : rows) sorted.push_back(&r);
  std::stable_sort(sorted.begin(), sorted.end(), [](const EvolveRow* a, const EvolveRow* b) { return row_fitness(*a) > row_fitness(*b); });
  sorted.resize(std::min<size_t>(5, sorted.size()));
  const double worst = row_fitness(*sorted.back());
  std::vector<double> w;
  for (const auto* r : sorted) w.push_back(row_fitness(*r) - worst + 1e-6);
  std::discrete_distribution<size_t> pick(w.begin(), w.end());
  return sorted[pick(rng)]->hyp;
}

EvolveResult evolve(const TrainOptions& base, int generations) {
  const Hyperparameters start = evolution_start(base, generations);
  EvolutionFolder folder(base, start.values);
  EvolveResult result;
  result.save_dir = folder.dir();
  for (int gen = 0; gen < generations; ++gen) {
    const std::vector<EvolveRow>& rows = folder.rows();
    HypValues hyp = start.values;
    if (!rows.empty()) {
      // Seeded by --seed and the rows so far: a continued evolution (--exist-ok) draws anew rather than
      // repeating the draws, and children, of its first run (upstream seeds with the clock).
      std::seed_seq seeds{static_cast<uint32_t>(base.seed), static_cast<uint32_t>(base.seed >> 32),
                          static_cast<uint32_t>(rows.size()), static_cast<uint32_t>(gen)};
      std::mt19937_64 rng(seeds);
      hyp = mutate_hyperparameters(select_parent(rows, rng), rng);
    }
    constrain_hyperparameters(hyp);  // every generation, the first too (upstream's "Constrain to limits")
    if (!folder.train_and_record(hyp, cat("generation ", gen + 1, "/", generations))) {
      result.interrupted = true;
      break;
    }
    result.generations = gen + 1;
  }
  folder.finish(result);
  return result;
}

}  // namespace kestrel::train
