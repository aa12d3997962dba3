// AutoAnchor: the fit statistics on boxes computed by hand, label sizes at the training size, the
// k-means + genetic search recovering known clusters, the head keeping anchors that already fit and
// taking better ones in stride order (grid units), and `kestrel train` running it (or not) with the
// searched anchors ending in the saved weights.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include <ATen/ATen.h>

#include "kestrel/core/error.h"
#include "kestrel/core/safetensors.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/data/image_files.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/weights_file.h"
#include "kestrel/models/yolo_model.h"
#include "kestrel/train/autoanchor.h"
#include "kestrel/train/trainer.h"
#include "test_support.h"

namespace kestrel::train {
namespace {

namespace fs = std::filesystem;

TEST(AutoAnchor, OptionsMatchUpstream) {
  const AutoAnchorOptions o;
  EXPECT_EQ(o.anchor_t, 4.0);
  EXPECT_EQ(o.min_bpr, 0.98);
  EXPECT_EQ(o.scale_jitter, 0.1);
  EXPECT_EQ(o.kmeans_restarts, 30);
  EXPECT_EQ(o.generations, 1000);
  EXPECT_EQ(o.mutation_prob, 0.9);
  EXPECT_EQ(o.mutation_sigma, 0.1);
  EXPECT_EQ(o.min_label_px, 2.0);
}

TEST(AutoAnchor, FitStatisticsByHand) {
  // anchor_t 4: a pair fits when min(w/aw, aw/w, h/ah, ah/h) > 0.25.
  const std::vector<BoxSize> anchors{{10, 10}, {20, 20}};
  const std::vector<BoxSize> sizes{
      {10, 10},  // a0: 1,   a1: 0.5        -> best 1,   2 fit
      {30, 10},  // a0: 1/3, a1: min(2/3, 0.5) = 0.5 -> best 0.5, 2 fit
      {40, 10},  // a0: 0.25 (not > 0.25), a1: 0.5   -> best 0.5, 1 fits
      {2, 10},   // a0: 0.2, a1: 0.1        -> best 0.2, none
  };
  const AnchorFit f = anchor_fit(sizes, anchors, 4.0);
  EXPECT_DOUBLE_EQ(f.bpr, 0.75);
  EXPECT_DOUBLE_EQ(f.anchors_per_target, 5.0 / 4);
  EXPECT_DOUBLE_EQ(f.fitness, (1 + 0.5 + 0.5 + 0) / 4);
  EXPECT_DOUBLE_EQ(f.mean_best, (1 + 0.5 + 0.5 + 0.2) / 4);
  // upstream's metric_all (every pair) and past_thr (the pairs above 0.25)
  EXPECT_DOUBLE_EQ(f.mean_metric, (1 + 0.5 + 1.0 / 3 + 0.5 + 0.25 + 0.5 + 0.2 + 0.1) / 8);
  EXPECT_DOUBLE_EQ(f.mean_past_thr, (1 + 0.5 + 1.0 / 3 + 0.5 + 0.5) / 5);
  EXPECT_TRUE(std::isnan(anchor_fit({{2, 10}}, anchors, 4.0).mean_past_thr));
  // A looser threshold lets the last two in: 0.25 > 1/5 and 0.2 is not > 1/5.
  EXPECT_DOUBLE_EQ(anchor_fit(sizes, anchors, 5.0).bpr, 0.75);
  EXPECT_DOUBLE_EQ(anchor_fit(sizes, anchors, 5.01).bpr, 1.0);
}

data::ImageRecord record(int w, int h, std::vector<std::array<float, 2>> box_wh) {
  data::ImageRecord r;
  r.width = w;
  r.height = h;
  for (const auto& b : box_wh) r.rows.push_back(data::LabelRow{{0.f, 0.5f, 0.5f, b[0], b[1]}, {}});
  return r;
}

// Python's '%i' % round(np.float32(x)): halves go to the even neighbour (std::round would give 3,4, 1,2).
TEST(AutoAnchor, AnchorsPrintRoundedHalfToEven) {
  EXPECT_EQ(anchors_text({{2.5, 3.5}, {0.5, 1.5}, {10.49, 10.51}}), "2,4, 0,2, 10,11");
  // 2.5000001 is 2.5 as a float32 (upstream rounds the float32 value): even too.
  EXPECT_EQ(anchors_text({{2.5000001, 116.5}}), "2,116");
}

TEST(AutoAnchor, LabelSizesAreInTrainingPixels) {
  // A 200 x 100 image at --img 640 is 640 x 320: a (0.5, 0.25) box is 320 x 80 pixels.
  const std::vector<data::ImageRecord> records{record(200, 100, {{0.5f, 0.25f}}), record(100, 400, {{0.5f, 0.5f}, {1.f, 0.1f}})};
  const auto sizes = label_sizes(records, 640, 0.0, 0);
  ASSERT_EQ(sizes.size(), 3u);
  EXPECT_NEAR(sizes[0][0], 320, 1e-4);
  EXPECT_NEAR(sizes[0][1], 80, 1e-4);
  EXPECT_NEAR(sizes[1][0], 80, 1e-4);   // 160 x 640 image
  EXPECT_NEAR(sizes[1][1], 320, 1e-4);
  EXPECT_NEAR(sizes[2][0], 160, 1e-4);
  EXPECT_NEAR(sizes[2][1], 64, 1e-4);
  // The random scale: one factor in [0.9, 1.1] per image, the same for a seed.
  const auto a = label_sizes(records, 640, 0.1, 3), b = label_sizes(records, 640, 0.1, 3);
  EXPECT_EQ(a, b);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double s = a[i][0] / sizes[i][0];
    EXPECT_GE(s, 0.9);
    EXPECT_LE(s, 1.1);
    EXPECT_NEAR(a[i][1] / sizes[i][1], s, 1e-6);
  }
  EXPECT_NEAR(a[1][0] / sizes[1][0], a[2][0] / sizes[2][0], 1e-6);  // same image, same factor
}

// Label sizes around known centres, each side times exp(N(0, 0.05)).
std::vector<BoxSize> clustered(const std::vector<BoxSize>& centres, int per_cluster, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0, 0.05);
  std::vector<BoxSize> out;
  for (int i = 0; i < per_cluster; ++i)
    for (const auto& c : centres) out.push_back({c[0] * std::exp(noise(rng)), c[1] * std::exp(noise(rng))});
  return out;
}

