#include "kestrel/core/python_repr.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kestrel {

std::string python_percent_g(double v, int precision, int width) {
  char buf[128];
  if (std::isnan(v)) std::snprintf(buf, sizeof buf, "%*s", width, "nan");
  else std::snprintf(buf, sizeof buf, "%*.*g", width, precision, v);
  return buf;
}

std::vector<std::string> split_csv_row(const std::string& line) {
  std::vector<std::string> cells;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    const std::string cell = line.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t a = cell.find_first_not_of(" \t\r\n"), b = cell.find_last_not_of(" \t\r\n");
    cells.push_back(a == std::string::npos ? std::string() : cell.substr(a, b - a + 1));
    if (comma == std::string::npos) return cells;
    start = comma + 1;
  }
}

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // The shortest digits that read back as v, the closest such (Ryu; Python's repr uses Gay's dtoa to the same
  // end). Rounding the exact value to n digits is not enough: 2^-24 needs ...063e-08, its correct 16-digit
  // rounding ...062e-08 reads back as another double.
  char buf[64];
  const auto written = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string sci(buf, written.ptr);  // [-]d[.ddd]e[+-]XX
  const size_t e = sci.find('e');
  const int exponent = std::atoi(sci.c_str() + e + 1);
  const bool negative = sci[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {  // repr's fixed notation, always with a point
    if (exponent >= 0) {
      const size_t whole = static_cast<size_t>(exponent) + 1;
      if (digits.size() <= whole) out += digits + std::string(whole - digits.size(), '0') + ".0";
      else out += digits.substr(0, whole) + "." + digits.substr(whole);
    } else {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  std::snprintf(buf, sizeof buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + buf;
}


std::string python_str_repr(const std::string& s) {
  const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\' || c == static_cast<unsigned char>(quote)) out += '\\', out += static_cast<char>(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

}  // namespace kestrel
