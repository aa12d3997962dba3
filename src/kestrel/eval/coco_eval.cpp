#include "kestrel/eval/coco_eval.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <new>
#include <iterator>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "kestrel/core/error.h"
#include "kestrel/core/json_number.h"
#include "kestrel/core/python_repr.h"
#include "kestrel/core/regular_file.h"

namespace kestrel::eval {
namespace {

using nlohmann::json;

// ---- reading files ---------------------------------------------------------------------------

json load_json(const std::string& path) {
  require_regular_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open the file");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number beyond double (1e999)
    fail(path, ": malformed JSON (", e.what(), ")");
  } catch (const std::bad_alloc&) {  // e.g. a billion nested brackets: the parser's stack outgrew the memory
    fail(path, ": too large or too deeply nested to read into memory");
  }
}

const json& member(const json& object, const char* key, const std::string& where) {
  if (!object.is_object()) fail(where, ": expected a JSON object");
  auto it = object.find(key);
  if (it == object.end()) fail(where, ": missing field \"", key, "\"");
  return *it;
}

int64_t integer_member(const json& object, const char* key, const std::string& where) {
  const json& value = member(object, key, where);
  // Above 2^63-1 get<int64_t> would wrap (18446744073709551615 became -1).
  if (!value.is_number_integer() || (value.is_number_unsigned() && value.get<uint64_t>() > INT64_MAX))
    fail(where, ": field \"", key, "\" must be a 64-bit integer, got ", json_shown(value));
  return value.get<int64_t>();
}

double number_member(const json& object, const char* key, const std::string& where) {
  const json& value = member(object, key, where);
  if (!value.is_number()) fail(where, ": field \"", key, "\" must be a number, got ", json_shown(value));
  return value.get<double>();
}

CocoBox box_member(const json& object, const std::string& where) {
  const json& value = member(object, "bbox", where);
  if (!value.is_array() || value.size() != 4 ||
      !std::all_of(value.begin(), value.end(), [](const json& v) { return v.is_number(); }))
    fail(where, ": \"bbox\" must be [x, y, width, height], got ", json_shown(value));
  return {value[0].get<double>(), value[1].get<double>(), value[2].get<double>(), value[3].get<double>()};
}

bool crowd_member(const json& object, const std::string& where) {
  const json& value = member(object, "iscrowd", where);
  if (value.is_boolean()) return value.get<bool>();
  if (!value.is_number_integer()) fail(where, ": field \"iscrowd\" must be 0 or 1, got ", json_shown(value));
  return value.get<int64_t>() != 0;
}

const json& array_member(const json& root, const char* key, const std::string& path) {
  const json& value = member(root, key, path);
  if (!value.is_array()) fail(path, ": \"", key, "\" must be a list");
  return value;
}

// Ids listed under "images" or "categories"; duplicates are an error.
std::vector<int64_t> listed_ids(const json& root, const char* key, const std::string& path) {
  std::vector<int64_t> ids;
  std::unordered_set<int64_t> seen;
  const json& entries = array_member(root, key, path);
  for (size_t i = 0; i < entries.size(); ++i) {
    int64_t id = integer_member(entries[i], "id", cat(path, ": ", key, "[", i, "]"));
    if (!seen.insert(id).second) fail(path, ": ", key, "[", i, "]: duplicate id ", id);
    ids.push_back(id);
  }
  return ids;
}

}  // namespace

CocoAnnotations read_coco_annotations(const std::string& path) {
  return parse_coco_annotations(load_json(path), path);
}

std::vector<CocoDetection> read_coco_results(const std::string& path, const CocoAnnotations& annotations) {
  return parse_coco_results(load_json(path), path, annotations);
}

