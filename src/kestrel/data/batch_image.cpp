#include "kestrel/data/batch_image.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>

#include <ATen/ATen.h>
#include <opencv2/imgproc.hpp>

#include "kestrel/core/error.h"
#include "kestrel/data/annotate.h"

namespace kestrel::data {
namespace {

struct Grid {
  int64_t n;      // images drawn
  int ns;         // tiles per side
  int th, tw;     // tile size
  double scale;   // tile / batch image
  int line_width;
};

Grid grid_of(const Batch& batch, const BatchImageOptions& o) {
  Grid g{};
  g.n = std::min<int64_t>(batch.images.size(0), o.max_images);
  const int h = static_cast<int>(batch.images.size(2)), w = static_cast<int>(batch.images.size(3));
  g.ns = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(std::max<int64_t>(g.n, 1)))));
  g.scale = std::min(1.0, static_cast<double>(o.max_size) / g.ns / std::max(h, w));
  g.th = static_cast<int>(std::ceil(g.scale * h));
  g.tw = static_cast<int>(std::ceil(g.scale * w));
  const int fs = static_cast<int>((g.th + g.tw) * g.ns * 0.01);  // upstream's font size
  g.line_width = std::max(1, static_cast<int>(std::nearbyint(fs / 10.0)));
  return g;
}

// The boxes of one tile, already in tile pixels.
struct TileBox {
  float xyxy[4];
  int cls;
  float conf;  // < 0: a label (no confidence)
};

cv::Mat render(const Batch& batch, const std::vector<std::string>& names, const BatchImageOptions& o,
               const std::function<std::vector<TileBox>(int64_t, const Grid&)>& boxes_of) {
  if (!batch.images.defined() || batch.images.dim() != 4 || batch.images.size(1) != 3 || batch.images.scalar_type() != at::kByte)
    fail("render_batch: images must be [B, 3, H, W] uint8");
  const Grid g = grid_of(batch, o);
  const int h = static_cast<int>(batch.images.size(2)), w = static_cast<int>(batch.images.size(3));
  cv::Mat mosaic(g.ns * g.th, g.ns * g.tw, CV_8UC3, cv::Scalar(255, 255, 255));
  const at::Tensor images = batch.images.to(at::kCPU).contiguous();
  for (int64_t i = 0; i < g.n; ++i) {
    // CHW RGB planes -> HWC BGR tile
    uint8_t* base = images[i].data_ptr<uint8_t>();
    cv::Mat planes[3] = {cv::Mat(h, w, CV_8UC1, base + 2 * h * w), cv::Mat(h, w, CV_8UC1, base + h * w), cv::Mat(h, w, CV_8UC1, base)};
    cv::Mat bgr, tile;
    cv::merge(planes, 3, bgr);
    if (g.tw != w || g.th != h) cv::resize(bgr, tile, {g.tw, g.th}, 0, 0, cv::INTER_AREA);
    else tile = bgr;
    const cv::Rect where(static_cast<int>(i / g.ns) * g.tw, static_cast<int>(i % g.ns) * g.th, g.tw, g.th);
    tile.copyTo(mosaic(where));
  }
  for (int64_t i = 0; i < g.n; ++i) {
    const cv::Rect where(static_cast<int>(i / g.ns) * g.tw, static_cast<int>(i % g.ns) * g.th, g.tw, g.th);
    cv::rectangle(mosaic, where, cv::Scalar(255, 255, 255), 2);  // borders
    if (static_cast<size_t>(i) < o.paths.size()) {
      const std::string file = std::filesystem::path(o.paths[static_cast<size_t>(i)]).filename().string().substr(0, 40);
      const double scale = g.line_width / 3.0;
      const int tf = std::max(g.line_width - 1, 1);
      const cv::Size size = cv::getTextSize(file, cv::FONT_HERSHEY_SIMPLEX, scale, tf, nullptr);
      cv::putText(mosaic, file, {where.x + 5, where.y + 5 + size.height}, cv::FONT_HERSHEY_SIMPLEX, scale,
                  cv::Scalar(220, 220, 220), tf, cv::LINE_AA);
    }
    // Boxes are drawn on the whole grid: one near a tile's edge may reach into the next tile, as upstream's.
    for (TileBox b : boxes_of(i, g)) {
      b.xyxy[0] += static_cast<float>(where.x), b.xyxy[2] += static_cast<float>(where.x);
      b.xyxy[1] += static_cast<float>(where.y), b.xyxy[3] += static_cast<float>(where.y);
      char conf[16] = "";
      if (b.conf >= 0) std::snprintf(conf, sizeof conf, " %.1f", static_cast<double>(b.conf));
      box_label(mosaic, b.xyxy, class_label(names, b.cls) + conf, palette_colour(b.cls), g.line_width);
    }
  }
  return mosaic;
}

}  // namespace

cv::Rect batch_tile(const Batch& batch, int64_t i, const BatchImageOptions& options) {
  const Grid g = grid_of(batch, options);
  return {static_cast<int>(i / g.ns) * g.tw, static_cast<int>(i % g.ns) * g.th, g.tw, g.th};
}

cv::Mat render_batch(const Batch& batch, const std::vector<std::string>& names, const BatchImageOptions& options) {
  const at::Tensor targets = batch.targets.to(at::kCPU, at::kFloat).contiguous();
  const at::Tensor mask = batch.target_mask.to(at::kCPU, at::kBool).contiguous();
  return render(batch, names, options, [&](int64_t i, const Grid& g) {
    std::vector<TileBox> out;
    const auto* t = targets[i].data_ptr<float>();
    const auto* m = mask[i].data_ptr<bool>();
    for (int64_t k = 0; k < targets.size(1); ++k) {
      if (!m[k]) continue;
      const float* r = t + k * 5;  // class, cx, cy, w, h normalised
      const float tw = static_cast<float>(g.tw), th = static_cast<float>(g.th);
      out.push_back({{(r[1] - r[3] / 2) * tw, (r[2] - r[4] / 2) * th, (r[1] + r[3] / 2) * tw, (r[2] + r[4] / 2) * th},
                     static_cast<int>(r[0]), -1.0f});
    }
    return out;
  });
}

cv::Mat render_batch(const Batch& batch, const std::vector<at::Tensor>& predictions, const std::vector<std::string>& names,
                     const BatchImageOptions& options) {
  return render(batch, names, options, [&](int64_t i, const Grid& g) {
    std::vector<TileBox> out;
    if (static_cast<size_t>(i) >= predictions.size() || predictions[static_cast<size_t>(i)].numel() == 0) return out;
    const at::Tensor p = predictions[static_cast<size_t>(i)].to(at::kCPU, at::kFloat).contiguous();
    if (p.dim() != 2 || p.size(1) != 6) fail("render_batch: predictions have shape ", p.sizes(), ", expected [n, 6]");
    const float* v = p.data_ptr<float>();
    const float s = static_cast<float>(g.scale);
    for (int64_t k = 0; k < p.size(0); ++k) {
      const float* r = v + k * 6;
      if (!(r[4] > options.conf_thres)) continue;
      out.push_back({{r[0] * s, r[1] * s, r[2] * s, r[3] * s}, static_cast<int>(r[5]), r[4]});
    }
    return out;
  });
}

}  // namespace kestrel::data
