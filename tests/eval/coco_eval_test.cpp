// kestrel's COCOeval against pycocotools itself (the project's Python) on the same two JSON files, for
// the demo split with several generated detection sets and for hand-made files with crowds and all
// three area ranges; plus values derived by hand and the errors for bad files.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "kestrel/core/error.h"
#include "kestrel/eval/coco_eval.h"
#include "kestrel/eval/yolo_to_coco.h"
#include "test_support.h"

namespace kestrel::eval {
namespace {

using nlohmann::json;
using test::TempDir;
using Stats = std::array<double, 12>;

void write_json(const std::string& path, const json& value) { test::write_file(path, value.dump()); }

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// COCOeval.stats from pycocotools. loadRes() cannot take an empty list (it reads anns[0]), so an empty
// result file becomes a result COCO object with no annotations, which is what loadRes would build.
// img_ids: COCOeval.params.imgIds (val.py sets the split's on COCO); empty: every image.
Stats pycocotools_stats(const std::string& annotations, const std::string& results, const std::vector<int64_t>& img_ids = {}) {
  std::string ids;
  for (int64_t id : img_ids) ids += std::to_string(id) + ",";
  const std::string script = "IMG_IDS = [" + ids + "]\n" + R"PY(
import contextlib, io, json
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
ann_file, res_file = ")PY" + annotations + R"PY(", ")PY" + results + R"PY("
with contextlib.redirect_stdout(io.StringIO()):
    gt = COCO(ann_file)
    with open(res_file) as f:
        res = json.load(f)
    if res:
        dt = gt.loadRes(res_file)
    else:
        dt = COCO()
        dt.dataset = {'images': gt.dataset['images'], 'categories': gt.dataset['categories'], 'annotations': []}
        dt.createIndex()
    E = COCOeval(gt, dt, 'bbox')
    if IMG_IDS: E.params.imgIds = IMG_IDS
    E.evaluate(); E.accumulate(); E.summarize()
print('STATS ' + json.dumps([float(s) for s in E.stats]))
)PY";
  const test::CommandResult r = test::run_python(script);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find("STATS ");
  if (at == std::string::npos) {
    ADD_FAILURE() << "no stats from pycocotools:\n" << r.output;
    return {};
  }
  const json values = json::parse(r.output.substr(at + 6, r.output.find('\n', at) - at - 6));
  Stats out{};
  for (int i = 0; i < 12; ++i) out[i] = values[i].get<double>();
  return out;
}

void expect_matches_pycocotools(const std::string& annotations, const std::string& results) {
  const Stats expected = pycocotools_stats(annotations, results);
  const CocoSummary got = evaluate_coco(annotations, results);
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(got.stats[i], expected[i], 1e-4) << "stat " << i << " of " << results;
}

std::vector<std::string> demo_names() {
  const YAML::Node names = YAML::LoadFile("data/demo/demo.yaml")["names"];
  std::vector<std::string> out(names.size());
  for (const auto& entry : names) out.at(entry.first.as<size_t>()) = entry.second.as<std::string>();
  return out;
}

// Portable uniform [0, 1): std::mt19937 is specified bit for bit, std::uniform_real_distribution is not.
double uniform(std::mt19937& rng) { return static_cast<double>(rng() >> 8) * (1.0 / 16777216.0); }

json detection(const json& image_id, int64_t category, double x, double y, double w, double h, double score) {
  return {{"image_id", image_id}, {"category_id", category}, {"bbox", {x, y, w, h}}, {"score", score}};
}

// Jittered boxes, quantised scores (many ties, so the stable ranking matters), wrong classes, missed
// gts, duplicates of matched gts, random false positives, and one image-category with 140 detections
// (past maxDets 100).
json perturbed_detections(const json& coco, uint32_t seed) {
  std::mt19937 rng(seed);
  json out = json::array();
  for (const auto& gt : coco["annotations"]) {
    if (uniform(rng) < 0.15) continue;
    const double w = gt["bbox"][2].get<double>(), h = gt["bbox"][3].get<double>();
    const double x = gt["bbox"][0].get<double>() + (uniform(rng) - 0.5) * 0.3 * w;
    const double y = gt["bbox"][1].get<double>() + (uniform(rng) - 0.5) * 0.3 * h;
    const double nw = w * (1 + (uniform(rng) - 0.5) * 0.4), nh = h * (1 + (uniform(rng) - 0.5) * 0.4);
    int64_t category = gt["category_id"].get<int64_t>();
    if (uniform(rng) < 0.1) category = static_cast<int64_t>(uniform(rng) * 80);
    out.push_back(detection(gt["image_id"], category, x, y, nw, nh, std::round(uniform(rng) * 20) / 20));
    if (uniform(rng) < 0.15) out.push_back(detection(gt["image_id"], category, x + 1, y, nw, nh, uniform(rng) * 0.5));
  }
  for (const auto& image : coco["images"]) {
    const double W = image["width"].get<double>(), H = image["height"].get<double>();
    for (int i = static_cast<int>(uniform(rng) * 5); i > 0; --i) {
      const double w = 4 + uniform(rng) * W / 2, h = 4 + uniform(rng) * H / 2;
      out.push_back(detection(image["id"], static_cast<int64_t>(uniform(rng) * 80), uniform(rng) * (W - w),
                              uniform(rng) * (H - h), w, h, std::round(uniform(rng) * 20) / 20));
    }
  }
  const json& first = coco["annotations"][0];
  for (int i = 0; i < 140; ++i) {
    const double jitter = (uniform(rng) - 0.5) * 20;
    out.push_back(detection(first["image_id"], first["category_id"], first["bbox"][0].get<double>() + jitter,
                            first["bbox"][1], first["bbox"][2], first["bbox"][3], std::round(uniform(rng) * 10) / 10));
  }
  return out;
}

class CocoEvalDemo : public ::testing::Test {
 protected:
  void SetUp() override {
    write_yolo_as_coco("data/demo/images/val", demo_names(), dir_.file("val.json"));
    coco_ = read_json(dir_.file("val.json"));
  }
  std::string annotations() const { return dir_.file("val.json"); }
  std::string results(const std::string& name, const json& detections) const {
    write_json(dir_.file(name), detections);
    return dir_.file(name);
  }
  TempDir dir_;
  json coco_;
};

TEST_F(CocoEvalDemo, PerfectDetectionsScoreOne) {
  json dets = json::array();
  std::map<int64_t, int64_t> gts_of;                      // category -> gts
  std::map<int64_t, std::map<int64_t, int64_t>> cells;    // category -> image -> gts
  for (const auto& gt : coco_["annotations"]) {
    dets.push_back(detection(gt["image_id"], gt["category_id"], gt["bbox"][0], gt["bbox"][1], gt["bbox"][2],
                             gt["bbox"][3], 1.0));
    const int64_t category = gt["category_id"].get<int64_t>();
    ++gts_of[category];
    ++cells[category][gt["image_id"].get<int64_t>()];
  }
  const std::string res = results("perfect.json", dets);
  const CocoSummary s = evaluate_coco(annotations(), res);
  // By hand: every detection is its own gt (IoU 1), all scores equal, so precision is 1 at every recall
  // and all gts are found within 100 detections. With one detection per image and category (AR@1) a
  // category recalls (#images that have it) / (#gts); with 10, sum of min(n, 10) / #gts.
  double ar1 = 0, ar10 = 0;
  for (const auto& [category, per_image] : cells) {
    double one = 0, ten = 0;
    for (const auto& [image, n] : per_image) one += 1, ten += std::min<int64_t>(n, 10);
    ar1 += one / static_cast<double>(gts_of[category]);
    ar10 += ten / static_cast<double>(gts_of[category]);
  }
  ar1 /= static_cast<double>(cells.size());
  ar10 /= static_cast<double>(cells.size());
  EXPECT_NEAR(s.stats[CocoSummary::kAP], 1.0, 1e-12);
  EXPECT_NEAR(s.stats[CocoSummary::kAP50], 1.0, 1e-12);
  EXPECT_NEAR(s.stats[CocoSummary::kAP75], 1.0, 1e-12);
  EXPECT_NEAR(s.stats[CocoSummary::kAR1], ar1, 1e-12);
  EXPECT_NEAR(s.stats[CocoSummary::kAR10], ar10, 1e-12);
  EXPECT_NEAR(s.stats[CocoSummary::kAR100], 1.0, 1e-12);
  EXPECT_LT(ar1, 0.9);  // the demo has images with several objects of one class
  expect_matches_pycocotools(annotations(), res);
}

TEST_F(CocoEvalDemo, PerturbedDetectionsMatchPycocotools) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const json dets = perturbed_detections(coco_, seed);
    const std::string res = results("perturbed" + std::to_string(seed) + ".json", dets);
    expect_matches_pycocotools(annotations(), res);
    const CocoSummary s = evaluate_coco(annotations(), res);
    EXPECT_GT(s.stats[CocoSummary::kAP50], 0.2);  // a real, non-trivial score
    EXPECT_LT(s.stats[CocoSummary::kAP], 0.9);
  }
}

