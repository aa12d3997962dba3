#include "kestrel/data/stream_grabber.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <utility>

#include "kestrel/core/detached_threads.h"
#include "kestrel/core/error.h"

namespace kestrel::data {

struct StreamGrabber::State {
  std::unique_ptr<VideoReader> reader;
  std::string name;
  bool live = false;
  int stride = 1;
  std::mutex mutex;
  std::condition_variable changed;
  cv::Mat frame;             // the newest frame not yet taken
  cv::Mat last;              // a live source's last frame taken, unchanged (the taker may draw on its copy)
  bool fresh = false;        // frame holds one
  bool ended = false, stopping = false;
  bool detached = false;     // the grabber is gone: the thread ends on its own
  std::string error;         // what the reader threw
  int64_t read = 0, dropped = 0;
};

StreamGrabber::StreamGrabber(std::unique_ptr<VideoReader> reader, std::string name, bool live, int vid_stride,
                             std::chrono::milliseconds patience)
    : patience_(patience), state_(std::make_shared<State>()) {
  state_->reader = std::move(reader);
  state_->name = std::move(name);
  state_->live = live;
  state_->stride = vid_stride < 1 ? 1 : vid_stride;
  thread_ = std::thread([s = state_]() mutable {
    read_loop(*s);
    bool detached;
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      detached = s->detached;
    }
    s.reset();  // the reader closes here when the grabber is gone
    if (detached) detached_thread_ended();
  });
}

StreamGrabber::~StreamGrabber() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->stopping = true;
  state_->changed.notify_all();
  if (state_->changed.wait_for(lock, kStopGrace, [this] { return state_->ended; })) {
    lock.unlock();
    thread_.join();
    return;
  }
  // Blocked in a read: the thread finishes it, sees `stopping` and ends; nobody waits for it.
  state_->detached = true;
  detached_thread_started();
  lock.unlock();
  thread_.detach();
}

void StreamGrabber::read_loop(State& s) {
  for (int64_t kept = 0;; ++kept) {
    cv::Mat frame;  // a new buffer per frame: the one handed over is the taker's
    bool ok = true;
    try {
      const int steps = kept == 0 ? 1 : s.stride;  // frame 0, then every stride-th (the others only grabbed)
      for (int step = 0; step < steps && ok; ++step) {
        ok = step + 1 < steps ? s.reader->skip() : s.reader->read(frame);
        std::lock_guard<std::mutex> lock(s.mutex);
        s.read += ok;
        ok = ok && !s.stopping;
      }
    } catch (const std::exception& e) {  // the backend's own failure: said by next(), not std::terminate
      std::lock_guard<std::mutex> lock(s.mutex);
      s.error = e.what();
      ok = false;
    } catch (...) {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.error = "unknown error from the video backend";
      ok = false;
    }
    std::unique_lock<std::mutex> lock(s.mutex);
    if (!s.live) s.changed.wait(lock, [&s] { return !s.fresh || s.stopping; });  // a file: the last one taken first
    if (!ok || s.stopping) {
      s.ended = true;
      s.changed.notify_all();
      return;
    }
    s.dropped += s.fresh;  // a live source replaces a frame nobody took
    s.frame = std::move(frame);
    s.fresh = true;
    s.changed.notify_all();
  }
}

bool StreamGrabber::next(cv::Mat& frame, bool* repeated) { return next(frame, Clock::now() + patience_, repeated); }

bool StreamGrabber::next(cv::Mat& frame, Clock::time_point deadline, bool* repeated) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  const auto ready = [&s] { return s.fresh || s.ended; };
  if (s.live && !s.last.empty()) {
    if (!s.changed.wait_until(lock, deadline, ready)) {  // stalled: offer the last frame again
      frame = s.last.clone();
      if (repeated) *repeated = true;
      return true;
    }
  } else {
    s.changed.wait(lock, ready);
  }
  if (repeated) *repeated = false;
  if (!s.fresh) {
    if (!s.error.empty()) fail(s.name, ": ", s.error);
    return false;
  }
  frame = std::move(s.frame);
  s.frame = cv::Mat();
  s.fresh = false;
  if (s.live) s.last = frame.clone();
  s.changed.notify_all();
  return true;
}

int64_t StreamGrabber::frames_read() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->read;
}

int64_t StreamGrabber::frames_dropped() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->dropped;
}

}  // namespace kestrel::data
