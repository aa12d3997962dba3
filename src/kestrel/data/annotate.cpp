#include "kestrel/data/annotate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <ATen/ATen.h>
#include <opencv2/imgproc.hpp>

#include "kestrel/core/error.h"

namespace kestrel::data {

cv::Scalar palette_colour(int cls) {
  // ultralytics utils/plots.py Colors: 20 hex RGB colours, indexed modulo 20.
  static const unsigned kHex[] = {0xFF3838, 0xFF9D97, 0xFF701F, 0xFFB21D, 0xCFD231, 0x48F90A, 0x92CC17,
                                  0x3DDB86, 0x1A9334, 0x00D4BB, 0x2C99A8, 0x00C2FF, 0x344593, 0x6473FF,
                                  0x0018EC, 0x8438FF, 0x520085, 0xCB38FF, 0xFF95C8, 0xFF37C7};
  const int n = static_cast<int>(sizeof kHex / sizeof kHex[0]);
  const unsigned rgb = kHex[((cls % n) + n) % n];
  return {double(rgb & 0xFF), double((rgb >> 8) & 0xFF), double((rgb >> 16) & 0xFF)};
}

std::string class_label(const std::vector<std::string>& names, int cls) {
  return cls >= 0 && cls < static_cast<int>(names.size()) ? names[static_cast<size_t>(cls)] : std::to_string(cls);
}

void box_label(cv::Mat& bgr, const float box[4], const std::string& label, const cv::Scalar& colour, int line_width) {
  const int lw = std::max(line_width, 1);
  const cv::Point p1(static_cast<int>(box[0]), static_cast<int>(box[1])), p2(static_cast<int>(box[2]), static_cast<int>(box[3]));
  cv::rectangle(bgr, p1, p2, colour, lw, cv::LINE_AA);
  if (label.empty()) return;
  const int tf = std::max(lw - 1, 1);  // font thickness
  const double scale = lw / 3.0;
  const cv::Size text = cv::getTextSize(label, cv::FONT_HERSHEY_SIMPLEX, scale, tf, nullptr);
  const bool outside = p1.y - text.height >= 3;  // label above the box when it fits
  const cv::Point q2(p1.x + text.width, outside ? p1.y - text.height - 3 : p1.y + text.height + 3);
  cv::rectangle(bgr, p1, q2, colour, cv::FILLED, cv::LINE_AA);
  cv::putText(bgr, label, {p1.x, outside ? p1.y - 2 : p1.y + text.height + 2}, cv::FONT_HERSHEY_SIMPLEX, scale,
              cv::Scalar(255, 255, 255), tf, cv::LINE_AA);
}

void draw_detections(cv::Mat& bgr, const at::Tensor& boxes, const std::vector<std::string>& names,
                     const DrawOptions& options) {
  if (boxes.numel() > 0 && (boxes.dim() != 2 || boxes.size(1) != 6))
    fail("draw_detections: boxes have shape ", boxes.sizes(), ", expected [n, 6]");
  // Upstream Annotator(line_width=line_thickness): lw falls back to ~0.3% of the image's mean side when 0.
  const int lw = options.line_thickness > 0
                     ? options.line_thickness
                     : std::max(static_cast<int>(std::nearbyint((bgr.rows + bgr.cols + 3) / 2.0 * 0.003)), 2);
  const at::Tensor b = boxes.to(at::kCPU, at::kFloat).contiguous();
  const float* v = b.data_ptr<float>();
  // Upstream draws in reversed order (for *xyxy, conf, cls in reversed(det)), so the most confident box is on top.
  for (int64_t i = b.numel() > 0 ? b.size(0) - 1 : -1; i >= 0; --i) {
    const float* r = v + i * 6;
    const int cls = static_cast<int>(r[5]);
    std::string label;
    if (!options.hide_labels) {
      char conf[32];
      std::snprintf(conf, sizeof conf, " %.2f", static_cast<double>(r[4]));
      label = class_label(names, cls) + (options.hide_conf ? "" : conf);
    }
    box_label(bgr, r, label, palette_colour(cls), lw);
  }
}

}  // namespace kestrel::data