CocoAnnotations parse_coco_annotations(const json& root, const std::string& path) {
  if (!root.is_object()) fail(path, ": a COCO annotation file must hold a JSON object");
  CocoAnnotations out;
  out.source = path;
  out.image_ids = listed_ids(root, "images", path);
  for (const json& image : root.at("images"))
    out.file_names.push_back(image.contains("file_name") && image["file_name"].is_string() ? image["file_name"].get<std::string>() : "");
  out.category_ids = listed_ids(root, "categories", path);
  for (const json& category : root.at("categories"))
    out.category_names.push_back(category.contains("name") && category["name"].is_string() ? category["name"].get<std::string>() : "");
  const std::unordered_set<int64_t> images(out.image_ids.begin(), out.image_ids.end());
  const std::unordered_set<int64_t> categories(out.category_ids.begin(), out.category_ids.end());
  std::unordered_set<int64_t> ids;
  const json& entries = array_member(root, "annotations", path);
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string where = cat(path, ": annotations[", i, "]");
    CocoGroundTruth gt;
    gt.id = integer_member(entries[i], "id", where);
    gt.image_id = integer_member(entries[i], "image_id", where);
    gt.category_id = integer_member(entries[i], "category_id", where);
    gt.box = box_member(entries[i], where);
    gt.area = number_member(entries[i], "area", where);
    gt.crowd = crowd_member(entries[i], where);
    if (!ids.insert(gt.id).second) fail(where, ": duplicate annotation id ", gt.id);
    if (!images.count(gt.image_id)) fail(where, ": image_id ", gt.image_id, " is not listed under \"images\"");
    if (!categories.count(gt.category_id))
      fail(where, ": category_id ", gt.category_id, " is not listed under \"categories\"");
    out.objects.push_back(gt);
  }
  return out;
}

std::vector<CocoDetection> parse_coco_results(const json& root, const std::string& path,
                                              const CocoAnnotations& annotations) {
  if (!root.is_array()) fail(path, ": a COCO result file must hold a list of detections");
  const std::unordered_set<int64_t> images(annotations.image_ids.begin(), annotations.image_ids.end());
  std::vector<CocoDetection> out;
  out.reserve(root.size());
  for (size_t i = 0; i < root.size(); ++i) {
    const std::string where = cat(path, ": [", i, "]");
    CocoDetection d;
    d.image_id = integer_member(root[i], "image_id", where);
    d.category_id = integer_member(root[i], "category_id", where);
    d.box = box_member(root[i], where);
    d.score = number_member(root[i], "score", where);
    if (!images.count(d.image_id))
      fail(where, ": image_id ", d.image_id, " is not an image of ", annotations.source);
    out.push_back(d);
  }
  return out;
}

