// One video source read on its own thread, for detect's .streams lists (detect.py's LoadStreams, which
// reads each source of the list in a thread while the model works on the frames it has).
//
// A live source (a camera, a stream URL) keeps only its newest frame, as upstream: a model slower than
// the camera falls behind by dropping frames, not by a growing delay. A file is handed over frame by frame,
// the reader waiting for each to be taken: nothing is dropped and a run is repeatable (upstream's threads
// drop a file's frames at random, depending on how fast the model is). Each frame is taken once.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include <opencv2/core.hpp>

#include "kestrel/data/video_io.h"

namespace kestrel::data {

class StreamGrabber {
 public:
  // `vid_stride`: every stride-th frame is kept (upstream grabs the others and drops them).
  StreamGrabber(std::unique_ptr<VideoReader> reader, bool live, int vid_stride);
  ~StreamGrabber();  // stops the reader (after the frame it is reading) and joins it
  StreamGrabber(const StreamGrabber&) = delete;
  StreamGrabber& operator=(const StreamGrabber&) = delete;

  // Waits for a frame newer than the one taken last; false when the source has ended without one.
  bool next(cv::Mat& frame);
  // Frames read from the source so far (stride included), and those a live source dropped unseen.
  int64_t frames_read() const;
  int64_t frames_dropped() const;

 private:
  void read_loop();

  std::unique_ptr<VideoReader> reader_;
  const bool live_;
  const int stride_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  cv::Mat frame_;            // the newest frame not yet taken
  bool fresh_ = false;       // frame_ holds one
  bool ended_ = false, stopping_ = false;
  int64_t read_ = 0, dropped_ = 0;
  std::thread thread_;       // last: started once the members above exist
};

}  // namespace kestrel::data
