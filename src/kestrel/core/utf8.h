// Text that must be UTF-8 (JSON metadata in weights and state files): files read as upstream reads them,
// Python's decode('utf-8', errors='ignore'), which drops every byte sequence that is not UTF-8.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kestrel {

struct Utf8Text {
  std::string text;              // the input without its invalid sequences
  size_t dropped = 0;            // bytes dropped
  size_t first_invalid = 0;      // offset of the first of them in the input (when dropped > 0)
};

// Drops each maximal invalid subpart (Unicode's "U+FFFD substitution of maximal subparts", as Python's
// decoder): an unexpected byte alone, a truncated sequence up to the byte that breaks it. Overlong forms,
// surrogates and code points above U+10FFFF are invalid.
inline Utf8Text drop_invalid_utf8(const std::string& in) {
  Utf8Text out;
  out.text.reserve(in.size());
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(in[i]); };
  size_t i = 0;
  while (i < in.size()) {
    const unsigned char b = byte(i);
    size_t need = 0;                       // continuation bytes after the lead
    unsigned char low = 0x80, high = 0xBF;  // allowed range of the first continuation byte
    if (b < 0x80) need = 0;
    else if (b >= 0xC2 && b <= 0xDF) need = 1;
    else if (b >= 0xE0 && b <= 0xEF) need = 2, low = b == 0xE0 ? 0xA0 : 0x80, high = b == 0xED ? 0x9F : 0xBF;
    else if (b >= 0xF0 && b <= 0xF4) need = 3, low = b == 0xF0 ? 0x90 : 0x80, high = b == 0xF4 ? 0x8F : 0xBF;
    else need = SIZE_MAX;                  // 0x80..0xC1, 0xF5..0xFF never start a character
    size_t ok = 0;                         // continuation bytes that fit
    if (need != SIZE_MAX)
      while (ok < need && i + 1 + ok < in.size()) {
        const unsigned char c = byte(i + 1 + ok);
        if (c < (ok == 0 ? low : 0x80) || c > (ok == 0 ? high : 0xBF)) break;
        ++ok;
      }
    if (need != SIZE_MAX && ok == need) {
      out.text.append(in, i, need + 1);
      i += need + 1;
      continue;
    }
    const size_t bad = need == SIZE_MAX ? 1 : 1 + ok;
    if (out.dropped == 0) out.first_invalid = i;
    out.dropped += bad;
    i += bad;
  }
  return out;
}

}  // namespace kestrel