TEST(AutoAnchor, SearchRecoversKnownClusters) {
  const std::vector<BoxSize> centres{{12, 20}, {40, 30}, {60, 110}, {150, 90}, {220, 300}, {500, 400}};  // by area
  const auto sizes = clustered(centres, 60, 11);
  AutoAnchorOptions o;
  bool random_start = true;
  const auto k = kmean_anchors(sizes, 6, 640, o, &random_start);
  ASSERT_EQ(k.size(), 6u);
  EXPECT_FALSE(random_start);
  for (size_t i = 0; i < k.size(); ++i) {
    EXPECT_NEAR(k[i][0] / centres[i][0], 1.0, 0.1) << i;
    EXPECT_NEAR(k[i][1] / centres[i][1], 1.0, 0.1) << i;
    if (i) {
      EXPECT_LE(k[i - 1][0] * k[i - 1][1], k[i][0] * k[i][1]);  // sorted by area
    }
  }
  // The genetic search only ever keeps improvements over the k-means anchors.
  AutoAnchorOptions no_search = o;
  no_search.generations = 0;
  const auto k0 = kmean_anchors(sizes, 6, 640, no_search);
  EXPECT_GE(anchor_fit(sizes, k, 4.0).fitness, anchor_fit(sizes, k0, 4.0).fitness);
  EXPECT_DOUBLE_EQ(anchor_fit(sizes, k, 4.0).bpr, 1.0);
  EXPECT_EQ(kmean_anchors(sizes, 6, 640, o), k);  // deterministic for a seed
}