// val.py on COCO scores the split's images only (params.imgIds): gts and detections of the file's other
// images count for nothing, as in pycocotools.
TEST_F(CocoEvalDemo, ImageSubsetMatchesPycocotoolsImgIds) {
  const json dets = perturbed_detections(coco_, 4);
  const std::string res = results("subset.json", dets);
  std::vector<int64_t> subset;
  for (size_t i = 0; i < coco_["images"].size(); i += 3) subset.push_back(coco_["images"][i]["id"].get<int64_t>());
  ASSERT_GE(subset.size(), 3u);
  const Stats expected = pycocotools_stats(annotations(), res, subset);
  const CocoAnnotations ann = read_coco_annotations(annotations());
  const CocoSummary got = evaluate_coco(ann, read_coco_results(res, ann), subset);
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(got.stats[i], expected[i], 1e-4) << "stat " << i;
  const CocoSummary all = evaluate_coco(ann, read_coco_results(res, ann));
  EXPECT_NE(got.stats[CocoSummary::kAP], all.stats[CocoSummary::kAP]);  // the subset does change the score
}

TEST_F(CocoEvalDemo, EmptyResultsMatchPycocotools) {
  const std::string res = results("empty.json", json::array());
  const CocoSummary s = evaluate_coco(annotations(), res);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(s.stats[i], 0.0) << i;  // every area range has gts in the demo
  expect_matches_pycocotools(annotations(), res);
}

