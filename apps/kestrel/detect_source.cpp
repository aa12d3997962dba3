#include "detect_source.h"

#include <algorithm>
#include <iterator>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "kestrel/core/ascii_lower.h"
#include "kestrel/core/error.h"
#include "kestrel/core/path_below.h"
#include "kestrel/core/regular_file.h"
#include "kestrel/data/image_files.h"

namespace kestrel::app {
namespace {

namespace fs = std::filesystem;

// A line without its surrounding blanks; empty for a blank line.
std::string trimmed(const std::string& line) {
  const auto a = line.find_first_not_of(" \t\r"), b = line.find_last_not_of(" \t\r");
  return a == std::string::npos ? std::string() : line.substr(a, b - a + 1);
}

// detect.py's screenshot source ("screen", "screen 0 100 100 512 256": any source starting with "screen");
// an existing file of such a name (screenshot.png) is a file here.
// A glob ('screenshots/*.jpg') is a glob.
bool is_screen_source(const std::string& source) {
  return ascii_lower(source).rfind("screen", 0) == 0 && !fs::exists(source) && source.find_first_of("*?[") == std::string::npos;
}

// Whether `file` lies below `folder` (both made absolute and normal; links are not followed).
bool is_below(const fs::path& file, const fs::path& folder) {
  return path_is_below(fs::absolute(file).lexically_normal(), folder);
}

// The sources of a .streams list, one per line (blank lines skipped): camera indices, URLs of any scheme
// (rtsp, tcp, udp, ... passed to the video backend as they are, as LoadStreams does), devices, video
// files. A relative file path is taken relative to the list, as kestrel's .txt lists (upstream: the
// working directory).
std::vector<std::string> read_stream_list(const std::string& list) {
  if (!fs::exists(list)) fail("--source ", list, ": file not found");
  require_regular_file(list);
  std::ifstream in(list);
  if (!in) fail("--source ", list, ": cannot be read");
  std::vector<std::string> sources;
  for (std::string line; std::getline(in, line);) {
    std::string source = trimmed(line);
    if (source.empty()) continue;
    if (!data::is_camera_source(source) && !data::has_url_scheme(source) && fs::path(source).is_relative())
      source = (fs::path(list).parent_path() / source).lexically_normal().string();
    sources.push_back(source);
  }
  if (sources.empty()) fail("--source ", list, ": lists no camera, stream or video");
  return sources;
}

// v7.0 and YOLOv7 read a .txt source as streams: kestrel reads paths, so a stream line is named, not dropped.
void refuse_streams_in_txt_list(const std::string& list) {
  std::ifstream in(list);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    const std::string entry = trimmed(line);
    if (!entry.empty() && (data::is_camera_source(entry) || data::has_url_scheme(entry)))
      fail("--source ", list, ":", number, ": '", entry, "' is a camera or stream; kestrel reads a .txt source as "
           "image and video paths: list cameras and streams in a .streams file");
  }
}

}  // namespace

// detect.py fetches a YouTube page's video URL through pafy / youtube_dl (LoadStreams); kestrel has no such client.
static void refuse_youtube(const std::string& source, const std::string& where) {
  const std::string s = ascii_lower(source);
  const size_t scheme_end = s.find("://");
  if (scheme_end == std::string::npos) return;
  const size_t host_begin = scheme_end + 3;
  const std::string host = s.substr(host_begin, s.find_first_of("/?:#", host_begin) - host_begin);
  if (host == "www.youtube.com" || host == "youtube.com" || host == "m.youtube.com" || host == "youtu.be")
      fail(where, ": '", source, "' is a YouTube page (detect.py reads it through pafy); kestrel has no YouTube client: "
           "download the video (yt-dlp) and pass the file, or pass the stream's own URL");
}

