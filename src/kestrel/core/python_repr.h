// Numbers as Python writes them, where upstream's files carry Python's text: repr(float) (json.dump, str() of
// a dict) and PyYAML's variant of it (yaml.safe_dump).
#pragma once
#include <string>

namespace kestrel {

// repr(v): the shortest digits that read back as v, fixed notation for decimal exponents -4 .. 15 (always with
// a point: "3.0"), else d.ddde±XX ("5e-05", "1.5e+16"); "nan", "inf", "-inf".
std::string python_float_repr(double v);

}  // namespace kestrel
