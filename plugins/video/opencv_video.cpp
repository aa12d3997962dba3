// libkestrel_video.so: kestrel's OpenCV backend (data/video_io.h): video on OpenCV's videoio, and images in
// the formats kestrel does not decode itself (BMP, TIFF, WebP ...) on OpenCV's imgcodecs. Loaded by kestrel
// at run time, so that the kestrel binary itself does not depend on their large closures (FFmpeg, GDAL ...).
// Only the interface header is shared with the engine; nothing here throws across the boundary.
#include <limits>
#include <mutex>

#include <opencv2/core/utils/logger.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/videoio.hpp>

#include "kestrel/data/video_io.h"

namespace {

using kestrel::data::VideoBackend;
using kestrel::data::VideoReader;
using kestrel::data::VideoWriter;

// videoio tries its backends in turn and logs every refusal (GStreamer, image sequences ...) as an error;
// kestrel reports the one failure itself, naming the file, so OpenCV's log is quiet while the plugin works.
// Loader threads decode at the same time: the first one in silences the log and the last one out restores
// it (each saving and restoring on its own could leave it silent for good). OpenCV 4.6's imdecode writes why
// it could not read a header or the pixels to std::cerr, not to the log: that line stays (silencing cerr
// would silence kestrel's other threads too), followed by kestrel's error naming the file.
class QuietLog {
 public:
  QuietLog() {
    const std::lock_guard<std::mutex> lock(state().mutex);
    if (state().depth++ == 0) state().previous = cv::utils::logging::setLogLevel(cv::utils::logging::LOG_LEVEL_SILENT);
  }
  ~QuietLog() {
    const std::lock_guard<std::mutex> lock(state().mutex);
    if (--state().depth == 0) cv::utils::logging::setLogLevel(state().previous);
  }

 private:
  struct State {
    std::mutex mutex;
    int depth = 0;
    cv::utils::logging::LogLevel previous = cv::utils::logging::LOG_LEVEL_INFO;
  };
  static State& state() {
    static State s;
    return s;
  }
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
  bool skip() override {
    try {
      return cap_.grab();
    } catch (const cv::Exception&) {
      return false;
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
        // A URL (rtsp://, http://, ...) fails the same way whether the server refused, stalled or sent no video.
        const bool url = source.find("://") != std::string::npos;
        error = camera ? "no camera with this index"
                : url  ? "the stream could not be opened (connection refused or timed out, or not a video OpenCV can decode)"
                       : "not a video OpenCV can decode";
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
  bool decode_image(const uint8_t* data, size_t size, cv::Mat& bgr, std::string& error) override {
    try {
      const QuietLog quiet;
      if (size == 0 || size > static_cast<size_t>(std::numeric_limits<int>::max())) {
        error = size == 0 ? "empty file" : "a file over 2 GB (the most one cv::Mat row of bytes holds)";
        return false;
      }
      // imdecode reads the buffer without copying it or writing to it.
      const cv::Mat buffer(1, static_cast<int>(size), CV_8U, const_cast<uint8_t*>(data));
      bgr = cv::imdecode(buffer, cv::IMREAD_COLOR);
      return !bgr.empty();
    } catch (const cv::Exception& e) {
      // imdecode checks the header's size against imread's limits before allocating (an assertion).
      error = e.func == "validateInputImageSize" ? "its header claims more pixels than OpenCV's imread allows: at most 2^30, and 2^20 a side"
                                                 : e.err + " in " + e.func;
      return false;
    } catch (const std::exception& e) {
      error = e.what();
      return false;
    }
  }
};

}  // namespace

extern "C" __attribute__((visibility("default"))) VideoBackend* kestrel_video_backend() {
  static OpenCvBackend backend;
  return &backend;
}
