// One video source read on its own thread, for detect's .streams lists (detect.py's LoadStreams, which
// reads each source of the list in a thread while the model works on the frames it has).
//
// A live source (a camera, a stream without a frame count) keeps only its newest frame, as upstream: a
// model slower than the camera falls behind by dropping frames, not by a growing delay. When a live source
// has no new frame by the round's deadline, its last frame is offered again (upstream always offers the
// current one); the sources of a round share one deadline, so that one stalled camera costs the others at
// most one `patience` per round. A file (a frame count: also a remote file) is handed over frame by frame,
// the reader waiting for each to be taken: nothing is dropped and a run is repeatable (upstream's threads
// drop a file's frames at random, depending on how fast the model is).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include <opencv2/core.hpp>

#include "kestrel/data/video_io.h"

namespace kestrel::data {

class StreamGrabber {
 public:
  using Clock = std::chrono::steady_clock;

  // `name` names the source in errors. Frames kept: the first, then every `vid_stride`-th after it (frames
  // 0, s, 2s, ... as upstream's LoadStreams).
  StreamGrabber(std::unique_ptr<VideoReader> reader, std::string name, bool live, int vid_stride,
                std::chrono::milliseconds patience = std::chrono::milliseconds(1000));
  // Stops the reader. One still inside a read after `kStopGrace` (a stalled network stream, until OpenCV's
  // timeout) is left to end on its own, as upstream's daemon threads (core/detached_threads.h).
  ~StreamGrabber();
  StreamGrabber(const StreamGrabber&) = delete;
  StreamGrabber& operator=(const StreamGrabber&) = delete;
  static constexpr std::chrono::milliseconds kStopGrace{500};

  // The next frame: a file's next one; a live source's newest, or, when none came by `deadline` (default:
  // now + patience), its last again (`repeated` says so). False when the source has ended and nothing is
  // left to offer. An error the reader met (an exception from the video backend) is thrown here as an
  // Error naming the source.
  bool next(cv::Mat& frame, bool* repeated = nullptr);
  bool next(cv::Mat& frame, Clock::time_point deadline, bool* repeated = nullptr);
  std::chrono::milliseconds patience() const { return patience_; }
  // Frames read from the source so far (stride included), and those a live source dropped unseen.
  int64_t frames_read() const;
  int64_t frames_dropped() const;

 private:
  struct State;  // shared with the reader thread, which may outlive the grabber
  static void read_loop(State& s);

  const std::chrono::milliseconds patience_;
  std::shared_ptr<State> state_;
  std::thread thread_;  // last: started once state_ exists
};

}  // namespace kestrel::data