// Three images, four categories (one without gts), crowds, gts whose `area` field disagrees with the
// box, boxes in all three area ranges, detections on crowds, a result category that does not exist.
json hand_made_annotations() {
  auto gt = [](int64_t id, int64_t image, int64_t category, std::array<double, 4> b, double area, int crowd) {
    return json{{"id", id}, {"image_id", image}, {"category_id", category},
                {"bbox", {b[0], b[1], b[2], b[3]}}, {"area", area}, {"iscrowd", crowd}};
  };
  json anns = json::array({
      gt(1, 10, 1, {10, 10, 20, 20}, 400, 0),        // small
      gt(2, 10, 1, {50, 50, 50, 50}, 2500, 0),       // medium
      gt(3, 10, 1, {0, 100, 200, 100}, 20000, 1),    // crowd, large
      gt(4, 10, 2, {100, 10, 120, 90}, 10800, 0),    // large
      gt(5, 11, 1, {5, 5, 40, 40}, 900, 0),          // box is medium, area field says small
      gt(6, 11, 2, {60, 60, 30, 30}, 5000, 0),       // box is small, area field says medium
      gt(7, 11, 2, {0, 0, 300, 300}, 90000, 1),      // crowd covering everything
      gt(8, 12, 1, {20, 20, 100, 100}, 10000, 0),
      gt(9, 12, 1, {25, 25, 100, 100}, 10000, 0),    // heavy overlap with 8
      gt(10, 12, 3, {200, 200, 8, 8}, 64, 0),
  });
  json images = json::array({{{"id", 10}, {"width", 320}, {"height", 240}},
                             {{"id", 11}, {"width", 320}, {"height", 240}},
                             {{"id", 12}, {"width", 320}, {"height", 240}}});
  json categories = json::array({{{"id", 1}, {"name", "a"}}, {{"id", 2}, {"name", "b"}},
                                 {{"id", 3}, {"name", "c"}}, {{"id", 4}, {"name", "d"}}});
  return {{"images", images}, {"annotations", anns}, {"categories", categories}};
}

