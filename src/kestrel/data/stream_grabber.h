// One video source read on its own thread, for detect's .streams lists (detect.py's LoadStreams, which
// reads each source of the list in a thread while the model works on the frames it has).
//
// A live source (a camera, a stream without a frame count) keeps only its newest frame, as upstream: a
// model slower than the camera falls behind by dropping frames, not by a growing delay. When a live source
// has no new frame within `patience`, its last frame is offered again (upstream always offers the current
// one), so that one stalled camera does not hold up the others. A file (a frame count: also a remote file)
// is handed over frame by frame, the reader waiting for each to be taken: nothing is dropped and a run is
// repeatable (upstream's threads drop a file's frames at random, depending on how fast the model is).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <opencv2/core.hpp>

#include "kestrel/data/video_io.h"

namespace kestrel::data {

class StreamGrabber {
 public:
  // `name` names the source in errors. Frames kept: the first, then every `vid_stride`-th after it (frames
  // 0, s, 2s, ... as upstream's LoadStreams).
  StreamGrabber(std::unique_ptr<VideoReader> reader, std::string name, bool live, int vid_stride,
                std::chrono::milliseconds patience = std::chrono::milliseconds(1000));
  // Stops the reader and joins it: after the frame it is reading (a stalled network read ends at OpenCV's
  // timeout).
  ~StreamGrabber();
  StreamGrabber(const StreamGrabber&) = delete;
  StreamGrabber& operator=(const StreamGrabber&) = delete;

  // The next frame: a file's next one; a live source's newest, or after `patience` without one its last
  // again (`repeated` says so). False when the source has ended and nothing is left to offer. An error the
  // reader met (an exception from the video backend) is thrown here as an Error naming the source.
  bool next(cv::Mat& frame, bool* repeated = nullptr);
  // Frames read from the source so far (stride included), and those a live source dropped unseen.
  int64_t frames_read() const;
  int64_t frames_dropped() const;

 private:
  void read_loop();

  std::unique_ptr<VideoReader> reader_;
  const std::string name_;
  const bool live_;
  const int stride_;
  const std::chrono::milliseconds patience_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  cv::Mat frame_;            // the newest frame not yet taken
  cv::Mat last_;             // a live source's last frame taken, unchanged (the taker may draw on its copy)
  bool fresh_ = false;       // frame_ holds one
  bool ended_ = false, stopping_ = false;
  std::string error_;        // what the reader threw
  int64_t read_ = 0, dropped_ = 0;
  std::thread thread_;       // last: started once the members above exist
};

}  // namespace kestrel::data
