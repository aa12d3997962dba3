#include "kestrel/data/stream_grabber.h"

#include <exception>
#include <utility>

#include "kestrel/core/error.h"

namespace kestrel::data {

StreamGrabber::StreamGrabber(std::unique_ptr<VideoReader> reader, std::string name, bool live, int vid_stride,
                             std::chrono::milliseconds patience)
    : reader_(std::move(reader)),
      name_(std::move(name)),
      live_(live),
      stride_(vid_stride < 1 ? 1 : vid_stride),
      patience_(patience),
      thread_([this] { read_loop(); }) {}

StreamGrabber::~StreamGrabber() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void StreamGrabber::read_loop() {
  for (int64_t kept = 0;; ++kept) {
    cv::Mat frame;  // a new buffer per frame: the one handed over is the taker's
    bool ok = true;
    try {
      for (int s = 0; s < (kept == 0 ? 1 : stride_) && ok; ++s) {  // frame 0, then every stride-th
        ok = reader_->read(frame);
        if (ok) {
          std::lock_guard<std::mutex> lock(mutex_);
          ++read_;
        }
      }
    } catch (const std::exception& e) {  // the backend's own failure: said by next(), not std::terminate
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = e.what();
      ok = false;
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = "unknown error from the video backend";
      ok = false;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (!live_) changed_.wait(lock, [this] { return !fresh_ || stopping_; });  // a file: the last one taken first
    if (!ok || stopping_) {
      ended_ = true;
      changed_.notify_all();
      return;
    }
    dropped_ += fresh_;  // a live source replaces a frame nobody took
    frame_ = std::move(frame);
    fresh_ = true;
    changed_.notify_all();
  }
}

bool StreamGrabber::next(cv::Mat& frame, bool* repeated) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto ready = [this] { return fresh_ || ended_; };
  if (live_ && !last_.empty()) {
    if (!changed_.wait_for(lock, patience_, ready)) {  // stalled: offer the last frame again
      frame = last_.clone();
      if (repeated) *repeated = true;
      return true;
    }
  } else {
    changed_.wait(lock, ready);
  }
  if (repeated) *repeated = false;
  if (!fresh_) {
    if (!error_.empty()) fail(name_, ": ", error_);
    return false;
  }
  frame = std::move(frame_);
  frame_ = cv::Mat();
  fresh_ = false;
  if (live_) last_ = frame.clone();
  changed_.notify_all();
  return true;
}

int64_t StreamGrabber::frames_read() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return read_;
}

int64_t StreamGrabber::frames_dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

}  // namespace kestrel::data
