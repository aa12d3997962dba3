#include "kestrel/eval/feature_maps.h"

#include <algorithm>
#include <fstream>

#include <ATen/ATen.h>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "kestrel/core/error.h"
#include "kestrel/eval/plot_canvas.h"

namespace kestrel::eval {

std::string feature_module_type(const std::string& yaml_module, bool repeated) {
  if (repeated) return "Sequential";
  const size_t dot = yaml_module.rfind('.');
  return dot == std::string::npos ? yaml_module : yaml_module.substr(dot + 1);
}

void write_npy_float32(const std::string& path, const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kCPU, at::kFloat).contiguous();
  std::string shape = "(";
  for (int64_t d = 0; d < c.dim(); ++d) shape += std::to_string(c.size(d)) + (c.dim() == 1 || d + 1 < c.dim() ? "," : "");
  shape += ")";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  // magic (6) + version (2) + header length (2) + header + padding + '\n', a multiple of 64 bytes
  const size_t unpadded = 10 + header.size() + 1;
  header += std::string((64 - unpadded % 64) % 64, ' ') + "\n";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(path, ": cannot write");
  const auto n = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(static_cast<char>(n & 0xff)).put(static_cast<char>(n >> 8));
  out << header;
  out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  if (!out) fail(path, ": write failed");
}

std::string save_feature_maps(const at::Tensor& x, const std::string& module_type, int64_t stage, const std::string& dir,
                              int64_t max_channels) {
  if (module_type.find("Detect") != std::string::npos || x.dim() != 4) return "";
  const int64_t channels = x.size(1), h = x.size(2), w = x.size(3);
  if (h <= 1 || w <= 1) return "";
  const std::string stem = dir + "/stage" + std::to_string(stage) + "_" + module_type + "_features";
  const at::Tensor first = x[0].detach().to(at::kCPU, at::kFloat).contiguous();  // [c, h, w]
  const int64_t n = std::min(max_channels, channels), rows = (n + 7) / 8;
  // Tiles of the map's aspect ratio, 8 to a row of ~1800 px, 4 px apart, on white (axes off).
  const int tile_w = 220, tile_h = std::max(1, static_cast<int>(tile_w * h / w)), gap = 4;
  cv::Mat grid(static_cast<int>(rows) * (tile_h + gap) + gap, 8 * (tile_w + gap) + gap, CV_8UC3, canvas::kWhite);
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor ch = first[i];
    const float lo = ch.min().item<float>(), hi = ch.max().item<float>();
    // imshow's default normalisation: the channel's own min..max onto the colour map (constant: its lowest colour)
    const at::Tensor scaled = hi > lo ? (ch - lo) / (hi - lo) * 255.0f : at::zeros_like(ch);
    const at::Tensor bytes = scaled.round().clamp(0, 255).to(at::kByte).contiguous();
    cv::Mat gray(static_cast<int>(h), static_cast<int>(w), CV_8UC1, const_cast<void*>(bytes.data_ptr()));
    cv::Mat coloured, tile;
    cv::applyColorMap(gray, coloured, cv::COLORMAP_VIRIDIS);
    cv::resize(coloured, tile, cv::Size(tile_w, tile_h), 0, 0, cv::INTER_NEAREST);
    const int r = static_cast<int>(i / 8), c = static_cast<int>(i % 8);
    tile.copyTo(grid(cv::Rect(gap + c * (tile_w + gap), gap + r * (tile_h + gap), tile_w, tile_h)));
  }
  canvas::save(grid, stem + ".png");
  write_npy_float32(stem + ".npy", first);
  return stem + ".png";
}

}  // namespace kestrel::eval