TEST(CocoEval, CrowdsAndAreasMatchPycocotools) {
  TempDir dir;
  write_json(dir.file("gt.json"), hand_made_annotations());
  const json fixed = json::array({
      detection(10, 1, 11, 11, 20, 20, 0.9),      // on gt 1
      detection(10, 1, 52, 50, 50, 48, 0.8),      // on gt 2
      detection(10, 1, 20, 120, 50, 50, 0.95),    // inside the crowd: ignored
      detection(10, 1, 30, 130, 40, 40, 0.85),    // inside the crowd again: ignored too
      detection(10, 2, 100, 10, 120, 90, 0.7),
      detection(10, 5, 100, 10, 120, 90, 0.99),   // category 5 does not exist: dropped
      detection(11, 1, 5, 5, 40, 40, 0.6),        // gt 5 (counted as small)
      detection(11, 2, 60, 60, 30, 30, 0.6),      // gt 6 (counted as medium) and the crowd
      detection(11, 2, 200, 200, 20, 20, 0.65),   // only the crowd
      detection(12, 1, 20, 20, 100, 100, 0.5),
      detection(12, 1, 22, 22, 100, 100, 0.55),   // between 8 and 9
      detection(12, 1, 25, 25, 100, 100, 0.5),    // tie in score with the first of image 12
      detection(12, 3, 150, 150, 8, 8, 0.3),      // misses gt 10
      detection(12, 4, 10, 10, 10, 10, 0.3),      // category without gts
  });
  write_json(dir.file("fixed.json"), fixed);
  expect_matches_pycocotools(dir.file("gt.json"), dir.file("fixed.json"));

  std::mt19937 rng(7);  // plus many random boxes around the gts, of all sizes
  json random = fixed;
  for (int i = 0; i < 300; ++i) {
    const double w = 2 + uniform(rng) * 150, h = 2 + uniform(rng) * 150;
    random.push_back(detection(10 + static_cast<int>(uniform(rng) * 3), 1 + static_cast<int>(uniform(rng) * 4),
                               uniform(rng) * 200, uniform(rng) * 150, w, h, std::round(uniform(rng) * 50) / 50));
  }
  write_json(dir.file("random.json"), random);
  expect_matches_pycocotools(dir.file("gt.json"), dir.file("random.json"));
}

TEST(CocoEval, CrowdAbsorbsDetectionsByHand) {
  // One gt and one crowd region. The highest-scoring detection lies inside the crowd: ignored rather
  // than a false positive, so the regular gt found second still gives precision 1 at recall 1: AP 1.
  // Counted as a false positive it would give precision 1/2 at recall 1: AP 0.5.
  CocoAnnotations ann;
  ann.source = "hand";
  ann.image_ids = {1};
  ann.category_ids = {1};
  ann.objects = {{1, 1, 1, {0, 0, 50, 50}, 2500, false}, {2, 1, 1, {100, 0, 100, 100}, 10000, true}};
  const std::vector<CocoDetection> dets = {{1, 1, {120, 20, 30, 30}, 0.9}, {1, 1, {0, 0, 50, 50}, 0.8}};
  const CocoSummary s = evaluate_coco(ann, dets);
  EXPECT_NEAR(s.stats[CocoSummary::kAP], 1.0, 1e-12);
  EXPECT_NEAR(s.stats[CocoSummary::kAR100], 1.0, 1e-12);
  EXPECT_EQ(s.stats[CocoSummary::kAPSmall], -1.0);  // no gt of area <= 32^2
  EXPECT_NEAR(s.stats[CocoSummary::kAPMedium], 1.0, 1e-12);
  EXPECT_EQ(s.stats[CocoSummary::kAPLarge], -1.0);  // the only large gt is a crowd
  ann.objects[1].crowd = false;                     // now a regular gt, and the detection inside it
  const CocoSummary t = evaluate_coco(ann, dets);   // misses it (IoU 0.09): a false positive ranked first
  // Recall 1/2 at the first rank with precision 0, then 1/2 with precision 1/2 -> envelope 1/2 up to
  // recall 0.5 (51 of 101 thresholds), 0 beyond: AP = 0.5 * 51 / 101.
  EXPECT_NEAR(t.stats[CocoSummary::kAP], 0.5 * 51 / 101, 1e-12);
}

