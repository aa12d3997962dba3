#include "kestrel/data/video_io.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "kestrel/core/ascii_lower.h"
#include "kestrel/core/error.h"

namespace kestrel::data {
namespace {

namespace fs = std::filesystem;
constexpr const char* kPluginName = "libkestrel_video.so";

struct Loaded {
  VideoBackend* backend = nullptr;
  std::string problem;
};

// Where the plugin may be: $KESTREL_VIDEO_PLUGIN, next to the executable (or in its lib/ folder, as the
// GPU bundle lays libraries out, or one folder up, for build/tests/kestrel_tests), then the build tree.
std::vector<fs::path> candidates() {
  std::vector<fs::path> out;
  if (const char* env = std::getenv("KESTREL_VIDEO_PLUGIN"); env && *env) out.emplace_back(env);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path dir = exe.parent_path();
    for (const fs::path& d : {dir, dir / "lib", dir.parent_path()}) out.push_back(d / kPluginName);
  }
#ifdef KESTREL_VIDEO_PLUGIN_PATH
  out.emplace_back(KESTREL_VIDEO_PLUGIN_PATH);
#endif
  return out;
}

Loaded load() {
  Loaded l;
  std::string tried;
  for (const fs::path& path : candidates()) {
    tried += "\n  " + path.string();
    if (!fs::exists(path)) continue;
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      l.problem = cat(path.string(), ": cannot load the OpenCV plugin (", ::dlerror(), ")");
      return l;
    }
    using Entry = VideoBackend* (*)();
    auto entry = reinterpret_cast<Entry>(::dlsym(handle, "kestrel_video_backend"));
    if (!entry) {
      l.problem = cat(path.string(), ": not a kestrel OpenCV plugin (no kestrel_video_backend)");
      return l;
    }
    VideoBackend* backend = entry();
    if (!backend || backend->abi_version() != VideoBackend::kAbiVersion) {
      l.problem = cat(path.string(), ": an OpenCV plugin of another kestrel build (rebuild kestrel)");
      return l;
    }
    l.backend = backend;  // kept loaded for the life of the process
    return l;
  }
  l.problem = cat("OpenCV support (video, and images other than JPEG and PNG) is not available: ", kPluginName,
                  " was not found; looked at:", tried,
                  "\nIt is built with kestrel when OpenCV's videoio and imgcodecs are installed (Debian "
                  "libopencv-videoio-dev and libopencv-imgcodecs-dev; scripts/setup.sh installs them).");
  return l;
}

const Loaded& plugin() {
  static const Loaded loaded = load();
  return loaded;
}

VideoBackend& backend_for(const std::string& what) {
  const Loaded& l = plugin();
  if (!l.backend) fail(what, ": ", l.problem);
  return *l.backend;
}

}  // namespace

constexpr const char* kVideoExtensions[] = {".asf", ".avi", ".gif", ".m4v", ".mkv", ".mov", ".mp4", ".mpeg", ".mpg", ".ts", ".wmv"};

bool is_video_file(const std::string& path) {
  const std::string ext = ascii_lower(fs::path(path).extension().string());
  return std::any_of(std::begin(kVideoExtensions), std::end(kVideoExtensions), [&](const char* f) { return ext == f; });
}

std::string video_formats_text() {
  std::string text = "videos:";
  for (const char* ext : kVideoExtensions) text += cat(" ", ext + 1);
  return text;
}

bool is_camera_source(const std::string& source) {
  return !source.empty() && source.size() < 4 &&
         std::all_of(source.begin(), source.end(), [](unsigned char c) { return std::isdigit(c); });
}

bool is_stream_url(const std::string& source) {
  const std::string head = ascii_lower(source.substr(0, 8));
  for (const char* scheme : {"rtsp://", "rtmp://", "http://", "https://"})
    if (head.rfind(scheme, 0) == 0) return true;
  return false;
}

bool has_url_scheme(const std::string& source) {
  const size_t colon = source.find("://");
  if (colon == std::string::npos || colon == 0 || !std::isalpha(static_cast<unsigned char>(source[0]))) return false;
  return std::all_of(source.begin(), source.begin() + static_cast<long>(colon), [](unsigned char c) {
    return std::isalnum(c) || c == '+' || c == '-' || c == '.';
  });
}

std::string video_support_problem() { return plugin().problem; }

std::unique_ptr<VideoReader> open_video(const std::string& source) {
  if (!is_camera_source(source) && !has_url_scheme(source) && !fs::exists(source)) fail(source, ": no such video file");
  std::string error;
  auto reader = backend_for(source).open(source, error);
  if (!reader) fail(source, ": cannot read the video (", error, ")");
  return reader;
}

bool decode_image_with_plugin(const uint8_t* data, size_t size, const std::string& path, cv::Mat& bgr, std::string& error) {
  return backend_for(path).decode_image(data, size, bgr, error);
}

std::unique_ptr<VideoWriter> create_video(const std::string& path, double fps, cv::Size size, const std::string& fourcc) {
  if (fourcc.size() != 4) fail(path, ": a video codec is a four-character code (FourCC), got '", fourcc, "'");
  std::string error;
  auto writer = backend_for(path).create(path, fourcc, fps, size, error);
  if (!writer) fail(path, ": cannot write the video (", error, ")");
  return writer;
}

}  // namespace kestrel::data
