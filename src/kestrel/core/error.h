// Errors users can act on: every message names the file (and where useful the line or layer) and the problem.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace kestrel {

// The one exception type kestrel throws for bad input (files, configs, flags). Caught in main(),
// printed as "error: <message>" with a non-zero exit code.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenates anything streamable: cat("layer ", 3, ": ", msg).
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(cat(parts...));
}

}  // namespace kestrel
