// repr(float) as Python writes it: hand cases, and random doubles of every magnitude against the project's
// Python (the reference).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

#include "kestrel/core/python_repr.h"
#include "test_support.h"

namespace kestrel {
namespace {

// Python's `expression` of each value (as v, bit for bit), one line each.
std::string python_lines(const std::vector<double>& values, const std::string& expression) {
  std::ostringstream script;
  script << "import struct\nfor h in '''";
  for (double v : values) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof v);
    script << std::hex << bits << "\n";
  }
  script << "'''.split():\n    v = struct.unpack('<d', int(h, 16).to_bytes(8, 'little'))[0]\n    print(" << expression << ")\n";
  const test::CommandResult r = test::run_python(script.str());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

TEST(PythonRepr, HandCases) {
  EXPECT_EQ(python_float_repr(1.0), "1.0");
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(5e-05), "5e-05");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
  EXPECT_EQ(python_float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(python_float_repr(std::nan("")), "nan");
  EXPECT_EQ(python_float_repr(-HUGE_VAL), "-inf");
}

TEST(PythonRepr, AsPythonOnRandomDoubles) {
  std::mt19937_64 rng(4);
  std::vector<double> values;
  for (int i = 0; i < 3000; ++i) {
    uint64_t bits = rng();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    if (!std::isfinite(v)) continue;
    values.push_back(v);
    values.push_back(std::ldexp(static_cast<double>(rng() % 100000), -static_cast<int>(rng() % 40)));  // short decimals
  }
  std::istringstream lines(python_lines(values, "repr(v)"));
  int wrong = 0;
  for (double v : values) {
    std::string expected;
    std::getline(lines, expected);
    if (python_float_repr(v) != expected && ++wrong < 10) ADD_FAILURE() << python_float_repr(v) << " vs Python's " << expected;
  }
  EXPECT_EQ(wrong, 0);
}

// '%20.5g' % v and '%.5g' % v (results.csv, evolve.csv) against Python's, a NaN with its sign bit set included.
TEST(PythonRepr, PercentGAsPython) {
  const std::vector<double> values = {0.0, -0.0, 1.0, 0.1, 123456.0, 1234567.0, 1e-5, 0.00012345678, -2.5, 99999.5,
                                      std::nan(""), -std::nan(""), HUGE_VAL, -HUGE_VAL, 3.0e300};
  std::istringstream lines(python_lines(values, "'%20.5g' % v + '|' + '%.5g' % v"));
  for (double v : values) {
    std::string expected;
    std::getline(lines, expected);
    EXPECT_EQ(python_percent_g(v, 5, 20) + "|" + python_percent_g(v, 5), expected);
  }
}

TEST(CsvRow, CellsAreTrimmedAndEmptyCellsKept) {
  EXPECT_EQ(split_csv_row("  epoch,  train/box_loss\r"), (std::vector<std::string>{"epoch", "train/box_loss"}));
  EXPECT_EQ(split_csv_row("1,,\t2 ,"), (std::vector<std::string>{"1", "", "2", ""}));
  EXPECT_EQ(split_csv_row(""), (std::vector<std::string>{""}));
}

// repr(s) for names with quotes, backslashes, control characters and printable UTF-8, against Python's.
TEST(PythonRepr, StringsAsPythonRepr) {
  const std::vector<std::string> names = {"person", "it's", "say \"hi\"", "both ' and \"", "back\\slash", "tab\tnew\nline\r",
                                          "bell\x07" "del\x7f", "caf\xc3\xa9", "\xe8\xa1\x8c\xe4\xba\xba", ""};
  std::ostringstream script;
  script << "import sys\nfor h in [";
  for (const std::string& n : names) {
    script << "'";
    for (unsigned char c : n) script << std::hex << (c >> 4) << (c & 15);
    script << "',";
  }
  script << "]:\n    sys.stdout.buffer.write(repr(bytes.fromhex(h).decode('utf-8')).encode('utf-8') + b'\\n')\n";
  const test::CommandResult r = test::run_python(script.str());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  for (const std::string& n : names) {
    std::string expected;
    std::getline(lines, expected);
    EXPECT_EQ(python_str_repr(n), expected);
  }
}

}  // namespace
}  // namespace kestrel
