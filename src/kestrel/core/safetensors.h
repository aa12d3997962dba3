// safetensors: kestrel's weight format (no pickle, nothing executed on load).
// File = u64 little-endian header length N, N bytes of JSON {"name": {"dtype", "shape",
// "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the raw little-endian tensor bytes.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace kestrel {

struct SafetensorsContents {
  std::vector<std::pair<std::string, at::Tensor>> tensors;  // in file order (sorted by offset)
  std::map<std::string, std::string> metadata;
};

// Writes atomically (temporary file in the same folder, then rename): a crash never leaves a
// half-written file under `path`. Tensors are copied to CPU and made contiguous.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Validates everything before trusting it (header length, JSON, dtypes, shapes, offsets inside the
// file, sizes equal to shape x dtype, no overlaps); any problem is a kestrel::Error naming the file.
SafetensorsContents load_safetensors(const std::string& path);

}  // namespace kestrel
