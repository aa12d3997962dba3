// Label parsing with the reference rules, and malformed files.
#include <gtest/gtest.h>

#include "kestrel/core/error.h"
#include "kestrel/data/labels.h"

namespace kestrel::data {
namespace {

std::string error_of(const std::string& text, int nc = 80) {
  try {
    parse_labels(text, "l.txt", nc);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Labels, BoxesAndPolygons) {
  auto p = parse_labels("0 0.5 0.5 0.2 0.4\n\n  3 0.1 0.2 0.3 0.4  \r\n", "l.txt", 80);
  ASSERT_EQ(p.rows.size(), 2u);
  EXPECT_EQ(p.rows[1].box, (std::array<float, 5>{3, 0.1f, 0.2f, 0.3f, 0.4f}));
  EXPECT_FALSE(p.all_polygons());
  // triangle (0.1,0.2) (0.5,0.2) (0.3,0.6): bounds x 0.1..0.5, y 0.2..0.6 -> centre (0.3, 0.4), size 0.4 x 0.4
  auto q = parse_labels("7 0.1 0.2 0.5 0.2 0.3 0.6\n", "l.txt", 80);
  ASSERT_EQ(q.rows.size(), 1u);
  EXPECT_TRUE(q.all_polygons());
  EXPECT_FLOAT_EQ(q.rows[0].box[0], 7);
  EXPECT_FLOAT_EQ(q.rows[0].box[1], 0.3f);
  EXPECT_FLOAT_EQ(q.rows[0].box[2], 0.4f);
  EXPECT_FLOAT_EQ(q.rows[0].box[3], 0.4f);
  EXPECT_FLOAT_EQ(q.rows[0].box[4], 0.4f);
  EXPECT_EQ(q.rows[0].polygon.size(), 6u);
}

TEST(Labels, EmptyFileHasNoRows) {
  EXPECT_TRUE(parse_labels("", "l.txt", 80).rows.empty());
  EXPECT_TRUE(parse_labels("\n \n\t\n", "l.txt", 80).rows.empty());
}

TEST(Labels, DuplicatesRemovedAndCounted) {
  auto p = parse_labels("1 0.5 0.5 0.1 0.1\n1 0.5 0.5 0.1 0.1\n2 0.5 0.5 0.1 0.1\n1 0.5 0.5 0.1 0.1\n", "l.txt", 80);
  EXPECT_EQ(p.rows.size(), 2u);
  EXPECT_EQ(p.duplicates_removed, 2);
}

// upstream: np.unique(rows, axis=0, return_index=True) where any row repeats: sorted, first of each kept.
TEST(Labels, DuplicatesSortTheRowsAsNumpyUnique) {
  auto p = parse_labels("2 0.5 0.5 0.1 0.1\n1 0.7 0.5 0.1 0.1\n2 0.5 0.5 0.1 0.1\n1 0.5 0.9 0.1 0.1\n", "l.txt", 80);
  ASSERT_EQ(p.rows.size(), 3u);
  EXPECT_EQ(p.rows[0].box, (std::array<float, 5>{1, 0.5f, 0.9f, 0.1f, 0.1f}));
  EXPECT_EQ(p.rows[1].box, (std::array<float, 5>{1, 0.7f, 0.5f, 0.1f, 0.1f}));
  EXPECT_EQ(p.rows[2].box, (std::array<float, 5>{2, 0.5f, 0.5f, 0.1f, 0.1f}));
  // no repeat: file order
  auto q = parse_labels("2 0.5 0.5 0.1 0.1\n1 0.7 0.5 0.1 0.1\n", "l.txt", 80);
  EXPECT_EQ(q.rows[0].box[0], 2);
  EXPECT_EQ(q.duplicates_removed, 0);
  // two outlines with the same bounds are one object upstream (it compares boxes)
  auto r = parse_labels("0 0.1 0.1 0.5 0.1 0.5 0.5\n0 0.1 0.1 0.1 0.5 0.5 0.5\n", "l.txt", 80);
  EXPECT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.duplicates_removed, 1);
  EXPECT_EQ(r.rows[0].polygon, (std::vector<float>{0.1f, 0.1f, 0.5f, 0.1f, 0.5f, 0.5f}));
}

// A polygon is checked through its box (upstream: segments2boxes, then the range check): an outline a
// little past the border passes; its box is computed in float32 from the points as they are.
TEST(Labels, PolygonPointsPastTheBorderPassWhenTheirBoxIsInside) {
  auto p = parse_labels("0 0.1 0.1 1.00001 0.1 0.5 0.9\n0 -0.002 0.2 0.5 0.2 0.3 0.6\n", "l.txt", 80);
  ASSERT_EQ(p.rows.size(), 2u);
  EXPECT_EQ(p.rows[0].box[1], (0.1f + 1.00001f) / 2);
  EXPECT_EQ(p.rows[0].box[3], 1.00001f - 0.1f);
  EXPECT_EQ(p.rows[1].box[1], (-0.002f + 0.5f) / 2);
  EXPECT_EQ(p.rows[1].polygon[0], -0.002f);  // the points are kept as written
  // x from -0.5 to 0.1: centre -0.2
  EXPECT_EQ(error_of("0 -0.5 0.1 0.1 0.1 0.1 0.5\n"), "l.txt:1: the polygon's box has cx -0.2, outside 0..1 (labels must be normalised)");
  // x from 0 to 1.5: width 1.5 (centre 0.75)
  EXPECT_EQ(error_of("0 0 0.1 1.5 0.1 0.5 0.5\n"), "l.txt:1: the polygon's box has w 1.5, outside 0..1 (labels must be normalised)");
}

TEST(LabelErrors, EachProblemNamesFileAndLine) {
  EXPECT_EQ(error_of("0 0.5 0.5 0.2 nan\n"), "l.txt:1: non-finite value 'nan'");
  EXPECT_EQ(error_of("0 0.5 0.5 0.2 0.1\n0 -0.1 0.5 0.2 0.1\n"), "l.txt:2: coordinate -0.1 is outside 0..1 (labels must be normalised)");
  EXPECT_EQ(error_of("0 0.5 1.5 0.2 0.1\n"), "l.txt:1: coordinate 1.5 is outside 0..1 (labels must be normalised)");
  // just past 1: shown as more than 1 (the shortest decimal that reads back as the float)
  EXPECT_EQ(error_of("0 0.5 1.0000001 0.2 0.1\n"), "l.txt:1: coordinate 1.0000001 is outside 0..1 (labels must be normalised)");
  // a byte-order mark: float() fails on it upstream too; named rather than shown as '???0'
  EXPECT_EQ(error_of("\xEF\xBB\xBF" "0 0.5 0.5 0.2 0.1\n"), "l.txt:1: starts with a UTF-8 byte-order mark (BOM): save the file without it");
  EXPECT_EQ(error_of("-1 0.5 0.5 0.2 0.1\n"), "l.txt:1: class -1 is not a non-negative integer");
  EXPECT_EQ(error_of("1.5 0.5 0.5 0.2 0.1\n"), "l.txt:1: class 1.5 is not a non-negative integer");
  EXPECT_EQ(error_of("80 0.5 0.5 0.2 0.1\n"), "l.txt:1: class 80 exceeds the dataset's nc=80 (classes 0..79)");
  EXPECT_NE(error_of("0 0.5 0.5 0.2\n").find("l.txt:1: 4 values"), std::string::npos);
  EXPECT_NE(error_of("0 0.5 0.5 0.2 0.1 0.3\n").find("l.txt:1: 6 values"), std::string::npos);
  EXPECT_NE(error_of("0 0.1 0.1 0.2 0.2 0.3 0.3 0.4\n").find("8 values"), std::string::npos);  // odd coordinate count
  EXPECT_EQ(error_of("0 0.5 0.5 abc 0.1\n"), "l.txt:1: 'abc' is not a number");
  EXPECT_EQ(error_of("0 0.5 0.5 0x1g 0.1\n"), "l.txt:1: '0x1g' is not a number");
  EXPECT_EQ(error_of("0 0.5 0.5 0x1p-1 0.1\n"), "l.txt:1: '0x1p-1' is not a number");  // float('0x1p-1') raises
}

TEST(LabelErrors, BinaryGarbageAndLongLines) {
  std::string garbage = "\x89PNG\r\n\x1a\n\x00\x01\xff\xfe";
  garbage.push_back('\0');
  auto msg = error_of(garbage);
  EXPECT_NE(msg.find("l.txt:1: '"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is not a number"), std::string::npos) << msg;
  // a 1 MB line of digits: one absurdly long token
  msg = error_of("0 " + std::string(1 << 20, '1') + " 0.5 0.5 0.5\n");
  EXPECT_NE(msg.find("l.txt:1"), std::string::npos) << msg;
  // a valid polygon with 10,000 points on one line is accepted
  std::string poly = "5";
  for (int i = 0; i < 10000; ++i) poly += " 0.25 0.75";
  auto p = parse_labels(poly + "\n", "l.txt", 80);
  ASSERT_EQ(p.rows.size(), 1u);
  EXPECT_FLOAT_EQ(p.rows[0].box[3], 0.0f);  // all points equal: zero-size box
}

// Fuzzing finding: a class beyond int's range was converted to int for the message (undefined behaviour).
TEST(LabelErrors, HugeClassIsReportedAsWritten) {
  EXPECT_EQ(error_of("1e10 0.5 0.5 0.2 0.1\n"), "l.txt:1: class 10000000000 exceeds the dataset's nc=80 (classes 0..79)");
  EXPECT_EQ(error_of("3e38 0.5 0.5 0.2 0.1\n").rfind("l.txt:1: class 3", 0), 0u) << error_of("3e38 0.5 0.5 0.2 0.1\n");
  // Without nc (the label cache's verification, --single-cls), classes a float holds exactly: 2^24 - 1.
  const auto without_nc = [](const std::string& text) {
    try {
      (void)parse_labels(text, "l.txt", 0);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(without_nc("16777215 0.5 0.5 0.2 0.1\n"), "(accepted)");
  EXPECT_EQ(without_nc("16777216 0.5 0.5 0.2 0.1\n"), "l.txt:1: class 16777216 is beyond any class index (at most 16777215)");
  EXPECT_EQ(without_nc("1e10 0.5 0.5 0.2 0.1\n"), "l.txt:1: class 10000000000 is beyond any class index (at most 16777215)");
}

// Lines end at \r, \r\n, \n, \v and \f, as upstream's splitlines(): three box rows with old-Mac \r line
// ends were one 15-value row, parsed as a polygon without a word.
TEST(Labels, CarriageReturnsEndLinesLikeUpstream) {
  auto p = parse_labels("0 0.5 0.5 0.2 0.2\r1 0.5 0.5 0.2 0.2\r0 0.4 0.4 0.1 0.1\r", "l.txt", 80);
  ASSERT_EQ(p.rows.size(), 3u);
  EXPECT_FALSE(p.all_polygons());
  EXPECT_EQ(p.rows[1].box, (std::array<float, 5>{1, 0.5f, 0.5f, 0.2f, 0.2f}));
  EXPECT_EQ(parse_labels("0 0.5 0.5 0.2 0.2\v1 0.5 0.5 0.2 0.2\f", "l.txt", 80).rows.size(), 2u);
  // \r\n is one line end; a lone \r counts as one
  EXPECT_EQ(error_of("0 0.5 0.5 0.2 0.2\r\n0 0.5\r\n"), "l.txt:2: 2 values; a row is 'class cx cy w h' (5) or a polygon 'class x1 y1 x2 y2 x3 y3 ...'");
  EXPECT_EQ(error_of("0 0.5 0.5 0.2 0.2\r\r0 0.5\n"), "l.txt:3: 2 values; a row is 'class cx cy w h' (5) or a polygon 'class x1 y1 x2 y2 x3 y3 ...'");
}

}  // namespace
}  // namespace kestrel::data
