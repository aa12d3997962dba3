// --evolve: upstream's gene table and mutation rule (bounds, fixed genes, 5-decimal rounding), the
// fitness-weighted parent choice, and three generations end to end (evolve.csv, hyp_evolve.yaml).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "kestrel/core/error.h"
#include "kestrel/data/image_io.h"
#include "kestrel/eval/plots.h"
#include "kestrel/train/evolve.h"
#include "kestrel/train/hyperparameters.h"
#include "test_support.h"
#include "train/evolve_test_support.h"

namespace kestrel::train {
namespace {
namespace fs = std::filesystem;

std::map<std::string, Gene> genes() {
  std::map<std::string, Gene> m;
  for (const auto& g : evolution_genes()) m[g.key] = g;
  return m;
}

TEST(Evolve, GeneBoundsAreUpstreams) {
  // Bounds from shared/reference/peers.md (v5 HEAD and v7 meta).
  auto g = genes();
  EXPECT_EQ(g.at("lr0").lower, 1e-5);
  EXPECT_EQ(g.at("lr0").upper, 0.1);
  EXPECT_EQ(g.at("momentum").lower, 0.6);
  EXPECT_EQ(g.at("momentum").upper, 0.98);
  EXPECT_EQ(g.at("anchor_t").lower, 2.0);
  EXPECT_EQ(g.at("anchor_t").upper, 8.0);
  EXPECT_EQ(g.at("shear").upper, 10.0);
  EXPECT_EQ(g.at("perspective").upper, 0.001);
  EXPECT_EQ(g.at("hsv_h").upper, 0.1);
  EXPECT_EQ(g.size(), 30u);
}

TEST(Evolve, MutationsStayInBoundsAndKeepFixedGenes) {
  HypValues start = default_hyperparameters().values;
  start.emplace_back("loss_ota", 1.0);  // no gene: never mutated
  const auto g = genes();
  std::mt19937_64 rng(3);
  std::set<std::string> changed_keys;
  for (int i = 0; i < 200; ++i) {
    const HypValues child = mutate_hyperparameters(start, rng);
    ASSERT_EQ(child.size(), start.size());
    bool changed = false;
    for (size_t k = 0; k < child.size(); ++k) {
      const auto& [key, v] = child[k];
      EXPECT_EQ(key, start[k].first);
      const auto it = g.find(key);
      if (it == g.end() || it->second.gain == 0) {
        EXPECT_EQ(v, start[k].second) << key << " has no gain and must not change";
        continue;
      }
      EXPECT_GE(v, it->second.lower) << key;
      EXPECT_LE(v, it->second.upper) << key;
      EXPECT_NEAR(v * 1e5, std::round(v * 1e5), 1e-6) << key << " not rounded to 5 decimals";
      if (v != start[k].second) changed = true, changed_keys.insert(key);
    }
    EXPECT_TRUE(changed) << "mutation " << i << " changed nothing";
  }
  EXPECT_GT(changed_keys.size(), 15u);  // probability 0.8 per gene: nearly all genes move in 200 draws
  for (const char* fixed : {"iou_t", "fl_gamma", "perspective", "fliplr", "loss_ota"}) EXPECT_FALSE(changed_keys.count(fixed)) << fixed;
  // Reproducible for a seed.
  std::mt19937_64 a(11), b(11);
  EXPECT_EQ(mutate_hyperparameters(start, a), mutate_hyperparameters(start, b));
}

TEST(Evolve, ParentIsFitnessWeightedAmongTheTopFive) {
  // fitness = 0.1 mAP50 + 0.9 mAP50-95 = x when both are x.
  const std::vector<double> x = {0.5, 0.3, 0.1, 0.2, 0.4, 0.05};
  std::vector<EvolveRow> rows;
  for (size_t i = 0; i < x.size(); ++i) rows.push_back({{0, 0, x[i], x[i], 0, 0, 0}, {{"row", static_cast<double>(i)}}});
  // Top 5: 0.5 0.4 0.3 0.2 0.1; weights x - 0.1 (+1e-6): 0.4 0.3 0.2 0.1 ~0 of 1.0.
  std::mt19937_64 rng(5);
  std::map<int, int> picks;
  for (int i = 0; i < 4000; ++i) ++picks[static_cast<int>(select_parent(rows, rng)[0].second)];
  EXPECT_EQ(picks[5], 0) << "the sixth-best row is outside the top five";
  EXPECT_LE(picks[2], 2) << "the fifth-best row has weight 1e-6";
  EXPECT_NEAR(picks[0] / 4000.0, 0.4, 0.03);
  EXPECT_NEAR(picks[4] / 4000.0, 0.3, 0.03);
  EXPECT_NEAR(picks[1] / 4000.0, 0.2, 0.03);
  EXPECT_NEAR(picks[3] / 4000.0, 0.1, 0.03);
}

TEST(Evolve, MalformedEvolveCsvNamesTheFile) {
  test::TempDir dir;
  test::write_file(dir.file("evolve.csv"), "a,b\n1,2\n");
  EXPECT_THROW(read_evolve_csv(dir.file("evolve.csv")), Error);
  EXPECT_TRUE(read_evolve_csv(dir.file("missing.csv")).empty());
  // A gene of nan or inf cannot be trained with; results may be (a diverged generation's val losses, as
  // upstream writes them), and a mAP that is not a number counts as fitness 0.
  const std::string header = "metrics/precision,metrics/recall,metrics/mAP_0.5,metrics/mAP_0.5:0.95,val/box_loss,"
                             "val/obj_loss,val/cls_loss,lr0\n";
  for (const char* row : {"0.1,0.2,0.3,0.4,0.1,0.1,0.1,inf\n", "0.1,0.2,0.3,0.4,0.1,0.1,0.1,nan\n"}) {
    test::write_file(dir.file("evolve.csv"), header + row);
    const std::string message = test::error_message([&] { read_evolve_csv(dir.file("evolve.csv")); });
    EXPECT_NE(message.find(dir.file("evolve.csv") + ":2: \""), std::string::npos) << message;
    EXPECT_NE(message.find("\" is not a finite number"), std::string::npos) << message;
  }
  test::write_file(dir.file("evolve.csv"), header + "0.1,0.2,0.3,0.4,nan,-nan,inf,0.01\n0.1,0.2,nan,nan,0.1,0.1,0.1,0.02\n");
  const std::vector<EvolveRow> rows = read_evolve_csv(dir.file("evolve.csv"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(std::isnan(rows[0].results[4]) && std::isinf(rows[0].results[6]));
  EXPECT_DOUBLE_EQ(row_fitness(rows[0]), 0.1 * 0.3 + 0.9 * 0.4);
  EXPECT_EQ(row_fitness(rows[1]), 0.0);
  EXPECT_EQ(&fittest(rows), &rows[0]);
}

// Upstream's "Constrain to limits" runs for every generation, the first included, and rounds with Python's
// round(v, 5): values from Python (round(0.021845, 5) = 0.02184; round(0.000015, 5) = 2e-05).
TEST(Evolve, ConstraintClipsAndRoundsAsPython) {
  HypValues hyp = {{"lrf", 0.005}, {"weight_decay", 0.005}, {"momentum", 0.5}, {"warmup_epochs", 10},
                   {"lr0", 0.021845}, {"hsv_h", 0.000015}, {"loss_ota", 7.123456789}};
  constrain_hyperparameters(hyp);
  EXPECT_EQ(hyp[0].second, 0.01);
  EXPECT_EQ(hyp[1].second, 0.001);
  EXPECT_EQ(hyp[2].second, 0.6);
  EXPECT_EQ(hyp[3].second, 5.0);
  EXPECT_EQ(hyp[4].second, 0.02184);  // std::round(v * 1e5) / 1e5 gives 0.02185
  EXPECT_EQ(hyp[5].second, 2e-05);
  EXPECT_EQ(hyp[6].second, 7.123456789);  // no gene: kept
}


// A folder called evolve.csv is refused when read (an evolution would otherwise train a generation first),
// and an evolve.csv of another hyperparameter file is refused before anything trains: its keys would
// replace --hyp's (hyp.scratch.tiny's paste_in and loss_ota dropped).
TEST(Evolve, EvolveCsvOfAnotherRecipeOrAFolderIsRefusedFirst) {
  test::TempDir dir;
  fs::create_directories(dir.file("folder/evolve.csv"));
  const std::string message = test::error_message([&] { read_evolve_csv(dir.file("folder/evolve.csv")); });
  EXPECT_NE(message.find("evolve.csv: is a directory"), std::string::npos) << message;

  fs::create_directories(dir.file("runs/exp"));
  const HypValues low = load_hyperparameters("configs/hyps/hyp.scratch-low.yaml").values;
  std::string header = "metrics/precision,metrics/recall,metrics/mAP_0.5,metrics/mAP_0.5:0.95,val/box_loss,val/obj_loss,val/cls_loss";
  std::string row = "0.1,0.2,0.3,0.4,0.1,0.1,0.1";
  for (const auto& [k, v] : low) header += "," + k, row += "," + std::to_string(v);
  test::write_file(dir.file("runs/exp/evolve.csv"), header + "\n" + row + "\n");
  TrainOptions o = test_evolve::tiny_evolve_options("configs/hyps/hyp.scratch.tiny.yaml", dir.file("runs"));
  o.name = "exp";
  o.exist_ok = true;
  const std::string refused = test::error_message([&] { evolve(o, 1); });
  EXPECT_NE(refused.find("evolve.csv: its generations evolve other hyperparameters than configs/hyps/hyp.scratch.tiny.yaml"),
            std::string::npos) << refused;
  EXPECT_NE(refused.find("loss_ota"), std::string::npos) << refused;
  EXPECT_NE(refused.find("paste_in"), std::string::npos) << refused;
  EXPECT_FALSE(fs::exists(dir.file("runs/exp/generation"))) << "a generation trained first";
}

// An evolve.csv of a header alone (a run stopped in its first generation, by hand) is continued without a
// second header, and its columns are checked against --hyp like rows'. The warnings about --hyp's keys are
// said once, of the user's file (not of each generation's hyp_generation.yaml).
TEST(Evolve, HeaderOnlyCsvContinuedAndHypWarningsOnce) {
  test::TempDir dir;
  std::string low_hyp;
  {
    std::ifstream in("configs/hyps/hyp.scratch-low.yaml");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("mixup:", 0) != 0) low_hyp += line + "\n";
  }
  low_hyp += "foo: 2\n";
  test::write_file(dir.file("lacking.yaml"), low_hyp);
  const HypValues start = load_hyperparameters(dir.file("lacking.yaml")).values;
  std::string header = "metrics/precision,metrics/recall,metrics/mAP_0.5,metrics/mAP_0.5:0.95,val/box_loss,val/obj_loss,val/cls_loss";
  for (const auto& [k, v] : start) header += "," + k;
  fs::create_directories(dir.file("runs/exp"));
  test::write_file(dir.file("runs/exp/evolve.csv"), header + "\n");
  TrainOptions o = test_evolve::tiny_evolve_options(dir.file("lacking.yaml"), dir.file("runs"));
  o.name = "exp";
  o.exist_ok = true;
  testing::internal::CaptureStdout();
  const EvolveResult r = evolve(o, 1);
  const std::string console = testing::internal::GetCapturedStdout();
  EXPECT_EQ(r.generations, 1);
  const auto rows = read_evolve_csv(dir.file("runs/exp/evolve.csv"));
  EXPECT_EQ(rows.size(), 1u);
  std::ifstream in(dir.file("runs/exp/evolve.csv"));
  int headers = 0;
  for (std::string line; std::getline(in, line);) headers += line.find("metrics/precision") != std::string::npos;
  EXPECT_EQ(headers, 1);
  const auto count = [&](const std::string& what) {
    int n = 0;
    for (size_t at = console.find(what); at != std::string::npos; at = console.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("warning: " + dir.file("lacking.yaml") + " lacks mixup"), 1) << console;
  EXPECT_EQ(count("warning: " + dir.file("lacking.yaml") + ": keys kestrel does not use: foo"), 1) << console;
  EXPECT_EQ(count("hyp_generation.yaml"), 0) << console;

  // A header of other columns is refused before anything trains, as a file with rows.
  fs::create_directories(dir.file("runs/other"));
  test::write_file(dir.file("runs/other/evolve.csv"), header.substr(0, header.rfind(",foo")) + "\n");
  TrainOptions other = o;
  other.name = "other";
  const std::string refused = test::error_message([&] { evolve(other, 1); });
  EXPECT_NE(refused.find("other hyperparameters"), std::string::npos) << refused;
  EXPECT_FALSE(fs::exists(dir.file("runs/other/generation")));
}

std::map<std::string, double> yaml_values(const std::string& path) {
  std::map<std::string, double> m;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto colon = line.find(':');
    m[line.substr(0, colon)] = std::stod(line.substr(colon + 1));
  }
  return m;
}

TEST(Evolve, ThreeGenerationsEndToEnd) {
  test::TempDir dir;
  TrainOptions o = test_evolve::tiny_evolve_options("configs/hyps/hyp.scratch-low.yaml", dir.file("runs/train"));
  testing::internal::CaptureStdout();
  const EvolveResult r = evolve(o, 3);
  const std::string console = testing::internal::GetCapturedStdout();
  EXPECT_EQ(r.generations, 3);
  // print_mutation's block after each generation (train.py's evolve: prefix), and train.py's closing lines.
  for (int g = 1; g <= 3; ++g)
    EXPECT_NE(console.find("evolve: " + std::to_string(g) + " generations finished, current result:\nevolve:    metrics/precision, "
                           "      metrics/recall,"), std::string::npos) << console;
  EXPECT_NE(console.find("                 lr0,                  lrf,"), std::string::npos) << console;
  EXPECT_NE(console.find("Hyperparameter evolution finished 3 generations\nResults saved to " + r.save_dir +
                         "\nUsage example: $ kestrel train --hyp " + r.save_dir + "/hyp_evolve.yaml\n"), std::string::npos)
      << console;
  // A --project given is kept (upstream renames only its default runs/train to runs/evolve).
  EXPECT_EQ(fs::path(r.save_dir).parent_path(), fs::path(dir.file("runs/train")));
  const auto rows = read_evolve_csv((fs::path(r.save_dir) / "evolve.csv").string());
  ASSERT_EQ(rows.size(), 3u);
  const HypValues start = load_hyperparameters(o.hyp).values;
  for (size_t k = 0; k < start.size(); ++k) {
    EXPECT_EQ(rows[0].hyp[k].first, start[k].first);
    EXPECT_NEAR(rows[0].hyp[k].second, start[k].second, 1e-9) << "generation 1 trains the given hyperparameters (in bounds)";
  }
  EXPECT_NE(rows[1].hyp, rows[0].hyp);
  for (const auto& row : rows) {
    ASSERT_EQ(row.results.size(), 7u);
    for (double v : row.results) EXPECT_TRUE(std::isfinite(v) && v >= 0);
    EXPECT_GT(row.results[4], 0) << "val box loss of a trained generation";
  }
  // hyp_evolve.yaml = the fittest row.
  size_t best = 0;
  for (size_t i = 1; i < rows.size(); ++i)
    if (fitness(rows[i].results[2], rows[i].results[3]) > fitness(rows[best].results[2], rows[best].results[3])) best = i;
  const auto evolved = yaml_values((fs::path(r.save_dir) / "hyp_evolve.yaml").string());
  {  // upstream's header: print_mutation's five comment lines, then a blank one
    std::ifstream in((fs::path(r.save_dir) / "hyp_evolve.yaml").string());
    std::vector<std::string> head(6);
    for (auto& line : head) std::getline(in, line);
    EXPECT_EQ(head[0], "# YOLOv5 Hyperparameter Evolution Results");
    EXPECT_EQ(head[1], "# Best generation: " + std::to_string(best));
    EXPECT_EQ(head[2], "# Last generation: 2");
    EXPECT_EQ(head[3].rfind("#    metrics/precision,       metrics/recall,", 0), 0u) << head[3];
    EXPECT_EQ(head[5], "");
  }
  for (const auto& [k, v] : rows[best].hyp) EXPECT_NEAR(evolved.at(k), v, 1e-4 * std::max(1.0, std::fabs(v))) << k;
  // As upstream (evolve implies --nosave and skips the final save): no generation writes weights.
  const fs::path generation = fs::path(r.save_dir) / "generation";
  EXPECT_TRUE(fs::exists(generation / "results.csv"));
  {  // upstream trains every generation in the evolution folder: its results.csv gathers all their epochs
    std::ifstream in((fs::path(r.save_dir) / "results.csv").string());
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    ASSERT_EQ(lines.size(), 1u + 3u) << "a header, then one epoch per generation";
    EXPECT_NE(lines[0].find("train/box_loss"), std::string::npos) << lines[0];
    for (size_t i = 1; i < lines.size(); ++i) EXPECT_EQ(lines[i].find("epoch"), std::string::npos) << lines[i];
  }
  EXPECT_FALSE(fs::exists(generation / "weights")) << "a generation wrote checkpoints";
  // Nor TensorBoard event files (upstream opens no TensorBoard logger under evolve): one per generation,
  // each from step 0, in one TensorBoard run.
  for (const auto& entry : fs::recursive_directory_iterator(r.save_dir))
    EXPECT_NE(entry.path().filename().string().rfind("events.out.tfevents.", 0), 0u) << entry.path();
  // evolve.png: hyp.scratch-low's 28 keys (lr0 ... copy_paste; `anchors` is not one) in rows of 5.
  ASSERT_EQ(rows[0].hyp.size(), 28u);
  const cv::Mat png = data::decode_image_file((fs::path(r.save_dir) / "evolve.png").string()).image;
  EXPECT_EQ(png.size(), cv::Size(eval::kEvolveWidth, 6 * eval::kEvolveRowHeight));
}

}  // namespace
}  // namespace kestrel::train
