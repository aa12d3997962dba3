// Lower-casing for the names kestrel compares without regard to case: file extensions (upstream's
// IMG_FORMATS and VID_FORMATS checks), flag values (--optimizer, --include), device names, URL schemes.
#pragma once
#include <cctype>
#include <string>

namespace kestrel {

// `s` with its ASCII letters in lower case; other bytes (UTF-8 included) unchanged.
inline std::string ascii_lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace kestrel