TEST(AutoAnchor, SameAnchorsWhateverTheThreadCount) {
  // More labels than one 8192-label chunk: the partial sums must add up the same on 1 or 3 threads.
  const auto sizes = clustered({{12, 20}, {40, 30}, {60, 110}, {150, 90}}, 5000, 4);
  AutoAnchorOptions o;
  o.generations = 100;
  o.kmeans_restarts = 3;
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = kmean_anchors(sizes, 4, 640, o);
  at::set_num_threads(3);
  const auto three = kmean_anchors(sizes, 4, 640, o);
  at::set_num_threads(threads);
  EXPECT_EQ(one, three);
}

// One k-means run against scipy.cluster.vq._kmeans (scipy 1.17) from the same start: the mean distance goes
// 0.7657, 0.8588 (up: a Lloyd step lowers squared distances, not distances), 0.7071, 0.3924, 0.3924. A rule
// that stopped when the distance stopped falling would end at the second step with centres (4.5, 3.5), (3, 2).
TEST(AutoAnchor, KmeansRunStopsOnTheAbsoluteChangeAsScipy) {
  const std::vector<BoxSize> points{{2, 1}, {4, 3}, {5, 3}, {4, 4}, {0, 6}};
  std::vector<BoxSize> centres{{5, 3}, {4, 3}, {0, 6}};
  const double distance = refine_kmeans(points, centres);
  EXPECT_NEAR(distance, 0.39242330115817825, 1e-12);  // (sqrt(2) + 2 sqrt(5)) / 15 at the final centres
  ASSERT_EQ(centres.size(), 3u);
  EXPECT_NEAR(centres[0][0], 13.0 / 3, 1e-12);  // (4,3), (5,3), (4,4)
  EXPECT_NEAR(centres[0][1], 10.0 / 3, 1e-12);
  EXPECT_EQ(centres[1], (BoxSize{2, 1}));
  EXPECT_EQ(centres[2], (BoxSize{0, 6}));
}

// scipy keeps only centres with members: a start on two equal points loses one (ties go to the first).
TEST(AutoAnchor, KmeansDropsACentreLeftWithoutPoints) {
  const std::vector<BoxSize> points{{0, 0}, {1, 0}, {10, 0}, {11, 0}};
  std::vector<BoxSize> centres{{0, 0}, {0, 0}, {10, 0}};
  EXPECT_DOUBLE_EQ(refine_kmeans(points, centres), 0.5);  // distances 0, 1, 0, 1, then 0.5 each
  ASSERT_EQ(centres.size(), 2u);
  EXPECT_EQ(centres[0], (BoxSize{0.5, 0}));
  EXPECT_EQ(centres[1], (BoxSize{10.5, 0}));
}

// Three distinct sizes for three anchors, but one of them on 1000 labels: nearly every k-means start takes two
// equal sizes and ends with fewer clusters. YOLOv5 then starts from random anchors; YOLOv7's assert fails and
// its check_anchors keeps the model's anchors (an empty result here).
TEST(AutoAnchor, KmeansThatLosesClustersFallsBackAsUpstream) {
  std::vector<BoxSize> sizes(1000, BoxSize{50, 80});
  sizes.push_back({10, 12});
  sizes.push_back({300, 200});
  AutoAnchorOptions o;
  o.generations = 0;
  bool random_start = false;
  const auto v5 = kmean_anchors(sizes, 3, 640, o, &random_start);
  ASSERT_EQ(v5.size(), 3u);
  EXPECT_TRUE(random_start);
  EXPECT_EQ(std::set<BoxSize>(v5.begin(), v5.end()).size(), 3u);  // no duplicated k-means centre
  o.yolov7 = true;
  EXPECT_TRUE(kmean_anchors(sizes, 3, 640, o).empty());
}

TEST(AutoAnchor, GeneticSearchImprovesPoorAnchors) {
  // Fewer distinct sizes than anchors: upstream's random start, which the search must then improve.
  const std::vector<BoxSize> sizes(50, BoxSize{30, 30});
  AutoAnchorOptions o;
  o.generations = 0;
  const double start = anchor_fit(sizes, kmean_anchors(sizes, 3, 640, o), 4.0).fitness;
  o.generations = 1000;
  const auto k = kmean_anchors(sizes, 3, 640, o);
  const double searched = anchor_fit(sizes, k, 4.0).fitness;
  EXPECT_GT(searched, start);
  EXPECT_GT(searched, 0.9);  // one anchor near 30 x 30
}

