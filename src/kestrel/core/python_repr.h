// Numbers as Python writes them, where upstream's files carry Python's text: repr(float) (json.dump, str() of
// a dict) and PyYAML's variant of it (yaml.safe_dump).
#pragma once
#include <string>

namespace kestrel {

// repr(v): the shortest digits that read back as v, fixed notation for decimal exponents -4 .. 15 (always with
// a point: "3.0"), else d.ddde±XX ("5e-05", "1.5e+16"); "nan", "inf", "-inf".
std::string python_float_repr(double v);

// repr(s) of a str: single quotes unless the text holds one and no double quote; backslashes, the quote and
// ASCII control characters escaped (\n, \r, \t, \xNN); other characters, UTF-8 included, as they are
// (Python would escape non-printable Unicode too, e.g. \xa0).
std::string python_str_repr(const std::string& s);

}  // namespace kestrel
