#include "kestrel/data/labels.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kestrel/core/error.h"

namespace kestrel::data {
namespace {

std::vector<float> parse_numbers(const std::string& line, const std::string& where) {
  std::vector<float> values;
  const char* p = line.c_str();
  const char* end = p + line.size();
  while (p < end) {
    while (p < end && std::isspace(static_cast<unsigned char>(*p))) ++p;
    if (p >= end) break;
    const char* start = p;
    while (p < end && !std::isspace(static_cast<unsigned char>(*p))) ++p;
    const std::string token(start, p);
    char* stop = nullptr;
    errno = 0;
    const float v = std::strtof(token.c_str(), &stop);
    // Shown in messages: at most 20 characters, non-printable bytes as '?'.
    std::string shown;
    for (unsigned char c : token.substr(0, 20)) shown += std::isprint(c) ? static_cast<char>(c) : '?';
    if (token.size() > 20) shown += "...";
    // strtof also reads hexadecimal ("0x1p-1"), which Python's float() and numpy refuse.
    if (stop != token.c_str() + token.size() || token.empty() || token.find_first_of("xX") != std::string::npos)
      fail(where, ": '", shown, "' is not a number");
    if (!std::isfinite(v)) fail(where, ": non-finite value '", shown, "'");
    values.push_back(v);
  }
  return values;
}

LabelRow make_row(const std::vector<float>& v, const std::string& where, int nc) {
  const bool is_box = v.size() == 5;
  const bool is_polygon = v.size() >= 7 && (v.size() - 1) % 2 == 0;
  if (!is_box && !is_polygon)
    fail(where, ": ", v.size(), " values; a row is 'class cx cy w h' (5) or a polygon 'class x1 y1 x2 y2 x3 y3 ...'");
  const float cls = v[0];
  if (cls < 0 || cls != std::floor(cls)) fail(where, ": class ", cls, " is not a non-negative integer");
  if (nc > 0 && cls >= static_cast<float>(nc)) {
    // Printed with %.0f: a class beyond int's range (e.g. 1e10) cannot be converted to int.
    char shown[64];
    std::snprintf(shown, sizeof shown, "%.0f", cls);
    fail(where, ": class ", shown, kExceedsDatasetNc, nc, " (classes 0..", nc - 1, ")");
  }
  // Without nc (the label cache's check, --single-cls): classes a float holds exactly, as the cache requires.
  if (cls >= static_cast<float>(kMaxClassIndex + 1)) {
    char shown[64];
    std::snprintf(shown, sizeof shown, "%.0f", cls);
    fail(where, ": class ", shown, kBeyondAnyClassIndex, " (at most ", kMaxClassIndex, ")");
  }
  LabelRow row;
  if (is_box) {
    for (size_t i = 1; i < v.size(); ++i)
      if (v[i] < 0 || v[i] > 1) {
        char shown[32];  // the shortest that reads back as this float: 1.0000001 shows as itself, not as 1
        for (int digits = 6; digits <= 9; ++digits) {
          std::snprintf(shown, sizeof shown, "%.*g", digits, v[i]);
          if (std::strtof(shown, nullptr) == v[i]) break;
        }
        fail(where, ": coordinate ", shown, " is outside 0..1 (labels must be normalised)");
      }
    row.box = {cls, v[1], v[2], v[3], v[4]};
    return row;
  }
  // A polygon is checked through its box, as upstream (segments2boxes, then the box's range check): points a
  // little outside the image (outlines touching its border) are kept; the augmentations clip them.
  row.polygon.assign(v.begin() + 1, v.end());
  float x1 = row.polygon[0], y1 = row.polygon[1], x2 = x1, y2 = y1;
  for (size_t i = 0; i < row.polygon.size(); i += 2) {
    x1 = std::min(x1, row.polygon[i]);
    x2 = std::max(x2, row.polygon[i]);
    y1 = std::min(y1, row.polygon[i + 1]);
    y2 = std::max(y2, row.polygon[i + 1]);
  }
  row.box = {cls, (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1};
  static const char* const kNames[] = {"cx", "cy", "w", "h"};
  for (int i = 1; i < 5; ++i)
    if (row.box[i] < 0 || row.box[i] > 1)
      fail(where, ": the polygon's box has ", kNames[i - 1], " ", row.box[i], ", outside 0..1 (labels must be normalised)");
  return row;
}

}  // namespace

bool ParsedLabels::all_polygons() const {
  return !rows.empty() && std::all_of(rows.begin(), rows.end(), [](const LabelRow& r) { return !r.polygon.empty(); });
}

ParsedLabels parse_labels(const std::string& text, const std::string& source, int nc) {
  ParsedLabels out;
  // Upstream's float() fails on it too (the file is corrupt there); named here rather than shown as '???0'.
  if (text.rfind("\xEF\xBB\xBF", 0) == 0)
    fail(source, ":1: starts with a UTF-8 byte-order mark (BOM): save the file without it");
  // Lines end at \n, \r\n, \r, \v or \f, as upstream's splitlines() ends them: a file with old-Mac \r
  // line ends is several rows, not one long row that could pass for a polygon.
  size_t at = 0;
  int line_no = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find_first_of("\n\r\v\f", at), text.size());
    const std::string line = text.substr(at, end - at);
    at = end + (text.compare(end, 2, "\r\n") == 0 ? 2 : 1);
    ++line_no;
    const std::string where = cat(source, ":", line_no);
    std::vector<float> values = parse_numbers(line, where);
    if (values.empty()) continue;
    out.rows.push_back(make_row(values, where, nc));
  }
  // Rows with the same box (class, cx, cy, w, h; polygons by their box) are one object: upstream's
  // np.unique(labels, axis=0, return_index=True), which also sorts the rows by box when it drops any.
  std::vector<size_t> order(out.rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return out.rows[a].box < out.rows[b].box; });
  std::vector<LabelRow> unique;
  for (size_t k = 0; k < order.size(); ++k)
    if (k == 0 || out.rows[order[k]].box != out.rows[order[k - 1]].box) unique.push_back(out.rows[order[k]]);
  out.duplicates_removed = static_cast<int>(out.rows.size() - unique.size());
  if (out.duplicates_removed) out.rows = std::move(unique);
  return out;
}

}  // namespace kestrel::data
