// Video files (and cameras) for kestrel detect through OpenCV's videoio, and images in the formats kestrel
// does not decode itself (BMP, TIFF, WebP ...) through OpenCV's imgcodecs. Their dependency closures
// (FFmpeg, GStreamer, GDAL, OpenEXR ...; about 280 MB) are too large to carry to the GPU machines, so they
// are not linked into kestrel: a small plugin, libkestrel_video.so (plugins/video/, built when
// libopencv-videoio-dev and libopencv-imgcodecs-dev are installed), is loaded on the first use. Without
// it, a video or such an image is a clear error naming the file, and everything else works (JPEG and PNG
// included).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <opencv2/core.hpp>

namespace kestrel::data {

class VideoReader {
 public:
  virtual ~VideoReader() = default;
  virtual bool read(cv::Mat& bgr) = 0;       // the next frame (CV_8UC3 BGR); false at the end of the video
  // Passes over the next frame without converting it (--vid-stride's skipped frames: upstream grabs them,
  // cv2's grab()); false at the end. The default reads it.
  virtual bool skip() {
    cv::Mat unused;
    return read(unused);
  }
  virtual double fps() const = 0;            // the container's frame rate (0 when it does not say)
  virtual int64_t frame_count() const = 0;   // the container's frame count (0 for a camera or when unknown)
};

class VideoWriter {
 public:
  virtual ~VideoWriter() = default;
  virtual bool write(const cv::Mat& bgr) = 0;  // frames must have the size the writer was created with
};

// The interface the plugin implements (its one exported symbol, kestrel_video_backend, returns it).
// Errors come back as text so that no exception crosses the library boundary.
struct VideoBackend {
  static constexpr int kAbiVersion = 3;  // 2: decode_image; 3: VideoReader::skip
  virtual ~VideoBackend() = default;
  virtual int abi_version() const { return kAbiVersion; }
  virtual std::unique_ptr<VideoReader> open(const std::string& source, std::string& error) = 0;
  virtual std::unique_ptr<VideoWriter> create(const std::string& path, const std::string& fourcc, double fps, cv::Size size,
                                              std::string& error) = 0;
  // cv::imdecode with IMREAD_COLOR, what upstream's cv2.imread does: 8-bit BGR (grey, alpha and 16 bits
  // converted), EXIF orientation applied where OpenCV reads it. False with `error` when OpenCV cannot decode
  // it (error "" when OpenCV gives no reason).
  virtual bool decode_image(const uint8_t* data, size_t size, cv::Mat& bgr, std::string& error) = 0;
};

// Upstream's VID_FORMATS by extension (asf avi gif m4v mkv mov mp4 mpeg mpg ts wmv, any case).
bool is_video_file(const std::string& path);
// The extensions is_video_file takes, for messages: "videos: asf avi ...".
std::string video_formats_text();
// A camera index as upstream's webcam source ("0", "1", ...).
bool is_camera_source(const std::string& source);
// A network stream or remote file as upstream's is_url sources: rtsp://, rtmp://, http://, https://
// (any case). kestrel hands them to OpenCV's videoio (FFmpeg) as they are; upstream downloads http(s)
// files first and reads streams with its threaded LoadStreams.
bool is_stream_url(const std::string& source);
// Any "scheme://..." (tcp://, udp://, rtsps://, ...): in a .streams list, handed to the backend as it is.
bool has_url_scheme(const std::string& source);

// Opens a video file, a camera index or a URL (has_url_scheme); an Error naming the source when it cannot
// be read (or when video support is missing).
std::unique_ptr<VideoReader> open_video(const std::string& source);
// Creates a video file (fourcc such as "mp4v" for .mp4, as upstream's detect.py, or "MJPG" for .avi).
std::unique_ptr<VideoWriter> create_video(const std::string& path, double fps, cv::Size size, const std::string& fourcc = "mp4v");

// An image through the plugin's decode_image (for the formats image_io.h does not decode itself); an Error
// naming `path` when the plugin is not available (video_support_problem() says why).
bool decode_image_with_plugin(const uint8_t* data, size_t size, const std::string& path, cv::Mat& bgr, std::string& error);

// Empty when the plugin loads, else why not (which files were tried and how to get it).
std::string video_support_problem();

}  // namespace kestrel::data
