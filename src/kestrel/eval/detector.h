// Inference on single images, YOLOv5 v7.0 detect.py's procedure: decode, letterbox to the network size
// with minimal padding (auto: pad only to a multiple of the largest stride, enlarging allowed), one
// image per forward pass, NMS at conf 0.25 / IoU 0.45 / max_det 1000, boxes scaled back to the original
// image. Also the pieces detect.py writes with: label-file lines and the per-image summary.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <opencv2/core.hpp>

#include "kestrel/eval/nms.h"
#include "kestrel/models/yolo_model.h"

namespace kestrel::eval {

struct DetectorOptions {
  int img_height = 640, img_width = 640;  // --imgsz; rounded up to a multiple of the largest stride
  NmsOptions nms = [] {
    NmsOptions o;  // detect.py defaults
    o.conf_thres = 0.25;
    o.iou_thres = 0.45;
    o.max_det = 1000;
    return o;
  }();
  bool half = false;  // fp16 autocast on CUDA (detect.py --half); ignored on the CPU
  bool augment = false;  // detect.py --augment: test-time augmentation (test_time_augment.h)
};

struct Detections {
  // [n, 6] x1, y1, x2, y2, conf, cls: original-image pixels rounded to whole pixels (as detect.py), float32,
  // CPU, conf descending
  at::Tensor boxes;
  cv::Size input_size;  // the letterboxed network input (w, h), e.g. 640 x 480 for a 640 x 480 photo at 640
};

// detect.py's scale_boxes without ratio_pad: the gain and padding are recomputed from the two shapes,
// gain = min(input.h / original.h, input.w / original.w), pad = (input - original * gain) / 2 per axis,
// then boxes (x - pad.x) / gain, (y - pad.y) / gain, clipped to the original image. boxes [n, >= 4]
// (columns 4.. untouched); returns a new tensor.
at::Tensor scale_boxes_to_original(const at::Tensor& boxes, cv::Size input, cv::Size original);

// The step both scale_boxes variants share (detect's above, val's with the letterbox's own ratio_pad): boxes
// [n, >= 4] xyxy in network-input pixels -> (x - pad_x) / gain, (y - pad_y) / gain, clipped to `original`
// (columns 4.. untouched); returns a new tensor.
at::Tensor unletterbox_boxes(const at::Tensor& boxes, double gain, double pad_x, double pad_y, cv::Size original);

// Runs one model on one image at a time. The model is moved to `device`, put in eval mode and fused
// (BN folded; as upstream's DetectMultiBackend does) on construction.
class Detector {
 public:
  Detector(std::shared_ptr<models::YoloModel> model, const c10::Device& device, DetectorOptions options);

  // bgr: H x W x 3 CV_8UC3 as decode_image returns it. visualize_dir (detect --visualize): when not empty,
  // every body layer's output is written there by save_feature_maps (feature_maps.h); not with --augment,
  // as upstream, whose augmented forward takes no visualize.
  Detections detect(const cv::Mat& bgr, const std::string& visualize_dir = "");

  // One forward pass on a zero image of the network size on accelerators (upstream's model.warmup),
  // so the first image's time is not the cuDNN autotuning time. Not counted in the timings.
  void warmup();

  int stride() const { return stride_; }
  cv::Size network_size() const { return {options_.img_width, options_.img_height}; }  // after rounding
  // Milliseconds summed over detect() calls: pre-process (letterbox, to tensor, to device), inference, NMS.
  const std::array<double, 3>& total_ms() const { return total_ms_; }
  double last_inference_ms() const { return last_inference_ms_; }
  int64_t images() const { return images_; }

 private:
  std::shared_ptr<models::YoloModel> model_;
  c10::Device device_;
  DetectorOptions options_;
  int stride_;
  std::array<double, 3> total_ms_{0, 0, 0};
  double last_inference_ms_ = 0;
  int64_t images_ = 0;
};

// The box columns of a label line: YOLOv5 detect.py's --save-format 0 (YOLO: cx cy w h) or 1 (Pascal-VOC
// corners x1 y1 x2 y2), both normalised by the image's width and height.
enum class LabelFormat { yolo = 0, pascal_voc = 1 };

// One line of a label file for a detection row [6] in original pixels of an image of size `original`:
// "cls cx cy w h" normalised (plus " conf" with save_conf), each number as Python's '%g' (6 significant
// digits, no trailing zeros), as detect.py --save-txt [--save-conf]; "cls x1 y1 x2 y2 [conf]" with
// LabelFormat::pascal_voc.
std::string label_line(const at::Tensor& row, cv::Size original, bool save_conf,
                       LabelFormat format = LabelFormat::yolo);

// YOLOv5 detect.py --save-csv's predictions.csv: this header, then a row per detection (image file name,
// class name, confidence as '%.2f'), written as Python's csv module does (excel dialect): a field holding a
// comma, a double quote, CR or LF is put in double quotes with its quotes doubled; rows end in "\r\n".
inline constexpr const char* kPredictionsCsvHeader = "Image Name,Prediction,Confidence\r\n";
std::string predictions_csv_row(const std::string& image_name, const std::string& prediction, float confidence);
// The image name predictions.csv gives the frames of a camera or stream: detect.py's
// Path(clean_str(source)).name, clean_str making each of "|@#!¡·$€%&()=?¿^*;:,¨´><+" an underscore
// ("rtsp://host/live" -> "live", "http://h/watch?v=x" -> "watch_v_x", "0" -> "0").
std::string stream_csv_name(const std::string& source);

// detect.py --save-crop's region (save_one_box, gain 1.02, pad 10, not square) for a detection row [6] in
// original pixels: the box's width and height times gain plus pad about its centre, corners truncated
// toward zero as torch's .long(), clipped to the image. Computed in float32 as upstream's tensors. May be
// empty (a box squeezed against an edge).
cv::Rect crop_region(const at::Tensor& row, cv::Size image, float gain = 1.02f, float pad = 10.0f);

// The crops/<class name>/ folder of --save-crop for class `cls`. Names come from the weights file, so a
// name is made one harmless path component: '/' becomes '_', and "", "." and ".." become the class number
// (a name "../../x" would otherwise put crops outside the run folder). Beyond `names`: the number.
std::string crop_folder_name(const std::vector<std::string>& names, size_t cls);

// detect.py's per-image summary: "2 persons, 1 tie, " (classes in ascending index order, a plain "s"
// for plurals), or "(no detections), ".
std::string summarize_detections(const at::Tensor& boxes, const std::vector<std::string>& names);

// The annotated image: data::draw_detections (data/annotate.h), the drawing shared with the batch mosaics.

}  // namespace kestrel::eval
