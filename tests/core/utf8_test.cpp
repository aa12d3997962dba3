// Dropping what is not UTF-8 as Python's bytes.decode('utf-8', errors='ignore') does (the independent
// reference: the project's Python on the same bytes), and YAML files with such bytes read as upstream.
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "kestrel/core/utf8.h"
#include "kestrel/core/yaml_file.h"
#include "test_support.h"

namespace kestrel {
namespace {

TEST(Utf8, HandCases) {
  EXPECT_EQ(drop_invalid_utf8("plain").text, "plain");
  EXPECT_EQ(drop_invalid_utf8("caf\xc3\xa9").text, "caf\xc3\xa9");  // é, valid
  const Utf8Text latin1 = drop_invalid_utf8("caf\xe9 au lait");     // Latin-1 é: a lead byte without its tail
  EXPECT_EQ(latin1.text, "caf au lait");
  EXPECT_EQ(latin1.dropped, 1u);
  EXPECT_EQ(latin1.first_invalid, 3u);
  EXPECT_EQ(drop_invalid_utf8("\xc0\xaf").text, "");            // overlong '/'
  EXPECT_EQ(drop_invalid_utf8("\xed\xa0\x80x").text, "x");      // a surrogate
  EXPECT_EQ(drop_invalid_utf8("\xf4\x90\x80\x80y").text, "y");  // above U+10FFFF
  EXPECT_EQ(drop_invalid_utf8("\xe2\x82z").text, "z");          // € cut short
}

// Random byte strings biased towards UTF-8's interesting bytes, compared with Python's decoder.
TEST(Utf8, AsPythonsDecoderWithErrorsIgnore) {
  std::mt19937 rng(5);
  const unsigned char interesting[] = {'a', 0x7F, 0x80, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEE,
                                       0xEF, 0xF0, 0xF1, 0xF4, 0xF5, 0xFF, 0x90, 0x8F};
  std::vector<std::string> cases;
  for (int k = 0; k < 400; ++k) {
    std::string s;
    const int n = std::uniform_int_distribution<int>(0, 12)(rng);
    for (int i = 0; i < n; ++i) s += static_cast<char>(interesting[rng() % sizeof interesting]);
    cases.push_back(s);
  }
  std::ostringstream script;
  script << "import sys\ncases = [";
  for (const std::string& s : cases) {
    script << "bytes([";
    for (unsigned char c : s) script << static_cast<int>(c) << ",";
    script << "]),";
  }
  script << "]\nfor c in cases:\n    print(c.decode('utf-8', errors='ignore').encode('utf-8').hex())\n";
  const test::CommandResult r = test::run_python(script.str());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  for (const std::string& s : cases) {
    std::string expected_hex;
    std::getline(lines, expected_hex);
    std::string hex;
    for (unsigned char c : drop_invalid_utf8(s).text) {
      const char* digits = "0123456789abcdef";
      hex += digits[c >> 4], hex += digits[c & 15];
    }
    EXPECT_EQ(hex, expected_hex);
  }
}

// A Latin-1 comment and class name: upstream's errors='ignore' drops the byte and trains.
TEST(Utf8, YamlWithBytesThatAreNotUtf8ReadsAsUpstream) {
  const YAML::Node n = parse_yaml_text("# mod\xe8le\nnames: ['caf\xe9', bus]\n", "d.yaml");
  EXPECT_EQ(n["names"][0].as<std::string>(), "caf");
  EXPECT_EQ(n["names"][1].as<std::string>(), "bus");
}

}  // namespace
}  // namespace kestrel
