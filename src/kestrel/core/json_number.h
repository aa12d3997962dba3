// Whole numbers read from JSON that a user's file may hold (weights headers, training state, caches):
// nlohmann's get<int64_t> would truncate 1.5, wrap 2^40 into a narrower type and make 1e300 undefined
// behaviour, so a value is taken only when it is a JSON integer inside the range the caller needs.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kestrel {

// v when it is a JSON integer within [min, max]; nullopt for anything else (a fraction, 1e300, a value out
// of range, not a number).
inline std::optional<int64_t> json_whole_number(const nlohmann::json& v, int64_t min, int64_t max) {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    x = static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    return std::nullopt;
  }
  if (x < min || x > max) return std::nullopt;
  return x;
}

// A value for messages: scalars and flat lists as JSON, cut at 60 characters; nested lists and objects by
// their kind (dump() recurses once per level: a deeply nested value in a crafted file overflowed the stack).
inline std::string json_shown(const nlohmann::json& value) {
  bool flat = value.is_primitive();
  if (value.is_array()) {
    flat = true;
    for (const auto& v : value) flat = flat && v.is_primitive();
  }
  if (!flat) return value.is_array() ? "a nested list" : "an object";
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

}  // namespace kestrel