namespace {

// ---- evaluation settings (COCOeval's Params for "bbox") -------------------------------------

constexpr int kT = 10;   // IoU thresholds
constexpr int kR = 101;  // recall thresholds
constexpr int kA = 4;    // area ranges
constexpr int kM = 3;    // max detections
constexpr std::array<int, kM> kMaxDets = {1, 10, 100};
constexpr double kAreaRange[kA][2] = {{0, 1e10}, {0, 32 * 32}, {32 * 32, 96 * 96}, {96 * 96, 1e10}};
constexpr double kEps = 2.220446049250313e-16;  // np.spacing(1)

// numpy.linspace(start, stop, n) value by value: i * ((stop - start) / (n - 1)) + start, the last one
// exactly `stop`. Thresholds are compared with `<` and `==`, so the last bit matters (the 9th IoU
// threshold is 0.8999999999999999); the volatile keeps the compiler from fusing multiply and add.
template <int N>
std::array<double, N> numpy_linspace(double start, double stop) {
  std::array<double, N> out{};
  const double step = (stop - start) / (N - 1);
  for (int i = 0; i < N - 1; ++i) {
    volatile double scaled = i * step;
    out[i] = scaled + start;
  }
  out[N - 1] = stop;
  return out;
}

const std::array<double, kT> kIouThresholds = numpy_linspace<kT>(0.5, 0.95);
const std::array<double, kR> kRecallThresholds = numpy_linspace<kR>(0.0, 1.0);

// IoU of a detection and a gt box, as pycocotools' bbIou: a crowd gt divides by the detection's area.
double box_iou(const CocoBox& d, const CocoBox& g, bool crowd) {
  const double w = std::min(d.x + d.w, g.x + g.w) - std::max(d.x, g.x);
  if (w <= 0) return 0;
  const double h = std::min(d.y + d.h, g.y + g.h) - std::max(d.y, g.y);
  if (h <= 0) return 0;
  const double inter = w * h;
  const double d_area = d.w * d.h;
  return inter / (crowd ? d_area : d_area + g.w * g.h - inter);
}

// The gts and detections of one (image, category) pair.
struct Cell {
  int64_t image = 0;  // index into the sorted image ids
  std::vector<const CocoGroundTruth*> gts;  // file order
  std::vector<const CocoDetection*> dts;    // file order; sorted and cut to 100 by prepare_cell
  std::vector<double> iou;                  // [D, G] row-major
};

// One cell under one area range: what accumulation needs (pycocotools' evalImgs entry).
struct CellResult {
  std::vector<double> scores;    // [D], descending
  std::vector<uint8_t> matched;  // [T, D]: matched a gt with a non-zero id
  std::vector<uint8_t> ignored;  // [T, D]
  int64_t counted_gts = 0;       // gts not ignored in this area range
};

void prepare_cell(Cell& c) {
  std::stable_sort(c.dts.begin(), c.dts.end(),
                   [](const CocoDetection* a, const CocoDetection* b) { return a->score > b->score; });
  if (c.dts.size() > static_cast<size_t>(kMaxDets.back())) c.dts.resize(kMaxDets.back());
  const size_t D = c.dts.size(), G = c.gts.size();
  c.iou.assign(D * G, 0.0);
  for (size_t d = 0; d < D; ++d)
    for (size_t g = 0; g < G; ++g) c.iou[d * G + g] = box_iou(c.dts[d]->box, c.gts[g]->box, c.gts[g]->crowd);
}

// Greedy matching of one cell at one area range, in pycocotools' order: detections by score, gts with
// the ignored ones last; a detection takes the best-IoU gt still free (crowds never become unfree), but
// stops looking once it holds a regular gt and only ignored ones remain.
CellResult evaluate_cell(const Cell& c, const double* range) {
  const int D = static_cast<int>(c.dts.size()), G = static_cast<int>(c.gts.size());
  auto outside = [&](double area) { return area < range[0] || area > range[1]; };
  std::vector<uint8_t> gt_ignored(G);
  for (int g = 0; g < G; ++g) gt_ignored[g] = c.gts[g]->crowd || outside(c.gts[g]->area);
  std::vector<int> order(G);  // gt indices, regular ones first, otherwise file order
  std::iota(order.begin(), order.end(), 0);
  std::stable_partition(order.begin(), order.end(), [&](int g) { return !gt_ignored[g]; });

  CellResult r;
  for (const CocoDetection* d : c.dts) r.scores.push_back(d->score);
  r.matched.assign(kT * D, 0);
  r.ignored.assign(kT * D, 0);
  r.counted_gts = std::count(gt_ignored.begin(), gt_ignored.end(), 0);
  for (int t = 0; t < kT && G > 0; ++t) {
    std::vector<uint8_t> taken(G, 0);  // by position in `order`
    for (int d = 0; d < D; ++d) {
      double best = std::min(kIouThresholds[t], 1 - 1e-10);
      int m = -1;
      for (int j = 0; j < G; ++j) {
        const int g = order[j];
        if (taken[j] && !c.gts[g]->crowd) continue;
        if (m > -1 && !gt_ignored[order[m]] && gt_ignored[g]) break;
        if (c.iou[d * G + g] < best) continue;
        best = c.iou[d * G + g];
        m = j;
      }
      if (m == -1) continue;
      r.ignored[t * D + d] = gt_ignored[order[m]];
      r.matched[t * D + d] = c.gts[order[m]]->id != 0;
      taken[m] = 1;
    }
  }
  for (int t = 0; t < kT; ++t)  // unmatched detections outside the area range do not count
    for (int d = 0; d < D; ++d)
      if (!r.matched[t * D + d] && outside(c.dts[d]->box.w * c.dts[d]->box.h)) r.ignored[t * D + d] = 1;
  return r;
}

// Precision [T, R, K, A, M] and recall [T, K, A, M], -1 where a category has no counted gt.
struct Accumulated {
  int64_t K = 0;
  std::vector<double> precision, recall;
  size_t p_index(int t, int r, int64_t k, int a, int m) const { return (((t * kR + r) * K + k) * kA + a) * kM + m; }
  size_t r_index(int t, int64_t k, int a, int m) const { return ((t * K + k) * kA + a) * kM + m; }
};

// One category, area range and maxDets: detections of all images ranked together (stable, so image
// order then rank within the image break ties), precision envelope, precision at each recall threshold.
void accumulate_one(const std::vector<const CellResult*>& results, int64_t k, int a, int m, Accumulated& acc) {
  const size_t max_det = kMaxDets[m];
  std::vector<double> scores;
  std::vector<std::pair<const CellResult*, int>> source;  // (cell, detection index)
  int64_t counted_gts = 0;
  for (const CellResult* r : results) {
    counted_gts += r->counted_gts;
    for (size_t d = 0; d < std::min(max_det, r->scores.size()); ++d) {
      scores.push_back(r->scores[d]);
      source.emplace_back(r, static_cast<int>(d));
    }
  }
  if (counted_gts == 0) return;
  std::vector<size_t> rank(scores.size());
  std::iota(rank.begin(), rank.end(), 0);
  std::stable_sort(rank.begin(), rank.end(), [&](size_t i, size_t j) { return scores[i] > scores[j]; });
  const size_t n = rank.size();
  std::vector<double> rc(n), pr(n);
  for (int t = 0; t < kT; ++t) {
    double tp = 0, fp = 0;
    for (size_t i = 0; i < n; ++i) {
      const auto& [cell, d] = source[rank[i]];
      const size_t at = t * cell->scores.size() + d;
      if (!cell->ignored[at]) (cell->matched[at] ? tp : fp) += 1;
      rc[i] = tp / static_cast<double>(counted_gts);
      pr[i] = tp / (fp + tp + kEps);
    }
    acc.recall[acc.r_index(t, k, a, m)] = n ? rc.back() : 0.0;
    for (size_t i = n; i-- > 1;) pr[i - 1] = std::max(pr[i - 1], pr[i]);
    for (int r = 0; r < kR; ++r) {
      const size_t at = std::lower_bound(rc.begin(), rc.end(), kRecallThresholds[r]) - rc.begin();
      acc.precision[acc.p_index(t, r, k, a, m)] = at < n ? pr[at] : 0.0;
    }
  }
}

// Mean over the entries > -1 of precision (ap) or recall, at one area range and maxDets, for all IoU
// thresholds or for the one equal to `iou` (pycocotools compares with ==).
double summarize(const Accumulated& acc, bool ap, double iou, int a, int m) {
  double sum = 0;
  int64_t count = 0;
  for (int t = 0; t < kT; ++t) {
    if (iou >= 0 && kIouThresholds[t] != iou) continue;
    for (int64_t k = 0; k < acc.K; ++k)
      for (int r = 0; r < (ap ? kR : 1); ++r) {
        const double v = ap ? acc.precision[acc.p_index(t, r, k, a, m)] : acc.recall[acc.r_index(t, k, a, m)];
        if (v > -1) {
          sum += v;
          ++count;
        }
      }
  }
  return count ? sum / static_cast<double>(count) : -1.0;
}

CocoSummary summarize_all(const Accumulated& acc) {
  CocoSummary s;
  const double all = -1;  // every IoU threshold
  s.stats = {summarize(acc, true, all, 0, 2),   summarize(acc, true, 0.5, 0, 2),
             summarize(acc, true, 0.75, 0, 2),  summarize(acc, true, all, 1, 2),
             summarize(acc, true, all, 2, 2),   summarize(acc, true, all, 3, 2),
             summarize(acc, false, all, 0, 0),  summarize(acc, false, all, 0, 1),
             summarize(acc, false, all, 0, 2),  summarize(acc, false, all, 1, 2),
             summarize(acc, false, all, 2, 2),  summarize(acc, false, all, 3, 2)};
  return s;
}

template <typename T>
std::unordered_map<int64_t, int64_t> index_of(const std::vector<T>& sorted_ids) {
  std::unordered_map<int64_t, int64_t> out;
  for (size_t i = 0; i < sorted_ids.size(); ++i) out[sorted_ids[i]] = static_cast<int64_t>(i);
  return out;
}

std::vector<int64_t> sorted_unique(std::vector<int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

// Groups gts and detections by (category, image); per category, cells in image-id order. subset: `images`
// is a part of the file's (imgIds): the others' gts and detections are left out, not errors.
std::vector<std::vector<Cell>> build_cells(const CocoAnnotations& ann, const std::vector<CocoDetection>& dts,
                                           const std::vector<int64_t>& images,
                                           const std::vector<int64_t>& categories, bool subset) {
  const auto image_index = index_of(images);
  const auto category_index = index_of(categories);
  std::vector<std::unordered_map<int64_t, Cell>> by_image(categories.size());
  for (const CocoGroundTruth& gt : ann.objects) {
    auto k = category_index.find(gt.category_id);
    auto i = image_index.find(gt.image_id);
    if (subset && i == image_index.end()) continue;
    if (k == category_index.end() || i == image_index.end())
      fail(ann.source, ": annotation ", gt.id, " names an image or category the file does not list");
    by_image[k->second][i->second].gts.push_back(&gt);
  }
  for (const CocoDetection& d : dts) {
    auto i = image_index.find(d.image_id);
    if (subset && i == image_index.end()) continue;
    if (i == image_index.end()) fail("detection for image_id ", d.image_id, " that ", ann.source, " does not list");
    auto k = category_index.find(d.category_id);
    if (k != category_index.end()) by_image[k->second][i->second].dts.push_back(&d);
  }
  std::vector<std::vector<Cell>> cells(categories.size());
  for (size_t k = 0; k < categories.size(); ++k) {
    for (auto& [image, cell] : by_image[k]) {
      cell.image = image;
      cells[k].push_back(std::move(cell));
    }
    std::sort(cells[k].begin(), cells[k].end(), [](const Cell& a, const Cell& b) { return a.image < b.image; });
  }
  return cells;
}

}  // namespace

CocoSummary evaluate_coco(const CocoAnnotations& annotations, const std::vector<CocoDetection>& detections,
                          const std::vector<int64_t>& image_ids) {
  // Images of the subset without annotations or detections would add nothing (pycocotools: no gt, no dt).
  std::vector<int64_t> images = sorted_unique(annotations.image_ids);
  if (!image_ids.empty()) {
    const std::vector<int64_t> subset = sorted_unique(image_ids);
    std::vector<int64_t> both;
    std::set_intersection(images.begin(), images.end(), subset.begin(), subset.end(), std::back_inserter(both));
    images = std::move(both);
  }
  const std::vector<int64_t> categories = sorted_unique(annotations.category_ids);
  std::vector<std::vector<Cell>> cells = build_cells(annotations, detections, images, categories, !image_ids.empty());
  Accumulated acc;
  acc.K = static_cast<int64_t>(categories.size());
  acc.precision.assign(kT * kR * acc.K * kA * kM, -1.0);
  acc.recall.assign(kT * acc.K * kA * kM, -1.0);
  for (int64_t k = 0; k < acc.K; ++k) {
    for (Cell& c : cells[k]) prepare_cell(c);
    for (int a = 0; a < kA; ++a) {
      std::vector<CellResult> results;
      results.reserve(cells[k].size());
      for (const Cell& c : cells[k]) results.push_back(evaluate_cell(c, kAreaRange[a]));
      std::vector<const CellResult*> views;
      for (const CellResult& r : results) views.push_back(&r);
      for (int m = 0; m < kM; ++m) accumulate_one(views, k, a, m, acc);
    }
  }
  return summarize_all(acc);
}

CocoSummary evaluate_coco(const std::string& annotation_json_path, const std::string& results_json_path) {
  const CocoAnnotations annotations = read_coco_annotations(annotation_json_path);
  return evaluate_coco(annotations, read_coco_results(results_json_path, annotations));
}

std::string format_coco_summary(const CocoSummary& summary) {
  struct Row { bool ap; const char* iou; const char* area; int max_dets; };
  static const Row rows[12] = {
      {true, "0.50:0.95", "all", 100},   {true, "0.50", "all", 100},       {true, "0.75", "all", 100},
      {true, "0.50:0.95", "small", 100}, {true, "0.50:0.95", "medium", 100}, {true, "0.50:0.95", "large", 100},
      {false, "0.50:0.95", "all", 1},    {false, "0.50:0.95", "all", 10},    {false, "0.50:0.95", "all", 100},
      {false, "0.50:0.95", "small", 100}, {false, "0.50:0.95", "medium", 100}, {false, "0.50:0.95", "large", 100}};
  std::string out;
  char line[160];
  for (int i = 0; i < 12; ++i) {
    const Row& row = rows[i];
    std::snprintf(line, sizeof line, " %-18s %s @[ IoU=%-9s | area=%6s | maxDets=%3d ] = %0.3f\n",
                  row.ap ? "Average Precision" : "Average Recall", row.ap ? "(AP)" : "(AR)", row.iou, row.area,
                  row.max_dets, summary.stats[i]);
    out += line;
  }
  return out;
}

double python_round(double v, int digits) {
  const double scale = std::pow(10.0, digits), scaled = v * scale;
  // Far from a tie (by much more than the product's rounding error), rounding the product decides alike;
  // from 2^52 on, the product has lost the fraction that decides.
  if (std::abs(scaled) < 0x1p52 && std::abs(scaled - std::floor(scaled) - 0.5) > 1e-6)
    return std::round(scaled) / scale;
  // Near one, printf's correctly rounded decimal (ties to even on the exact value, as CPython's round).
  char text[400];  // DBL_MAX has 309 integer digits
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return std::strtod(text, nullptr);
}

CocoDetection coco_detection(int64_t image_id, int64_t category_id, float x1, float y1, float x2, float y2, double score) {
  const float w = x2 - x1, h = y2 - y1;  // float32 as upstream's tensors
  const float x = (x1 + x2) / 2 - w / 2, y = (y1 + y2) / 2 - h / 2;
  return {image_id, category_id, CocoBox{python_round(x, 3), python_round(y, 3), python_round(w, 3), python_round(h, 3)},
          python_round(score, 5)};
}

std::string coco_results_json(const std::vector<CocoDetection>& detections) {
  std::string out;
  out.reserve(detections.size() * 96 + 2);
  const auto add = [&](double v) {  // Python's repr, as json.dump writes floats; JSON has no inf or nan
    if (!std::isfinite(v)) fail("COCO results: a non-finite number (", v, ")");
    out += python_float_repr(v);
  };
  // json.dump(jdict, f) of val.py's dicts: their key order, ", " and ": " between items.
  out += '[';
  for (size_t i = 0; i < detections.size(); ++i) {
    const CocoDetection& d = detections[i];
    out += i ? ", {\"image_id\": " : "{\"image_id\": ";
    out += std::to_string(d.image_id) + ", \"category_id\": " + std::to_string(d.category_id) + ", \"bbox\": [";
    add(d.box.x), out += ", ", add(d.box.y), out += ", ", add(d.box.w), out += ", ", add(d.box.h);
    out += "], \"score\": ";
    add(d.score);
    out += '}';
  }
  out += ']';
  return out;
}

}  // namespace kestrel::eval
