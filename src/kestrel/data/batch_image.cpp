#include "kestrel/data/batch_image.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <opencv2/imgproc.hpp>

namespace kestrel::data {
namespace {

cv::Scalar class_colour(int cls) {
  // A fixed, well-spread palette (golden-ratio hues), so a class has the same colour in every image.
  const double hue = std::fmod(cls * 0.618033988749895, 1.0) * 180.0;
  cv::Mat hsv(1, 1, CV_8UC3, cv::Scalar(hue, 200, 230)), bgr;
  cv::cvtColor(hsv, bgr, cv::COLOR_HSV2BGR);
  const auto c = bgr.at<cv::Vec3b>(0, 0);
  return {static_cast<double>(c[0]), static_cast<double>(c[1]), static_cast<double>(c[2])};
}

}  // namespace

cv::Mat render_batch(const Batch& batch, const std::vector<std::string>& names, int max_images) {
  const int64_t n = std::min<int64_t>(batch.images.size(0), max_images);
  const int h = static_cast<int>(batch.images.size(2)), w = static_cast<int>(batch.images.size(3));
  const int cols = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n))));
  const int rows = static_cast<int>((n + cols - 1) / cols);
  const double scale = std::min(1.0, 1920.0 / std::max(cols * w, rows * h));
  const int tw = static_cast<int>(w * scale), th = static_cast<int>(h * scale);
  cv::Mat grid(rows * th, cols * tw, CV_8UC3, cv::Scalar(255, 255, 255));
  at::Tensor images = batch.images.contiguous();
  at::Tensor targets = batch.targets.contiguous(), mask = batch.target_mask.contiguous();
  for (int64_t i = 0; i < n; ++i) {
    // CHW RGB planes -> HWC BGR tile
    uint8_t* base = images[i].data_ptr<uint8_t>();
    cv::Mat planes[3] = {cv::Mat(h, w, CV_8UC1, base + 2 * h * w), cv::Mat(h, w, CV_8UC1, base + h * w), cv::Mat(h, w, CV_8UC1, base)};
    cv::Mat bgr, tile;
    cv::merge(planes, 3, bgr);
    cv::resize(bgr, tile, {tw, th}, 0, 0, cv::INTER_AREA);
    const int x0 = static_cast<int>(i % cols) * tw, y0 = static_cast<int>(i / cols) * th;
    const auto* t = targets[i].data_ptr<float>();
    const auto* m = mask[i].data_ptr<bool>();
    for (int64_t k = 0; k < targets.size(1); ++k) {
      if (!m[k]) continue;
      const float* r = t + k * 5;
      const int cls = static_cast<int>(r[0]);
      const cv::Point p1(static_cast<int>((r[1] - r[3] / 2) * tw), static_cast<int>((r[2] - r[4] / 2) * th));
      const cv::Point p2(static_cast<int>((r[1] + r[3] / 2) * tw), static_cast<int>((r[2] + r[4] / 2) * th));
      cv::rectangle(tile, p1, p2, class_colour(cls), 2);
      const std::string label = cls >= 0 && cls < static_cast<int>(names.size()) ? names[cls] : std::to_string(cls);
      cv::putText(tile, label, {p1.x + 2, std::max(p1.y - 3, 10)}, cv::FONT_HERSHEY_SIMPLEX, 0.4, class_colour(cls), 1, cv::LINE_AA);
    }
    tile.copyTo(grid(cv::Rect(x0, y0, tw, th)));
    cv::rectangle(grid, cv::Rect(x0, y0, tw, th), cv::Scalar(255, 255, 255), 2);
  }
  return grid;
}

}  // namespace kestrel::data