TEST(AutoAnchor, TinyLabelsAreLeftOutOfTheSearch) {
  auto sizes = clustered({{40, 40}}, 100, 5);
  for (int i = 0; i < 300; ++i) sizes.push_back({1, 1.5});  // < 2 px on both sides: ignored
  const auto k = kmean_anchors(sizes, 1, 640, AutoAnchorOptions{});
  EXPECT_NEAR(k[0][0], 40, 4);
  EXPECT_NEAR(k[0][1], 40, 4);
}

models::Detect p3_p5_head() {
  models::Detect head(80, {{10, 13, 16, 30, 33, 23}, {30, 61, 62, 45, 59, 119}, {116, 90, 156, 198, 373, 326}},
                      {16, 32, 64}, false);
  head.initialize({8, 16, 32});
  return head;
}

TEST(AutoAnchor, AnchorsThatFitAreKept) {
  models::Detect head = p3_p5_head();
  const at::Tensor before = head.anchors().clone();
  // Labels exactly the anchors' sizes on 640 x 640 images: every one fits, BPR 1.
  std::vector<data::ImageRecord> records;
  const double px[9][2] = {{10, 13}, {16, 30}, {33, 23}, {30, 61}, {62, 45}, {59, 119}, {116, 90}, {156, 198}, {373, 326}};
  for (const auto& a : px)
    records.push_back(record(640, 640, {{static_cast<float>(a[0] / 640), static_cast<float>(a[1] / 640)}}));
  const AutoAnchorResult r = check_anchors(head, records, 640, AutoAnchorOptions{});
  EXPECT_DOUBLE_EQ(r.before.bpr, 1.0);
  EXPECT_FALSE(r.searched);
  EXPECT_FALSE(r.replaced);
  EXPECT_TRUE(at::equal(head.anchors(), before));
  EXPECT_NE(r.report.find("anchors/target, 1.000 Best Possible Recall (BPR)"), std::string::npos) << r.report;
}

// BPR exactly 0.98 (49 of 50 labels fit, no jitter): YOLOv5 searches (keeps only above 0.98), YOLOv7
// searches only below it (utils/autoanchor.py `if bpr < 0.98`).
TEST(AutoAnchor, BprOfExactlyTheThresholdSearchesForYolov5Only) {
  std::vector<data::ImageRecord> records;
  for (int i = 0; i < 49; ++i) records.push_back(record(640, 640, {{16.0f / 640, 30.0f / 640}}));  // an anchor's size
  records.push_back(record(640, 640, {{600.0f / 640, 4.0f / 640}}));  // aspect 150: no anchor within 4x
  AutoAnchorOptions o;
  o.scale_jitter = 0;
  o.generations = 10;
  models::Detect v5_head = p3_p5_head();
  const AutoAnchorResult v5 = check_anchors(v5_head, records, 640, o);
  EXPECT_DOUBLE_EQ(v5.before.bpr, 0.98);
  EXPECT_TRUE(v5.searched);
  o.yolov7 = true;
  models::Detect v7_head = p3_p5_head();
  const AutoAnchorResult v7 = check_anchors(v7_head, records, 640, o);
  EXPECT_DOUBLE_EQ(v7.before.bpr, 0.98);
  EXPECT_FALSE(v7.searched);
}

