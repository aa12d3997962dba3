#include "kestrel/eval/detector.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include <ATen/ATen.h>
#include <opencv2/imgproc.hpp>
#include <torch/csrc/autograd/grad_mode.h>

#include "kestrel/core/device.h"
#include "kestrel/core/error.h"
#include "kestrel/data/augment.h"
#include "kestrel/eval/feature_maps.h"
#include "kestrel/eval/test_time_augment.h"
#include "kestrel/models/common.h"

namespace kestrel::eval {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

int round_up(int x, int multiple) { return (x + multiple - 1) / multiple * multiple; }

// Python's '%g' % x: C's %g is the same format (6 significant digits, trailing zeros removed).
std::string format_g(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

}  // namespace

at::Tensor scale_boxes_to_original(const at::Tensor& boxes, cv::Size input, cv::Size original) {
  if (boxes.dim() != 2 || boxes.size(1) < 4) fail("scale_boxes_to_original: boxes must be [n, >= 4]");
  if (boxes.size(0) == 0) return boxes.clone();
  // Upstream recomputes the gain from the shapes rather than taking letterbox's ratio; with auto padding
  // the padded side's ratio is the larger one, so the minimum is the resize gain (up to letterbox's
  // rounding of the resized size), and the padding is split evenly (not letterbox's integer split).
  const double gain = std::min(double(input.height) / original.height, double(input.width) / original.width);
  const double pad_x = (input.width - original.width * gain) / 2, pad_y = (input.height - original.height * gain) / 2;
  return unletterbox_boxes(boxes, gain, pad_x, pad_y, original);
}

at::Tensor unletterbox_boxes(const at::Tensor& boxes, double gain, double pad_x, double pad_y, cv::Size original) {
  at::Tensor out = boxes.clone();
  out.select(1, 0).sub_(pad_x);
  out.select(1, 2).sub_(pad_x);
  out.select(1, 1).sub_(pad_y);
  out.select(1, 3).sub_(pad_y);
  out.slice(1, 0, 4).div_(gain);
  out.select(1, 0).clamp_(0, original.width);
  out.select(1, 2).clamp_(0, original.width);
  out.select(1, 1).clamp_(0, original.height);
  out.select(1, 3).clamp_(0, original.height);
  return out;
}

Detector::Detector(std::shared_ptr<models::YoloModel> model, const c10::Device& device, DetectorOptions options)
    : model_(std::move(model)), device_(device), options_(std::move(options)) {
  if (!model_) fail("Detector: no model");
  if (options_.img_height <= 0 || options_.img_width <= 0)
    fail("--imgsz must be positive, got ", options_.img_height, "x", options_.img_width);
  // DetectMultiBackend's stride: the model's largest, at least 32; check_img_size rounds the size up to it.
  stride_ = static_cast<int>(std::max<int64_t>(model_->max_stride(), 32));
  options_.img_height = round_up(options_.img_height, stride_);
  options_.img_width = round_up(options_.img_width, stride_);
  model_->eval();
  model_->fuse();
  model_->to(device_);
}

void Detector::warmup() {
  if (device_.is_cpu()) return;  // upstream warms up accelerators only
  torch::NoGradGuard no_grad;
  AutocastGuard autocast(device_.type(), at::kHalf, options_.half && device_.is_cuda());
  model_->predict(at::zeros({1, 3, options_.img_height, options_.img_width},
                            at::TensorOptions().dtype(at::kFloat).device(device_)));
  synchronize(device_);
}

Detections Detector::detect(const cv::Mat& bgr, const std::string& visualize_dir) {
  if (bgr.empty() || bgr.type() != CV_8UC3) fail("Detector::detect: the image must be 8-bit BGR (CV_8UC3)");
  torch::NoGradGuard no_grad;
  data::LetterboxOptions lo;
  lo.auto_pad = true;  // detect.py's LoadImages: minimal padding to a stride multiple
  lo.stride = stride_;
  const data::Letterbox lb = data::letterbox(bgr, options_.img_height, options_.img_width, lo);
  // detect.py's pre-process time starts after its loader's letterbox: the copy to the device and scaling.
  auto t = Clock::now();
  cv::Mat hwc = lb.image.isContinuous() ? lb.image : lb.image.clone();
  const int h = hwc.rows, w = hwc.cols;
  // [h, w, 3] uint8 BGR -> [1, 3, h, w] float RGB in 0..1; the uint8 image travels, the float is made there.
  at::Tensor image = at::from_blob(hwc.data, {h, w, 3}, at::kByte).to(device_);
  image = image.flip({2}).permute({2, 0, 1}).unsqueeze(0).to(at::kFloat).div_(255).contiguous();
  synchronize(device_);
  total_ms_[0] += ms_since(t);

  t = Clock::now();
  at::Tensor prediction;  // [1, N, nc + 5]
  {
    AutocastGuard autocast(device_.type(), at::kHalf, options_.half && device_.is_cuda());
    struct ObserverReset {
      models::YoloModel& model;
      ~ObserverReset() { model.set_layer_observer(nullptr); }
    } reset{*model_};
    if (!visualize_dir.empty() && !options_.augment) {
      const auto& info = model_->layer_info();
      const auto& layers = model_->layers();
      model_->set_layer_observer([&](size_t i, const at::Tensor& y) {
        const bool repeated = dynamic_cast<const models::Repeat*>(layers[i].get()) != nullptr;
        const std::string png = save_feature_maps(y, feature_module_type(info[i].module, repeated), static_cast<int64_t>(i), visualize_dir);
        if (!png.empty())
          std::printf("Saving %s... (%lld/%lld)\n", png.c_str(), static_cast<long long>(std::min<int64_t>(32, y.size(1))),
                      static_cast<long long>(y.size(1)));
      });
    }
    prediction = (options_.augment ? predict_augmented(*model_, image) : model_->predict(image)).to(at::kFloat);
  }
  synchronize(device_);
  last_inference_ms_ = ms_since(t);
  total_ms_[1] += last_inference_ms_;

  t = Clock::now();
  at::Tensor kept = non_max_suppression(prediction, options_.nms)[0].to(at::kCPU);
  total_ms_[2] += ms_since(t);
  ++images_;
  at::Tensor boxes = scale_boxes_to_original(kept, {w, h}, bgr.size());
  // detect.py rounds the corners to whole pixels (scale_boxes(...).round(), half to even) before it writes
  // labels, crops and draws them.
  boxes.slice(1, 0, 4).round_();
  return {boxes, {w, h}};
}

std::string crop_folder_name(const std::vector<std::string>& names, size_t cls) {
  if (cls >= names.size() || names[cls].empty() || names[cls] == "." || names[cls] == "..") return std::to_string(cls);
  std::string name = names[cls];
  std::replace(name.begin(), name.end(), '/', '_');
  return name;
}

std::string label_line(const at::Tensor& row, cv::Size original, bool save_conf, LabelFormat format) {
  // Upstream: (xyxy2xywh(xyxy) / gn), or (xyxy / gn) for Pascal-VOC, in float32 tensors, then '%g ' over
  // (cls, *coords[, conf]).
  const at::Tensor r = row.to(at::kCPU, at::kFloat).contiguous();
  if (r.numel() != 6) fail("label_line: a detection row has 6 values, got ", r.numel());
  const float* v = r.data_ptr<float>();
  const float gw = static_cast<float>(original.width), gh = static_cast<float>(original.height);
  const std::array<float, 4> values =
      format == LabelFormat::yolo
          ? std::array<float, 4>{(v[0] + v[2]) / 2 / gw, (v[1] + v[3]) / 2 / gh, (v[2] - v[0]) / gw, (v[3] - v[1]) / gh}
          : std::array<float, 4>{v[0] / gw, v[1] / gh, v[2] / gw, v[3] / gh};
  std::string line = format_g(v[5]);
  for (float x : values) line += " " + format_g(x);
  if (save_conf) line += " " + format_g(v[4]);
  return line;
}

namespace {
std::string csv_field(const std::string& field) {
  if (field.find_first_of(",\"\r\n") == std::string::npos) return field;
  std::string quoted = "\"";
  for (char c : field) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}
}  // namespace

std::string predictions_csv_row(const std::string& image_name, const std::string& prediction, float confidence) {
  char conf[32];
  std::snprintf(conf, sizeof conf, "%.2f", static_cast<double>(confidence));  // Python's f"{float(conf):.2f}"
  return csv_field(image_name) + "," + csv_field(prediction) + "," + conf + "\r\n";
}

// detect.py's p.name for a camera or stream: Path(clean_str(source)).name, clean_str making each of
// "|@#!¡·$€%&()=?¿^*;:,¨´><+" an underscore ("rtsp://host/live" -> "live", "http://h/watch?v=x" -> "watch_v_x").
std::string stream_csv_name(const std::string& source) {
  std::string cleaned;
  for (size_t i = 0; i < source.size(); ++i) {
    bool replaced = false;
    for (const char* wide : {"¡", "·", "€", "¿", "¨", "´"}) {  // UTF-8 sequences of clean_str's set
      const size_t n = std::char_traits<char>::length(wide);
      if (source.compare(i, n, wide) == 0) {
        cleaned += '_';
        i += n - 1;
        replaced = true;
        break;
      }
    }
    if (replaced) continue;
    const char c = source[i];
    cleaned += std::string("|@#!$%&()=?^*;:,><+").find(c) != std::string::npos ? '_' : c;
  }
  while (cleaned.size() > 1 && cleaned.back() == '/') cleaned.pop_back();  // pathlib drops a trailing slash
  const size_t slash = cleaned.find_last_of('/');
  return slash == std::string::npos ? cleaned : cleaned.substr(slash + 1);
}

cv::Rect crop_region(const at::Tensor& row, cv::Size image, float gain, float pad) {
  const at::Tensor r = row.to(at::kCPU, at::kFloat).contiguous();
  if (r.numel() < 4) fail("crop_region: a detection row starts with x1, y1, x2, y2");
  const float* v = r.data_ptr<float>();
  const float cx = (v[0] + v[2]) / 2, cy = (v[1] + v[3]) / 2;
  const float w = (v[2] - v[0]) * gain + pad, h = (v[3] - v[1]) * gain + pad;
  const auto corner = [](float x, int limit) { return std::clamp(static_cast<int>(std::trunc(x)), 0, limit); };
  const int x1 = corner(cx - w / 2, image.width), y1 = corner(cy - h / 2, image.height);
  const int x2 = corner(cx + w / 2, image.width), y2 = corner(cy + h / 2, image.height);
  return {x1, y1, std::max(x2 - x1, 0), std::max(y2 - y1, 0)};
}

std::string summarize_detections(const at::Tensor& boxes, const std::vector<std::string>& names) {
  if (boxes.size(0) == 0) return "(no detections), ";
  std::map<int64_t, int64_t> counts;  // class -> detections, ascending class as torch.unique
  const at::Tensor cls = boxes.select(1, 5).to(at::kCPU, at::kLong).contiguous();
  const int64_t* c = cls.data_ptr<int64_t>();
  for (int64_t i = 0; i < cls.size(0); ++i) ++counts[c[i]];
  std::string s;
  for (const auto& [k, n] : counts) {
    const std::string name = k >= 0 && k < static_cast<int64_t>(names.size()) ? names[k] : std::to_string(k);
    s += std::to_string(n) + " " + name + (n > 1 ? "s" : "") + ", ";
  }
  return s;
}

}  // namespace kestrel::eval
