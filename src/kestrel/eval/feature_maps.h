// detect --visualize (upstream's feature_visualization): a layer's output for the first image of the batch
// as stage<i>_<Module>_features.png, a grid of its first 32 channels, 8 a row, each drawn with matplotlib's
// default colour map (viridis) over its own value range, and the whole [c, h, w] map as a float32 .npy.
#pragma once
#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

namespace kestrel::eval {

// upstream's module type: the YAML name after its last '.' ("nn.Upsample" -> "Upsample"), "Sequential" for a
// row repeated as several layers (number > 1 outside the CSP blocks that take the count themselves).
std::string feature_module_type(const std::string& yaml_module, bool repeated);

// x [b, c, h, w]. Writes nothing, and returns "", for the detection head or a map with h or w of 1 (as
// upstream); otherwise returns the PNG's path. dir must exist.
std::string save_feature_maps(const at::Tensor& x, const std::string& module_type, int64_t stage, const std::string& dir,
                              int64_t max_channels = 32);

// A float32 tensor as a NumPy .npy file (version 1.0, little-endian '<f4', C order).
void write_npy_float32(const std::string& path, const at::Tensor& t);

}  // namespace kestrel::eval