// Where k-means cannot run, the dialects part: 4 labels for 9 anchors. YOLOv5 falls back to random anchors
// refined by the search (utils/autoanchor.py's except branch); YOLOv7's kmean_anchors has no fallback, its
// check_anchors catches scipy's error and keeps the anchors. Labels all under 2 px (nothing to fit) end
// the check without an error in either (YOLOv5's check_anchors is @TryExcept; training goes on).
TEST(AutoAnchor, WhereKmeansCannotRunYolov7KeepsTheAnchors) {
  std::vector<data::ImageRecord> records;
  // Thin: no anchor fits. The fifth, 1 px, is not searched (labels under 2 px are left out) nor counted.
  for (const auto& wh : {std::array<float, 2>{6, 200}, {320, 16}, {600, 40}, {8, 300}, {1, 1}})
    records.push_back(record(640, 640, {{wh[0] / 640, wh[1] / 640}}));
  AutoAnchorOptions o;
  o.generations = 50;
  for (const bool yolov7 : {false, true}) {
    o.yolov7 = yolov7;
    models::Detect head = p3_p5_head();
    const at::Tensor before = head.anchors().clone();
    const AutoAnchorResult r = check_anchors(head, records, 640, o);
    ASSERT_TRUE(r.searched) << r.report;  // BPR 0: a search is due
    if (yolov7) {
      EXPECT_NE(r.report.find("k-means cannot place 9 anchors among 4 labels"), std::string::npos) << r.report;
      EXPECT_TRUE(at::equal(head.anchors(), before));
    } else {
      EXPECT_NE(r.report.find("WARNING k-means cannot place 9 anchors among 4 labels of at least 2 px, switching strategies"),
                std::string::npos) << r.report;
      EXPECT_NE(r.report.find("AutoAnchor: Running kmeans for 9 anchors on 4 points...\n"), std::string::npos) << r.report;
      EXPECT_NE(r.report.find("AutoAnchor: thr=0.25: "), std::string::npos) << r.report;
      EXPECT_NE(r.report.find("AutoAnchor: n=9, img_size=640, metric_all="), std::string::npos) << r.report;
    }
  }
  std::vector<data::ImageRecord> tiny;
  for (int i = 0; i < 20; ++i) tiny.push_back(record(4000, 3000, {{18.0f / 4000, 19.0f / 3000}}));  // 1.4 px at 320
  for (const bool yolov7 : {false, true}) {
    o.yolov7 = yolov7;
    models::Detect head = p3_p5_head();
    AutoAnchorResult r;
    EXPECT_NO_THROW(r = check_anchors(head, tiny, 320, o)) << yolov7;
    EXPECT_TRUE(r.searched);
    EXPECT_NE(r.report.find("Extremely small objects found: 20 of 20 labels are <3 pixels in size"), std::string::npos) << r.report;
  }
}

TEST(AutoAnchor, PoorAnchorsAreReplacedInStrideOrder) {
  models::Detect head = p3_p5_head();
  // Three thin box shapes no default anchor matches within a factor 4 (pixels at 640): BPR 0 before.
  const std::vector<BoxSize> shapes{{6, 200}, {320, 16}, {600, 40}};  // areas 1200 < 5120 < 24000
  std::vector<data::ImageRecord> records;
  std::mt19937_64 rng(2);
  std::normal_distribution<double> noise(0, 0.03);
  for (int i = 0; i < 60; ++i)
    for (const auto& c : shapes)
      records.push_back(record(1280, 1280, {{static_cast<float>(c[0] / 640 * std::exp(noise(rng))),
                                             static_cast<float>(c[1] / 640 * std::exp(noise(rng)))}}));
  const AutoAnchorResult r = check_anchors(head, records, 640, AutoAnchorOptions{});
  EXPECT_LT(r.before.bpr, 0.98);
  EXPECT_TRUE(r.searched);
  ASSERT_TRUE(r.replaced);
  EXPECT_GT(r.after.bpr, r.before.bpr);
  EXPECT_DOUBLE_EQ(r.after.bpr, 1.0);
  // Stored in grid units: anchors x stride = the reported pixels, non-decreasing areas across levels.
  const at::Tensor px = head.anchors() * at::tensor(std::vector<double>{8, 16, 32}, at::kFloat).view({3, 1, 1});
  ASSERT_EQ(r.anchors.size(), 9u);
  double previous_area = 0;
  for (int l = 0; l < 3; ++l)
    for (int a = 0; a < 3; ++a) {
      const auto& e = r.anchors[l * 3 + a];
      EXPECT_NEAR(px[l][a][0].item<double>(), e[0], 1e-3);
      EXPECT_NEAR(px[l][a][1].item<double>(), e[1], 1e-3);
      EXPECT_GE(e[0] * e[1], previous_area);
      previous_area = e[0] * e[1];
    }
  // Every shape has an anchor within 25 % of it (the search ends near the clusters).
  for (const auto& c : shapes) {
    bool near = false;
    for (const auto& e : r.anchors) near = near || (std::abs(e[0] / c[0] - 1) < 0.25 && std::abs(e[1] / c[1] - 1) < 0.25);
    EXPECT_TRUE(near) << c[0] << " x " << c[1] << "\n" << r.report;
  }
  EXPECT_NE(r.report.find("Anchors are a poor fit"), std::string::npos) << r.report;

  // Same labels and seed: the same anchors.
  models::Detect again = p3_p5_head();
  check_anchors(again, records, 640, AutoAnchorOptions{});
  EXPECT_TRUE(at::equal(again.anchors(), head.anchors()));
}