std::string error_of(const std::string& annotations, const std::string& results) {
  try {
    evaluate_coco(annotations, results);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CocoEval, BadFilesNameTheFile) {
  TempDir dir;
  const std::string gt = dir.file("gt.json"), res = dir.file("res.json");
  write_json(gt, hand_made_annotations());
  write_json(res, json::array({detection(10, 1, 0, 0, 5, 5, 0.5)}));
  EXPECT_EQ(error_of(gt, res), "(no error)");

  const std::string missing = dir.file("missing.json");
  EXPECT_NE(error_of(missing, res).find(missing), std::string::npos);
  EXPECT_NE(error_of(gt, missing).find(missing), std::string::npos);

  const std::string broken = dir.file("broken.json");
  test::write_file(broken, "{\"images\": [");
  EXPECT_NE(error_of(broken, res).find(broken + ": malformed JSON"), std::string::npos) << error_of(broken, res);

  json no_bbox = hand_made_annotations();
  no_bbox["annotations"][3].erase("bbox");
  write_json(dir.file("no_bbox.json"), no_bbox);
  const std::string e1 = error_of(dir.file("no_bbox.json"), res);
  EXPECT_NE(e1.find(dir.file("no_bbox.json") + ": annotations[3]: missing field \"bbox\""), std::string::npos) << e1;

  write_json(dir.file("no_score.json"), json::array({{{"image_id", 10}, {"category_id", 1}, {"bbox", {0, 0, 1, 1}}}}));
  const std::string e2 = error_of(gt, dir.file("no_score.json"));
  EXPECT_NE(e2.find(dir.file("no_score.json") + ": [0]: missing field \"score\""), std::string::npos) << e2;

  write_json(dir.file("stranger.json"),
             json::array({detection(10, 1, 0, 0, 5, 5, 0.5), detection(99, 1, 0, 0, 5, 5, 0.5)}));
  const std::string e3 = error_of(gt, dir.file("stranger.json"));
  EXPECT_NE(e3.find(dir.file("stranger.json") + ": [1]: image_id 99"), std::string::npos) << e3;

  json duplicate = hand_made_annotations();
  duplicate["annotations"][1]["id"] = 1;
  write_json(dir.file("duplicate.json"), duplicate);
  EXPECT_NE(error_of(dir.file("duplicate.json"), res).find("duplicate annotation id 1"), std::string::npos);

  write_json(dir.file("object.json"), json::object());
  EXPECT_NE(error_of(gt, dir.file("object.json")).find("list of detections"), std::string::npos);
}

// Fuzzing findings: a deeply nested value where a number belongs crashed the error message (dump()
// recursed once per level: stack overflow), a long one was copied whole into it, a number beyond double's
// range escaped as nlohmann's out_of_range, and an id above 2^63-1 wrapped to a negative id without a word.
TEST(CocoEval, OddValuesGiveShortMessagesAndNoWrap) {
  TempDir dir;
  const std::string res = dir.file("res.json");
  write_json(res, json::array());
  const std::string deep = dir.file("deep.json");
  test::write_file(deep, "{\"images\": [{\"id\": " + std::string(200000, '[') + std::string(200000, ']') +
                             "}], \"categories\": [], \"annotations\": []}");
  EXPECT_EQ(error_of(deep, res), deep + ": images[0]: field \"id\" must be a 64-bit integer, got a nested list");

  // a number beyond double's range made nlohmann throw out_of_range (not parse_error), which escaped unwrapped
  const std::string overflow = dir.file("overflow.json");
  test::write_file(overflow, "{\"images\": [{\"id\": 1}], \"categories\": [{\"id\": 1e999}], \"annotations\": []}");
  EXPECT_NE(error_of(overflow, res).find(overflow + ": malformed JSON ("), std::string::npos) << error_of(overflow, res);
  test::write_file(res, "[{\"image_id\": 1, \"category_id\": 1, \"bbox\": [0, 0, 1, 1], \"score\": -1e400}]");
  const std::string ok = dir.file("ok.json");
  test::write_file(ok, "{\"images\": [{\"id\": 1}], \"categories\": [{\"id\": 1}], \"annotations\": []}");
  EXPECT_NE(error_of(ok, res).find(res + ": malformed JSON ("), std::string::npos) << error_of(ok, res);
  write_json(res, json::array());

  json long_string = hand_made_annotations();
  long_string["annotations"][0]["area"] = std::string(100000, 'x');
  write_json(dir.file("long.json"), long_string);
  const std::string e1 = error_of(dir.file("long.json"), res);
  EXPECT_NE(e1.find(": annotations[0]: field \"area\" must be a number, got \"xxx"), std::string::npos) << e1;
  EXPECT_LT(e1.size(), dir.file("long.json").size() + 120) << e1;

  json huge_id = hand_made_annotations();
  huge_id["annotations"][0]["id"] = std::numeric_limits<uint64_t>::max();
  write_json(dir.file("huge_id.json"), huge_id);
  EXPECT_EQ(error_of(dir.file("huge_id.json"), res),
            dir.file("huge_id.json") + ": annotations[0]: field \"id\" must be a 64-bit integer, got 18446744073709551615");
}

TEST(CocoEval, SummaryPrintsLikePycocotools) {
  CocoSummary s;
  s.stats.fill(-1);
  s.stats[0] = 0.41234;
  const std::string text = format_coco_summary(s);
  EXPECT_EQ(text.substr(0, text.find('\n')),
            " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.412");
  EXPECT_NE(text.find(" Average Recall     (AR) @[ IoU=0.50:0.95 | area= large | maxDets=100 ] = -1.000"),
            std::string::npos);
}

// val --save-json's writer: JSON that nlohmann and the evaluator read back to the same numbers, bit for bit
// (the shortest text of a double reads back as that double), in the key order nlohmann's tree would write.
// Rounding as val.py's save_one_json (CPython's round(): exact value, ties to even). Hand cases printed by
// CPython 3.11, then boxes on a 1/16-pixel grid and scores on a 1/64 one (exact ties: 0.0625 rounds to
// 0.062, 0.015625 to 0.01562) and arbitrary float32 corners against
// upstream's own arithmetic (xyxy2xywh on a float32 tensor, centre minus half size, round) in the
// project's Python.
TEST(CocoEval, DetectionsRoundAsPython) {
  EXPECT_EQ(python_round(100.0625, 3), 100.062);
  EXPECT_EQ(python_round(100.1875, 3), 100.188);
  EXPECT_EQ(python_round(-3.0625, 3), -3.062);
  EXPECT_EQ(python_round(0.015625, 5), 0.01562);
  EXPECT_EQ(python_round(0.12345678, 5), 0.12346);
  EXPECT_EQ(python_round(2.675, 2), 2.67);  // 2.67499999999999982236431605997495353221893310546875
  EXPECT_EQ(python_round(0.0005, 3), 0.001);
  EXPECT_EQ(python_round(1e20, 3), 1e20);

  std::mt19937 rng(5);
  std::uniform_int_distribution<int> grid(0, 16 * 640), size_grid(0, 16 * 160), score_grid(0, 64);
  std::uniform_real_distribution<float> any(0, 640);
  std::vector<std::array<float, 5>> rows;
  for (int i = 0; i < 400; ++i) {
    const bool on_grid = i % 2 == 0;
    const auto corner = [&] { return on_grid ? grid(rng) / 16.0f : any(rng); };
    const auto size = [&] { return on_grid ? size_grid(rng) / 16.0f : any(rng) / 4; };
    const float x1 = corner(), y1 = corner(), score = on_grid ? score_grid(rng) / 64.0f : any(rng) / 640;
    rows.push_back({x1, y1, x1 + size(), y1 + size(), score});
  }
  std::string values;
  for (const auto& r : rows)
    for (float v : r) values += cat(std::setprecision(9), v, ",");
  const test::CommandResult py = test::run_python(
      "import torch\n"
      "v = torch.tensor([" + values + "], dtype=torch.float32).view(-1, 5)\n"
      "xy, wh = (v[:, :2] + v[:, 2:4]) / 2, v[:, 2:4] - v[:, :2]\n"
      "box = torch.cat([xy - wh / 2, wh], 1)\n"
      "for b, s in zip(box.tolist(), v[:, 4].tolist()):\n"
      "    print(*[repr(round(x, 3)) for x in b], repr(round(s, 5)))\n");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  std::istringstream expected(py.output);
  int ties = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const CocoDetection d = coco_detection(1, 1, r[0], r[1], r[2], r[3], r[4]);
    double x, y, w, h, score;
    ASSERT_TRUE(expected >> x >> y >> w >> h >> score) << py.output;
    EXPECT_EQ(d.box.x, x) << i;
    EXPECT_EQ(d.box.y, y) << i;
    EXPECT_EQ(d.box.w, w) << i;
    EXPECT_EQ(d.box.h, h) << i;
    EXPECT_EQ(d.score, score) << i;
    // Where rounding the product (the earlier code) disagrees with Python: the ties the grids produce.
    ties += std::round(static_cast<double>(r[2] - r[0]) * 1e3) / 1e3 != w;
    ties += std::round(static_cast<double>(r[4]) * 1e5) / 1e5 != score;
  }
  EXPECT_GT(ties, 20) << "the grids should produce ties that std::round(v * 1e3) / 1e3 gets wrong";
}

