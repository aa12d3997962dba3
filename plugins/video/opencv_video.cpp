// libkestrel_video.so: kestrel's video backend (data/video_io.h) on OpenCV's videoio. Loaded by kestrel at
// run time, so that the kestrel binary itself does not depend on videoio's large closure (FFmpeg ...).
// Only the interface header is shared with the engine; nothing here throws across the boundary.
#include <opencv2/core/utils/logger.hpp>
#include <opencv2/videoio.hpp>

#include "kestrel/data/video_io.h"

namespace {

using kestrel::data::VideoBackend;
using kestrel::data::VideoReader;
using kestrel::data::VideoWriter;

// videoio tries its backends in turn and logs every refusal (GStreamer, image sequences ...) as an error;
// kestrel reports the one failure itself, naming the file, so the backends are quiet while opening.
class QuietLog {
 public:
  QuietLog() : previous_(cv::utils::logging::setLogLevel(cv::utils::logging::LOG_LEVEL_SILENT)) {}
  ~QuietLog() { cv::utils::logging::setLogLevel(previous_); }

 private:
  cv::utils::logging::LogLevel previous_;
};

class OpenCvReader final : public VideoReader {
 public:
  explicit OpenCvReader(cv::VideoCapture cap) : cap_(std::move(cap)) {}
  bool read(cv::Mat& bgr) override {
    try {
      return cap_.read(bgr) && !bgr.empty();
    } catch (const cv::Exception&) {
      return false;  // a corrupt frame ends the video, as upstream's loop
    }
  }
  double fps() const override { return cap_.get(cv::CAP_PROP_FPS); }
  int64_t frame_count() const override {
    const double n = cap_.get(cv::CAP_PROP_FRAME_COUNT);
    return n > 0 ? static_cast<int64_t>(n) : 0;
  }

 private:
  mutable cv::VideoCapture cap_;
};

class OpenCvWriter final : public VideoWriter {
 public:
  OpenCvWriter(cv::VideoWriter writer, cv::Size size) : writer_(std::move(writer)), size_(size) {}
  bool write(const cv::Mat& bgr) override {
    if (bgr.size() != size_ || bgr.type() != CV_8UC3) return false;
    writer_.write(bgr);
    return true;
  }

 private:
  cv::VideoWriter writer_;
  cv::Size size_;
};

class OpenCvBackend final : public VideoBackend {
 public:
  std::unique_ptr<VideoReader> open(const std::string& source, std::string& error) override {
    try {
      const QuietLog quiet;
      cv::VideoCapture cap;
      const bool camera = !source.empty() && source.find_first_not_of("0123456789") == std::string::npos;
      const bool opened = camera ? cap.open(std::stoi(source)) : cap.open(source, cv::CAP_ANY);
      if (!opened || !cap.isOpened()) {
        error = camera ? "no camera with this index" : "not a video OpenCV can decode";
        return nullptr;
      }
      return std::make_unique<OpenCvReader>(std::move(cap));
    } catch (const std::exception& e) {
      error = e.what();
      return nullptr;
    }
  }
  std::unique_ptr<VideoWriter> create(const std::string& path, const std::string& fourcc, double fps, cv::Size size,
                                      std::string& error) override {
    try {
      const QuietLog quiet;
      const int code = cv::VideoWriter::fourcc(fourcc[0], fourcc[1], fourcc[2], fourcc[3]);
      cv::VideoWriter writer(path, code, fps > 0 ? fps : 30, size);
      if (!writer.isOpened()) {
        error = "no encoder for codec " + fourcc + " with this file type";
        return nullptr;
      }
      return std::make_unique<OpenCvWriter>(std::move(writer), size);
    } catch (const std::exception& e) {
      error = e.what();
      return nullptr;
    }
  }
};

}  // namespace

extern "C" __attribute__((visibility("default"))) VideoBackend* kestrel_video_backend() {
  static OpenCvBackend backend;
  return &backend;
}
