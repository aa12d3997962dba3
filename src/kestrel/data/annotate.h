// Boxes with class labels, drawn as upstream's Annotator (ultralytics/yolov5 v7.0 utils/plots.py, its cv2
// path) in its Colors palette. The one box drawing of kestrel: detect's annotated images and videos, the
// batch mosaics (train_batch0.jpg, val_batch<i>_labels/pred.jpg) and labels.jpg all use it, so a class
// has the same colour everywhere.
#pragma once
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <opencv2/core.hpp>

namespace kestrel::data {

// Upstream's Colors palette (20 ultralytics hex colours, indexed modulo 20), as BGR.
cv::Scalar palette_colour(int cls);

// names[cls], or the number when the class has no name.
std::string class_label(const std::vector<std::string>& names, int cls);

// Annotator.box_label: a box (x1, y1, x2, y2 in pixels of `bgr`) of line width `line_width` and, when
// `label` is not empty, the label in white on a filled box of the same colour above the box's top-left
// corner (inside it when there is no room above). Font scale line_width / 3, as upstream.
void box_label(cv::Mat& bgr, const float box[4], const std::string& label, const cv::Scalar& colour, int line_width);

struct DrawOptions {
  int line_thickness = 3;  // detect.py --line-thickness (0: ~0.3% of the image's mean side, upstream's default)
  bool hide_labels = false, hide_conf = false;
};

// detect.py's annotation: every row of `boxes` [n, 6] (x1, y1, x2, y2, conf, cls in pixels of `bgr`)
// with "name 0.87" labels, in place; drawn least confident first so the most confident box is on top.
void draw_detections(cv::Mat& bgr, const at::Tensor& boxes, const std::vector<std::string>& names,
                     const DrawOptions& options = {});

}  // namespace kestrel::data
