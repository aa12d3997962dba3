// Numbers as Python writes them, where upstream's files carry Python's text: repr(float) (json.dump, str() of
// a dict) and PyYAML's variant of it (yaml.safe_dump).
#pragma once
#include <string>
#include <vector>

namespace kestrel {

// repr(v): the shortest digits that read back as v, fixed notation for decimal exponents -4 .. 15 (always with
// a point: "3.0"), else d.ddde±XX ("5e-05", "1.5e+16"); "nan", "inf", "-inf".
std::string python_float_repr(double v);

// repr(s) of a str: single quotes unless the text holds one and no double quote; backslashes, the quote and
// ASCII control characters escaped (\n, \r, \t, \xNN); other characters, UTF-8 included, as they are
// (Python would escape non-printable Unicode too, e.g. \xa0).
std::string python_str_repr(const std::string& s);

// Python's '%<width>.<precision>g' % v (results.csv's '%20.5g', evolve.csv's '%.5g'): C's %g, except that a
// NaN is "nan" whatever its sign bit (glibc writes "-nan"), right-aligned in `width`.
std::string python_percent_g(double v, int precision, int width = 0);

// The cells of one line of a results.csv or evolve.csv (comma-separated, no quoting), each without the
// spaces, tabs and line ends around it.
std::vector<std::string> split_csv_row(const std::string& line);

}  // namespace kestrel