TEST(AutoAnchor, SetAnchorsFollowsStrideOrder) {
  // check_anchor_order: anchors given largest-first for strides 8, 16, 32 are flipped by level.
  models::Detect head = p3_p5_head();
  const at::Tensor big_first = at::tensor(std::vector<float>{300, 300, 310, 310, 320, 320, 100, 100, 110, 110, 120, 120,
                                                             10, 10, 11, 11, 12, 12}).view({3, 3, 2});
  head.set_anchors(big_first);
  EXPECT_TRUE(at::allclose(head.anchor_pixels(), big_first.flip(0)));
  EXPECT_NEAR(head.anchors()[0][0][0].item<double>(), 10.0 / 8, 1e-6);
  EXPECT_NEAR(head.anchors()[2][2][1].item<double>(), 320.0 / 32, 1e-6);
  EXPECT_THROW(head.set_anchors(at::ones({2, 3, 2})), Error);
}

TEST(AutoAnchor, IDetectAnchorGridFollows) {
  models::Detect head(80, {{12, 16, 19, 36, 40, 28}, {36, 75, 76, 55, 72, 146}, {142, 110, 192, 243, 459, 401}},
                      {16, 32, 64}, true);
  head.initialize({8, 16, 32});
  const at::Tensor px = at::arange(1, 19, at::kFloat).view({3, 3, 2}) * 10;
  head.set_anchors(px);
  at::Tensor grid;
  for (const auto& b : head.named_buffers())
    if (b.key() == "anchor_grid") grid = b.value();
  ASSERT_TRUE(grid.defined());
  EXPECT_TRUE(at::allclose(grid.view({3, 3, 2}), px));
}

// `kestrel train` end to end: a model whose anchors cannot fit the demo boxes gets searched anchors,
// and they are in the saved weights; --noautoanchor leaves them alone.
std::string tiny_run_dataset(const test::TempDir& dir) {
  test::demo_subset(dir, 4);  // dir/tiny.yaml
  // yolov5n with absurd anchors (2000 px at --img 128): no box can match them.
  std::ifstream in("configs/models/yolov5n.yaml");
  std::string line, yaml;
  while (std::getline(in, line)) {
    if (line.find("# P3/8") != std::string::npos || line.find("# P4/16") != std::string::npos ||
        line.find("# P5/32") != std::string::npos)
      line = "  - [2000,2000, 2100,2100, 2200,2200]";
    yaml += line + "\n";
  }
  test::write_file(dir.file("yolov5n-bad.yaml"), yaml);
  return dir.file("tiny.yaml");
}

// A quiet CPU run of yolov5n-bad on the tiny dataset, validating only at the end.
TrainOptions bad_anchor_run(const test::TempDir& dir) {
  TrainOptions o;
  o.cfg = dir.file("yolov5n-bad.yaml");
  o.data = tiny_run_dataset(dir);
  o.project = dir.file("runs");
  o.device = "cpu";
  o.workers = 1;
  o.quiet = true;
  o.noval = true;
  return o;
}

