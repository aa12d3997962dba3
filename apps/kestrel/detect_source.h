// What kestrel detect's --source names, opened: image and video files (detect.py's LoadImages), one video
// file, or cameras and streams (LoadStreams). Opened before the run folder is made, so that a bad source
// leaves nothing behind.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kestrel/data/video_io.h"

namespace kestrel::app {

struct DetectSource {
  enum class Kind { kFiles, kVideo, kStreams };
  Kind kind = Kind::kFiles;
  // kFiles: a file, folder, glob or .txt list's images and videos, sorted (never empty).
  std::vector<std::string> files;
  // kVideo: the video file (local, or a URL of a file).
  std::unique_ptr<data::VideoReader> video;
  // kStreams: a .streams list's sources, or the one camera or stream URL, each opened.
  std::vector<std::string> stream_sources;
  std::vector<std::unique_ptr<data::VideoReader>> stream_readers;
};

// An Error naming --source when it cannot be used: an image URL (kestrel has no downloader), detect.py's
// screen capture, a .txt list naming a camera or stream, a stream that cannot be opened, no files found.
// Files below `project` (--project) are left out, with a note: a source folder holding the runs folder
// (`--source .`, searched recursively) would otherwise feed earlier runs' images and crops back in. A project
// that is the working folder: only its run folders (<name>, <name>2, ... for --name).
DetectSource open_detect_source(const std::string& source, const std::string& project, const std::string& name);

}  // namespace kestrel::app
