#include "kestrel/data/stream_grabber.h"

#include <utility>

namespace kestrel::data {

StreamGrabber::StreamGrabber(std::unique_ptr<VideoReader> reader, bool live, int vid_stride)
    : reader_(std::move(reader)), live_(live), stride_(vid_stride < 1 ? 1 : vid_stride), thread_([this] { read_loop(); }) {}

StreamGrabber::~StreamGrabber() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void StreamGrabber::read_loop() {
  for (;;) {
    cv::Mat frame;  // a new buffer per frame: the one handed over is the taker's
    bool ok = true;
    for (int s = 0; s < stride_ && ok; ++s) {
      ok = reader_->read(frame);
      if (ok) {
        std::lock_guard<std::mutex> lock(mutex_);
        ++read_;
      }
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (!ok || stopping_) {
      ended_ = true;
      changed_.notify_all();
      return;
    }
    if (!live_) changed_.wait(lock, [this] { return !fresh_ || stopping_; });  // a file: the last one taken first
    if (stopping_) {
      ended_ = true;
      return;
    }
    dropped_ += fresh_;  // a live source replaces a frame nobody took
    frame_ = std::move(frame);
    fresh_ = true;
    changed_.notify_all();
  }
}

bool StreamGrabber::next(cv::Mat& frame) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return fresh_ || ended_; });
  if (!fresh_) return false;
  frame = std::move(frame_);
  frame_ = cv::Mat();
  fresh_ = false;
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
