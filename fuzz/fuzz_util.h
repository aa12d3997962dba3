// Shared by the fuzz harnesses: a per-process scratch file and the "only kestrel::Error may escape" rule.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>
#include <typeinfo>

#include "kestrel/core/error.h"

namespace kestrel::fuzz {

// /tmp/kestrel-fuzz-<tag>-<pid><ext>, rewritten for every input (one per process, reused).
inline std::string scratch_file(const char* tag, const char* ext) {
  return std::string("/tmp/kestrel-fuzz-") + tag + "-" + std::to_string(::getpid()) + ext;
}

inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) {
    std::fprintf(stderr, "fuzz harness: cannot write %s\n", path.c_str());
    std::abort();
  }
}

// The safetensors-based harnesses: an input that starts with '{' is a header JSON alone, written after its
// 8-byte length (so that mutations of the JSON keep a well-formed file; tensors need data_offsets [0, 0]);
// any other input is the whole file.
inline void write_safetensors_input(const std::string& path, const uint8_t* data, size_t size) {
  if (size == 0 || data[0] != '{') return write_file(path, data, size);
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>(static_cast<uint64_t>(size) >> (8 * i));
  file.append(reinterpret_cast<const char*>(data), size);
  write_file(path, reinterpret_cast<const uint8_t*>(file.data()), file.size());
}

// A finding: a non-kestrel exception escaped, or an invariant of a successful parse does not hold.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "\n==== FINDING: %s\n", what.c_str());
  std::abort();
}

// Runs `call`; kestrel::Error is the expected outcome for bad input (its message must name `source`),
// anything else aborts so that libFuzzer records the input.
template <typename Call>
void expect_kestrel_errors_only(const std::string& source, Call&& call) {
  try {
    call();
  } catch (const kestrel::Error& e) {
    if (std::string(e.what()).find(source) == std::string::npos)
      finding(std::string("kestrel::Error without the file name: ") + e.what());
  } catch (const std::exception& e) {
    finding(std::string("non-kestrel exception ") + typeid(e).name() + ": " + e.what());
  } catch (...) {
    finding("non-std exception");
  }
}

}  // namespace kestrel::fuzz