TEST(AutoAnchor, TrainerSearchesAndSavesAnchors) {
  test::TempDir dir;
  TrainOptions o = bad_anchor_run(dir);
  o.img_size = 128;
  o.batch_size = 4;
  o.epochs = 1;
  o.name = "auto";
  const TrainResult searched = train(o);
  const at::Tensor config_px = at::tensor(std::vector<float>{2000, 2000, 2100, 2100, 2200, 2200}).view({1, 3, 2}).expand({3, 3, 2});
  const models::LoadedModel a = models::load_model_weights(searched.last);
  const at::Tensor saved = a.model->head().anchor_pixels();
  // Boxes are at most 128 px at --img 128: the search never goes beyond 4x that (no label would match).
  EXPECT_LT(saved.max().item<double>(), 4 * 128.0) << saved;
  // The same anchors as check_anchors on a fresh model with the run's labels and seed, rounded to float16
  // as train.py's model.half().float() rounds them before training (the strides are powers of 2, so the
  // pixel values round alike; the EMA averages equal values, within float rounding).
  auto model = models::build_model(models::load_model_config(o.cfg), 80);
  auto cfg = data::load_dataset_config(o.data);
  const auto index = data::index_split(data::list_images(cfg.train, cfg.source), data::IndexOptions{80, 1, false});
  AutoAnchorOptions aa;
  aa.seed = o.seed;
  ASSERT_TRUE(check_anchors(model->head(), index.records, o.img_size, aa).replaced);
  const at::Tensor expected = model->head().anchor_pixels().to(at::kHalf).to(at::kFloat);
  EXPECT_TRUE(at::allclose(expected, saved, 1e-6, 1e-5)) << expected << saved;
  o.name = "none";
  o.noautoanchor = true;
  const TrainResult kept = train(o);
  const models::LoadedModel b = models::load_model_weights(kept.last);
  EXPECT_TRUE(at::allclose(b.model->head().anchor_pixels(), config_px));
}

TEST(AutoAnchor, ResumedRunKeepsTheSearchedAnchorsInModelAndLoss) {
  // The resume does not search again: it loads the saved anchors, and the losses (built after the
  // resume) use them; so an interrupted + resumed run ends with the uninterrupted run's exact state.
  test::TempDir dir;
  TrainOptions o = bad_anchor_run(dir);
  o.img_size = 64;
  o.batch_size = 2;
  o.epochs = 2;
  o.name = "whole";
  const TrainResult whole = train(o);
  o.name = "split";
  o.interrupt_after = 1;
  const TrainResult first = train(o);
  ASSERT_TRUE(first.interrupted);
  TrainOptions resume;
  resume.resume = first.save_dir;
  resume.quiet = true;
  const TrainResult second = train(resume);
  ASSERT_FALSE(second.interrupted);
  const auto a = load_safetensors((fs::path(whole.save_dir) / "weights" / "last.state.safetensors").string());
  const auto b = load_safetensors((fs::path(second.save_dir) / "weights" / "last.state.safetensors").string());
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  bool saw_anchors = false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    ASSERT_EQ(a.tensors[i].first, b.tensors[i].first);
    EXPECT_TRUE(at::equal(a.tensors[i].second, b.tensors[i].second)) << a.tensors[i].first;
    if (a.tensors[i].first == "model/model.24.anchors") {
      saw_anchors = true;
      // Grid units: searched anchors stay below 4 x 64 px / stride 8 = 32; the config's are 2000 px / 32 = 62.5 and up.
      EXPECT_LT(a.tensors[i].second.max().item<double>(), 32.5);
    }
  }
  EXPECT_TRUE(saw_anchors);
}

TEST(AutoAnchor, NoautoanchorFlagOnTheCommandLine) {
  test::TempDir dir;
  const std::string data = tiny_run_dataset(dir);
  const std::string base = test::kestrel_binary() + " train --cfg " + dir.file("yolov5n-bad.yaml") + " --data " + data +
                           " --epochs 1 --img 64 --batch-size 4 --workers 1 --device cpu --noval --quiet --project " +
                           dir.file("runs");
  auto r = test::run_command(base + " --name with");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Best Possible Recall (BPR)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Anchors are a poor fit"), std::string::npos) << r.output;
  r = test::run_command(base + " --name without --noautoanchor");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("AutoAnchor"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kestrel::train
