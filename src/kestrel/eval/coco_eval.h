// COCO box mAP computed the way pycocotools' COCOeval (iouType "bbox") computes it, so that the numbers
// kestrel reports equal the ones papers and upstream YOLO repositories report, without Python.
//
// Settings are COCOeval's defaults: every image id of the annotation file, every category, IoU thresholds
// 0.50:0.05:0.95, 101 recall thresholds, maxDets 1/10/100, areas all/small/medium/large. Behaviour kept
// from pycocotools on purpose (tests/eval/coco_eval_test.cpp checks it against pycocotools itself):
//  - gt `area` (the file's field, e.g. the segmentation area) decides the area range; a detection's
//    area is bbox w*h. IoU uses the bbox of both. A crowd gt divides the intersection by the detection's
//    area, can absorb any number of detections, and is ignored (never a TP or an FN).
//  - detections are ranked by score with a stable sort, file order breaking ties; only the first 100 of
//    an image and category take part.
//  - a detection counts as matched when the matched gt's id is non-zero (pycocotools stores the id in a
//    zero-initialised array), so a gt with id 0 never produces a TP.
//  - result categories that are not in the annotation file are dropped silently, like loadRes does.
//  - a category with no non-ignored gt in an area range gets -1 and is left out of the means; a summary
//    number is -1 when every category is -1.
// Stricter than pycocotools: annotation ids must be unique (pycocotools silently merges duplicates),
// and a gt whose image id or category id is not listed is an error (pycocotools skips it).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kestrel::eval {

// One box in COCO's convention: top-left corner and size in pixels.
struct CocoBox {
  double x = 0, y = 0, w = 0, h = 0;
};

struct CocoGroundTruth {
  int64_t id = 0;
  int64_t image_id = 0;
  int64_t category_id = 0;
  CocoBox box;
  double area = 0;  // the file's `area` field, not necessarily w*h
  bool crowd = false;
};

struct CocoDetection {
  int64_t image_id = 0;
  int64_t category_id = 0;
  CocoBox box;
  double score = 0;
};

// A detection as val.py's save_one_json writes it: float32 corners x1 y1 x2 y2 in pixels to [x, y, w, h] with
// float32 arithmetic (xyxy2xywh, then the centre minus half the size), rounded as Python's round() to 3
// decimals, the score to 5.
CocoDetection coco_detection(int64_t image_id, int64_t category_id, float x1, float y1, float x2, float y2, double score);

// Python's round(v, digits): the decimal with `digits` places nearest to v's exact binary value, a tie to the
// even last digit (round(100.0625, 3) = 100.062, where std::round(v * 1e3) / 1e3 gives 100.063).
double python_round(double v, int digits);

// What COCOeval needs from an annotation file.
struct CocoAnnotations {
  std::string source;                    // file name, for messages
  std::vector<int64_t> image_ids;        // as listed under "images"
  std::vector<std::string> file_names;   // their "file_name" ("" where missing), parallel to image_ids
  std::vector<int64_t> category_ids;     // as listed under "categories"
  std::vector<std::string> category_names;  // their "name" ("" where missing), parallel to category_ids
  std::vector<CocoGroundTruth> objects;  // "annotations", in file order
};

// The 12 numbers COCOeval.summarize() prints, in its order.
struct CocoSummary {
  enum Index { kAP, kAP50, kAP75, kAPSmall, kAPMedium, kAPLarge,
               kAR1, kAR10, kAR100, kARSmall, kARMedium, kARLarge };
  std::array<double, 12> stats{};
};

// Parse files. Errors (kestrel::Error) name the file: missing or unreadable, malformed JSON, a missing or
// mistyped field (with the index of the offending entry), duplicate ids, and for results an image id that
// the annotations do not list.
CocoAnnotations read_coco_annotations(const std::string& path);
std::vector<CocoDetection> read_coco_results(const std::string& path, const CocoAnnotations& annotations);
// The same from JSON already in memory (e.g. yolo_to_coco's output); `source` names it in messages.
CocoAnnotations parse_coco_annotations(const nlohmann::json& root, const std::string& source);
std::vector<CocoDetection> parse_coco_results(const nlohmann::json& root, const std::string& source,
                                              const CocoAnnotations& annotations);

// The evaluation proper; `detections` in the order they were produced (ties in score keep it).
// image_ids: pycocotools' params.imgIds, the images evaluated (val.py sets the split's on COCO); empty:
// every image of the annotation file.
CocoSummary evaluate_coco(const CocoAnnotations& annotations, const std::vector<CocoDetection>& detections,
                          const std::vector<int64_t>& image_ids = {});
CocoSummary evaluate_coco(const std::string& annotation_json_path, const std::string& results_json_path);

// `detections` as a COCO results JSON array, the text val.py's json.dump writes ([{"image_id": 1, "category_id": 3,
// "bbox": [x, y, w, h], "score": 0.5}, ...], floats as Python's repr, "1.0" for whole ones), written straight to
// text: no JSON tree of the whole set, which costs ≈ 0.5 KB a detection (val --save-json on COCO: 1.5 M of them).
std::string coco_results_json(const std::vector<CocoDetection>& detections);

// The summary as pycocotools prints it: " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | ..."
std::string format_coco_summary(const CocoSummary& summary);

}  // namespace kestrel::eval