DetectSource open_detect_source(const std::string& source, const std::string& project, const std::string& name) {
  refuse_youtube(source, "--source");
  // Upstream downloads an image URL and treats it as a file; kestrel has no downloader.
  if (data::is_stream_url(source) && data::has_image_extension(source))
    fail("--source ", source, ": an image URL; download the image and pass the file");
  if (is_screen_source(source))
    fail("--source ", source, ": detect.py's screen capture is not supported (kestrel reads no screen); record the "
         "screen to a video and pass the file");
  // A glob (detect.py expands `*`, `?` and `[...]`) is a list even when it ends in a video extension.
  // (A URL's '?' starts its query.)
  const bool pattern = !data::is_stream_url(source) && !fs::exists(source) && source.find_first_of("*?[") != std::string::npos;
  // A camera or a stream URL goes to detect.py's LoadStreams, as a list of one: its newest frame each time.
  // A video file, local or a URL (upstream downloads it), goes to LoadImages.
  const bool live_source =
      !pattern && (data::is_camera_source(source) || (data::is_stream_url(source) && !data::is_video_file(source)));
  const bool video = !pattern && !live_source && data::is_video_file(source);
  const bool stream_list = !pattern && !live_source && !video && fs::path(source).extension() == ".streams";

  DetectSource opened;
  if (live_source) {
    opened.kind = DetectSource::Kind::kStreams;
    opened.stream_sources = {source};
    opened.stream_readers.push_back(data::open_video(source));
  } else if (stream_list) {
    opened.kind = DetectSource::Kind::kStreams;
    opened.stream_sources = read_stream_list(source);
    for (const std::string& entry : opened.stream_sources) refuse_youtube(entry, "--source " + source);
    const size_t n = opened.stream_sources.size();
    for (size_t i = 0; i < n; ++i) {
      try {
        opened.stream_readers.push_back(data::open_video(opened.stream_sources[i]));
      } catch (const Error& e) {  // upstream stops at a source it cannot open, too
        fail("--source ", source, ": source ", i + 1, "/", n, ": ", e.what());
      }
    }
  } else if (video) {
    opened.kind = DetectSource::Kind::kVideo;
    opened.video = data::open_video(source);
  } else {
    if (ascii_lower(fs::path(source).extension().string()) == ".txt" && fs::is_regular_file(source)) refuse_streams_in_txt_list(source);
    opened.files = data::list_files(
        {source}, "--source",
        [](const std::string& path) { return data::has_image_extension(path) || data::is_video_file(path); },
        cat(data::image_formats_text(), "; ", data::video_formats_text()));
    // Only a folder searched recursively that holds the project (not the project itself, or a folder in it;
    // not files named one by one, in a list or by a glob). A project that is the working folder (--project ''
    // or .) holds the user's own files too: there only its run folders <name>, <name>2, ... are left out.
    const std::string shown_project = project.empty() ? "." : project;
    const fs::path runs = fs::absolute(shown_project).lexically_normal();
    const fs::path folder = fs::absolute(source).lexically_normal();
    const std::string run_stem = fs::path(name).lexically_normal().begin()->string();
    std::error_code same_ec;
    const bool project_is_working_folder = fs::equivalent(runs, fs::current_path(), same_ec);
    const auto in_a_run_folder = [&](const std::string& file) {
      if (!is_below(file, runs)) return false;
      if (!project_is_working_folder) return true;
      const fs::path relative = fs::absolute(file).lexically_normal().lexically_relative(runs);
      const std::string first = relative.begin() == relative.end() ? "" : relative.begin()->string();
      if (first.rfind(run_stem, 0) != 0 || std::next(relative.begin()) == relative.end()) return false;
      const std::string number = first.substr(run_stem.size());
      return std::all_of(number.begin(), number.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    const size_t listed = opened.files.size();
    std::error_code ec;
    if (fs::is_directory(source, ec) && is_below(runs, folder) && !is_below(folder, runs))
      opened.files.erase(std::remove_if(opened.files.begin(), opened.files.end(), in_a_run_folder), opened.files.end());
    if (opened.files.size() != listed)
      std::cout << "note: " << listed - opened.files.size() << " files below --project " << shown_project
                << (project_is_working_folder ? cat(" in its run folders ", run_stem, ", ", run_stem, "2, ...") : std::string())
                << " (earlier runs' outputs) are not taken as sources\n";
    if (opened.files.empty()) fail("--source ", source, ": no images or videos found");
  }
  return opened;
}

}  // namespace kestrel::app
