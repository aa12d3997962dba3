// load_safetensors on an arbitrary file (the weights files users hand to --weights): a kestrel::Error
// naming the file, or tensors that the file really holds: each one's bytes inside the data section, no
// two overlapping, none larger than the file (a lying header must not make kestrel allocate).
// Inputs starting with '{' are a header JSON alone (fuzz_util.h). Seeds: files written by save_safetensors
// (make_safetensors_seeds: all dtypes, metadata, empty tensors) and header.json (zero-size tensors).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "kestrel/core/safetensors.h"

using namespace kestrel;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  at::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::scratch_file("safetensors", ".safetensors");
  fuzz::write_safetensors_input(path, data, size);
  fuzz::expect_kestrel_errors_only(path, [&] {
    const SafetensorsContents c = load_safetensors(path);
    uint64_t total = 0;
    for (const auto& [key, t] : c.tensors) {
      if (!t.defined() || !t.is_contiguous() || t.device() != at::kCPU) fuzz::finding("tensor '" + key + "' not a contiguous CPU tensor");
      const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
      total += bytes;
      if (bytes > size) fuzz::finding("tensor '" + key + "' larger than the file");
    }
    if (total > size) fuzz::finding("tensors larger than the file together");
  });
  return 0;
}
