// What flows through the data pipeline before batching: one decoded image with its boxes.
// Images stay 8-bit BGR (OpenCV's order, as upstream) until the batch is assembled, where they
// become RGB CHW uint8; normalisation to 0..1 happens on the device.
#pragma once
#include <vector>

#include <opencv2/core.hpp>

namespace kestrel::data {

// One ground-truth box in pixel coordinates of the image it belongs to (corners, not centre/size).
struct Box {
  float cls = 0;
  float x1 = 0, y1 = 0, x2 = 0, y2 = 0;
};

// A polygon (instance outline) in pixels; datasets with polygon label rows carry one per box.
using Polygon = std::vector<cv::Point2f>;

struct Sample {
  cv::Mat image;                  // H x W x 3, CV_8UC3, BGR
  std::vector<Box> boxes;         // pixels, xyxy
  std::vector<Polygon> segments;  // empty, or one per box (same order)
};

}  // namespace kestrel::data
