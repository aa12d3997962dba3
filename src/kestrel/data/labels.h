// YOLO label files: one row per object, `class cx cy w h` normalised to 0..1, or a polygon row
// `class x1 y1 x2 y2 x3 y3 ...` (instance outline; its bounding box becomes the box).
#pragma once
#include <array>
#include <string>
#include <vector>

namespace kestrel::data {

struct LabelRow {
  std::array<float, 5> box;      // class, cx, cy, w, h (normalised)
  std::vector<float> polygon;    // normalised x, y pairs; empty for box rows
};

struct ParsedLabels {
  std::vector<LabelRow> rows;
  int duplicates_removed = 0;    // rows with the same box dropped, as upstream does (with a warning)
  bool all_polygons() const;     // polygons are kept as segments only when every row has one
};

// The largest class a label may hold with or without nc: 2^24 - 1, the largest run of integers a float holds.
inline constexpr int kMaxClassIndex = (1 << 24) - 1;
// What the error for a class above it says (check_classes looks for it, to name nc instead where one is set).
inline constexpr const char* kBeyondAnyClassIndex = " is beyond any class index";
// What the error for a class at or above nc says (describe() counts those skips, to point at the YAML's nc).
inline constexpr const char* kExceedsDatasetNc = " exceeds the dataset's nc=";

// The reference rules: every value a finite number, class a non-negative integer below nc (nc > 0) and
// at most kMaxClassIndex,
// rows of 5 values or polygons of at least 3 points, a box's values (a polygon's: its box's) within 0..1.
// Violations throw kestrel::Error "<source>:<line>: <problem>"; the caller skips the sample and reports it.
// Where rows repeat a box, the rows come back sorted by box (class, cx, cy, w, h) with one of each, as
// upstream's np.unique; otherwise in file order.
ParsedLabels parse_labels(const std::string& text, const std::string& source, int nc);

}  // namespace kestrel::data