TEST(CocoEval, ResultsJsonReadsBackExactly) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<double> u(0, 700);
  std::vector<CocoDetection> dets;
  for (int i = 0; i < 200; ++i)
    dets.push_back({i % 7 + 1, i % 3 + 1, CocoBox{u(rng), std::round(u(rng) * 1e3) / 1e3, u(rng) / 7, 0.1 * i},
                    std::round(u(rng) / 700 * 1e5) / 1e5});
  dets.push_back({12, 90, CocoBox{0, 1e-7, 1e15, 3}, 1});
  const std::string text = coco_results_json(dets);
  EXPECT_EQ(text.substr(0, 15), "[{\"image_id\": 1");
  const nlohmann::json parsed = nlohmann::json::parse(text);
  ASSERT_EQ(parsed.size(), dets.size());
  for (size_t i = 0; i < dets.size(); ++i) {
    const auto& p = parsed[i];
    EXPECT_EQ(p["image_id"].get<int64_t>(), dets[i].image_id);
    EXPECT_EQ(p["category_id"].get<int64_t>(), dets[i].category_id);
    EXPECT_EQ(p["score"].get<double>(), dets[i].score) << i;
    EXPECT_EQ(p["bbox"][0].get<double>(), dets[i].box.x) << i;
    EXPECT_EQ(p["bbox"][1].get<double>(), dets[i].box.y) << i;
    EXPECT_EQ(p["bbox"][2].get<double>(), dets[i].box.w) << i;
    EXPECT_EQ(p["bbox"][3].get<double>(), dets[i].box.h) << i;
  }
  EXPECT_EQ(coco_results_json({}), "[]");
  EXPECT_THROW(coco_results_json({{1, 1, CocoBox{std::nan(""), 0, 1, 1}, 0.5}}), Error);
}

// The text is what val.py's json.dump(jdict, f) writes for the same values (Python's own json, the reference).
TEST(CocoEval, ResultsJsonIsJsonDumpsText) {
  const std::vector<CocoDetection> dets = {{42, 1, CocoBox{0, 86.66, 1e-05, 123.0}, 0.00017},
                                           {7, 90, CocoBox{1e16, 2.5, 0.1, 640}, 1.0},
                                           {3, 18, CocoBox{12.345, 0.001, 100.062, 0.3}, 0.87312}};
  std::string values = "[";
  for (const auto& d : dets) {
    char row[512];
    std::snprintf(row, sizeof row, "{'image_id': %lld, 'category_id': %lld, 'bbox': [float('%.17g'), float('%.17g'), float('%.17g'), float('%.17g')], 'score': float('%.17g')},",
                  static_cast<long long>(d.image_id), static_cast<long long>(d.category_id), d.box.x, d.box.y, d.box.w, d.box.h, d.score);
    values += row;
  }
  const test::CommandResult r = test::run_python("import json, sys\nsys.stdout.write(json.dumps(" + values + "]))\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(coco_results_json(dets), r.output);
}

}  // namespace
}  // namespace kestrel::eval
