// YAML files read as PyYAML reads upstream's, or refused: one document per file (an indented first key
// splits a file in two for yaml-cpp, where PyYAML fails), no key given twice (PyYAML keeps the last value,
// a yaml-cpp lookup the first), malformed text and missing files named with file and line.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "kestrel/core/yaml_file.h"
#include "test_support.h"

namespace kestrel {
namespace {

TEST(YamlFile, ReadsOneDocument) {
  const YAML::Node n = parse_yaml_text("lr0: 0.01\nnames:\n  0: person\n  1: bus\nanchors:\n  - [10, 13]\n", "h.yaml");
  EXPECT_DOUBLE_EQ(n["lr0"].as<double>(), 0.01);
  EXPECT_EQ(n["names"][1].as<std::string>(), "bus");
  EXPECT_TRUE(parse_yaml_text("", "e.yaml").IsNull());
  EXPECT_TRUE(parse_yaml_text("# only a comment\n", "c.yaml").IsNull());
  EXPECT_TRUE(parse_yaml_text("---\na: 1\n", "start.yaml").IsMap());  // an explicit start is one document
}

TEST(YamlFile, AnIndentedFirstKeyIsAnErrorAtTheLineWhereTheSecondDocumentStarts) {
  const std::string message =
      test::error_message([] { parse_yaml_text("  lr0: 0.01\nlrf: 0.01\nmosaic: 0.0\n", "hyp.yaml"); });
  EXPECT_NE(message.find("hyp.yaml:2: a second YAML document"), std::string::npos) << message;
  EXPECT_NE(test::error_message([] { parse_yaml_text("nc: 3\n---\nnc: 4\n", "two.yaml"); }).find("two.yaml:3:"),
            std::string::npos);
}

// Fuzzing finding: text after a top-level flow list ("[a],") made yaml-cpp's LoadAll return empty documents
// forever, allocating until memory ran out (a model YAML cut and pasted wrong hung `kestrel train`).
TEST(YamlFile, TextAfterATopLevelListIsAnErrorNotAHang) {
  const auto started = std::chrono::steady_clock::now();
  for (const char* text : {"[a],", "   [-1, 1, Conv, [64, 3, 1]],  # 62\n", "{a: 1},", "\"a\","}) {
    const std::string msg = test::error_message([&] { parse_yaml_text(text, "m.yaml"); });
    EXPECT_NE(msg.find("m.yaml:1: a second YAML document starts here"), std::string::npos) << text << ": " << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
}

// Python's text mode reads a lone \r as a line break (universal newlines); yaml-cpp did not: an old-Mac file
// was one line, its first comment swallowing the rest.
TEST(YamlFile, LoneCarriageReturnsBreakLinesAsInPython) {
  const YAML::Node n = parse_yaml_text("lr0: 0.01  # a comment\rlrf: 0.2\r\rmomentum: 0.9\r", "cr.yaml");
  EXPECT_DOUBLE_EQ(n["lrf"].as<double>(), 0.2);
  EXPECT_DOUBLE_EQ(n["momentum"].as<double>(), 0.9);
  const YAML::Node crlf = parse_yaml_text("a: 1\r\nb: 2\r\n", "crlf.yaml");
  EXPECT_EQ(crlf["b"].as<int>(), 2);
  EXPECT_NE(test::error_message([] { parse_yaml_text("a: 1\rb: 2\ra: 3\r", "dup.yaml"); }).find("dup.yaml:3:"), std::string::npos);
}

TEST(YamlFile, AKeyGivenTwiceIsAnErrorNamingBothLines) {
  std::string message = test::error_message([] { parse_yaml_text("train: a\nval: b\nnc: 2\nval: c\n", "d.yaml"); });
  EXPECT_NE(message.find("d.yaml:4: 'val' is given twice (also on line 2)"), std::string::npos) << message;
  // Nested mappings, also inside sequences (a names map, a layer's arguments).
  message = test::error_message([] { parse_yaml_text("names:\n  5: bus\n  6: car\n  5: van\n", "n.yaml"); });
  EXPECT_NE(message.find("n.yaml:4: '5' is given twice (also on line 2)"), std::string::npos) << message;
  message = test::error_message([] { parse_yaml_text("list:\n  - {a: 1, a: 2}\n", "s.yaml"); });
  EXPECT_NE(message.find("s.yaml:2: 'a' is given twice"), std::string::npos) << message;
  // The same key in two different mappings is fine.
  EXPECT_NO_THROW(parse_yaml_text("a: {x: 1}\nb: {x: 2}\n", "ok.yaml"));
}

// Nine nested aliases of nine entries each stand for 387 million values: the duplicate check does not
// walk them all (it would take minutes).
TEST(YamlFile, AnAliasBombIsReadWithoutWalkingIt) {
  const std::string bomb = test::yaml_alias_bomb(9);
  const auto start = std::chrono::steady_clock::now();
  const YAML::Node n = parse_yaml_text(bomb, "bomb.yaml");
  EXPECT_TRUE(n["a9"].IsSequence());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

// Expected texts: Python 3's yaml.safe_dump({'k': v}) for each v (PyYAML 6).
TEST(YamlFile, FloatsAsPyYamlWritesThem) {
  EXPECT_EQ(yaml_float(0.01), "0.01");
  EXPECT_EQ(yaml_float(5e-05), "5.0e-05");
  EXPECT_EQ(yaml_float(1.5e-05), "1.5e-05");
  EXPECT_EQ(yaml_float(0.0001), "0.0001");
  EXPECT_EQ(yaml_float(0.00012), "0.00012");
  EXPECT_EQ(yaml_float(3.0), "3.0");
  EXPECT_EQ(yaml_float(0.0), "0.0");
  EXPECT_EQ(yaml_float(-0.5), "-0.5");
  EXPECT_EQ(yaml_float(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(yaml_float(1e16), "1.0e+16");
  EXPECT_EQ(yaml_float(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(yaml_float(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(yaml_float(std::nan("")), ".nan");
  EXPECT_EQ(yaml_float(-HUGE_VAL), "-.inf");
  // and each reads back as the same number
  for (double v : {0.01, 5e-05, 0.1 + 0.2, 1e16, 0.98765432109876})
    EXPECT_EQ(parse_yaml_text("k: " + yaml_float(v) + "\n", "x.yaml")["k"].as<double>(), v);
}

TEST(YamlFile, MalformedAndMissingFilesAreNamed) {
  EXPECT_NE(test::error_message([] { parse_yaml_text("a: [1, 2\n", "m.yaml"); }).find("m.yaml:"), std::string::npos);
  test::TempDir dir;
  const std::string missing = dir.file("none.yaml");
  EXPECT_NE(test::error_message([&] { load_yaml_file(missing, "dataset"); }).find(missing + ": dataset file not found"),
            std::string::npos);
  EXPECT_NE(test::error_message([&] { load_yaml_file(dir.path(), "dataset"); }).find("is a directory"),
            std::string::npos);
  test::write_file(dir.file("dup.yaml"), "lr0: 0.01\nlr0: 0.5\n");
  EXPECT_NE(test::error_message([&] { load_yaml_file(dir.file("dup.yaml"), "hyperparameter"); })
                .find(dir.file("dup.yaml") + ":2: 'lr0' is given twice"),
            std::string::npos);
}

}  // namespace
}  // namespace kestrel
