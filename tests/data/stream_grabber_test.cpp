// StreamGrabber: a file's frames all arrive, in order, whatever the taker's pace; a live source keeps
// only its newest frame (what the taker missed is counted as dropped); --vid-stride keeps every n-th;
// destroying a grabber whose reader is waiting, or never ends, returns.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kestrel/core/detached_threads.h"
#include "kestrel/core/error.h"
#include "kestrel/data/stream_grabber.h"

namespace kestrel::data {
namespace {

// Frames 1, 2, ... `count` (or without end when count < 0), each a 1x1 int frame holding its number.
class CountingReader : public VideoReader {
 public:
  explicit CountingReader(int count) : count_(count) {}
  bool read(cv::Mat& frame) override {
    if (count_ >= 0 && next_ > count_) return false;
    frame = cv::Mat(1, 1, CV_32S, cv::Scalar(next_++));
    return true;
  }
  double fps() const override { return 30; }
  int64_t frame_count() const override { return count_ < 0 ? 0 : count_; }

 private:
  int count_, next_ = 1;
};

std::vector<int> take_all(StreamGrabber& grabber, std::chrono::milliseconds pause) {
  std::vector<int> taken;
  cv::Mat frame;
  while (grabber.next(frame)) {
    taken.push_back(frame.at<int>(0, 0));
    std::this_thread::sleep_for(pause);
  }
  return taken;
}

TEST(StreamGrabber, AFileHandsOverEveryFrameInOrder) {
  StreamGrabber grabber(std::make_unique<CountingReader>(20), "clip", /*live=*/false, 1);
  const std::vector<int> taken = take_all(grabber, std::chrono::milliseconds(2));  // slower than the reader
  ASSERT_EQ(taken.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(taken[i], i + 1);
  EXPECT_EQ(grabber.frames_dropped(), 0);
  cv::Mat frame;
  EXPECT_FALSE(grabber.next(frame)) << "an ended source stays ended";
}

// Counts how frames are taken: passed over (skip) or decoded (read).
class SkipCountingReader : public CountingReader {
 public:
  explicit SkipCountingReader(int count, std::atomic<int>* skips) : CountingReader(count), skips_(skips) {}
  bool skip() override {
    ++*skips_;
    return CountingReader::skip();
  }

 private:
  std::atomic<int>* skips_;
};

TEST(StreamGrabber, StrideKeepsEveryNthFrame) {
  // Upstream's LoadStreams: the first frame, then every third after it (0-based 0, 3, 6, 9).
  StreamGrabber grabber(std::make_unique<CountingReader>(10), "clip", /*live=*/false, 3);
  EXPECT_EQ(take_all(grabber, std::chrono::milliseconds(0)), (std::vector<int>{1, 4, 7, 10}));
  EXPECT_EQ(grabber.frames_read(), 10);
  // The frames in between are only passed over (upstream grabs them): 2 before each of frames 4, 7 and
  // 10, and one more that finds the end.
  std::atomic<int> skips{0};
  StreamGrabber counted(std::make_unique<SkipCountingReader>(10, &skips), "clip", /*live=*/false, 3);
  EXPECT_EQ(take_all(counted, std::chrono::milliseconds(0)), (std::vector<int>{1, 4, 7, 10}));
  EXPECT_EQ(skips.load(), 7);
  // A file shorter than the stride still gives its first frame.
  StreamGrabber short_clip(std::make_unique<CountingReader>(2), "clip", /*live=*/false, 10);
  EXPECT_EQ(take_all(short_clip, std::chrono::milliseconds(0)), std::vector<int>{1});
}

TEST(StreamGrabber, ALiveSourceKeepsOnlyItsNewestFrame) {
  // Nothing is taken until the source has ended: only its last frame is left; the others were dropped.
  // (Frame 50 replaces frame 49 when the 49th is dropped.)
  StreamGrabber grabber(std::make_unique<CountingReader>(50), "camera", /*live=*/true, 1);
  for (int wait = 0; wait < 2000 && grabber.frames_dropped() < 49; ++wait) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(grabber.frames_dropped(), 49);
  EXPECT_EQ(grabber.frames_read(), 50);
  EXPECT_EQ(take_all(grabber, std::chrono::milliseconds(0)), std::vector<int>{50});

  // Taken at any pace: newer frames only, each once, the last always; taken + dropped = read.
  StreamGrabber paced(std::make_unique<CountingReader>(300), "camera", /*live=*/true, 1);
  const std::vector<int> taken = take_all(paced, std::chrono::milliseconds(1));
  ASSERT_FALSE(taken.empty());
  for (size_t i = 1; i < taken.size(); ++i) EXPECT_GT(taken[i], taken[i - 1]);
  EXPECT_EQ(taken.back(), 300);
  EXPECT_EQ(static_cast<int64_t>(taken.size()) + paced.frames_dropped(), 300);
}

TEST(StreamGrabber, DestroyingAWaitingOrEndlessGrabberReturns) {
  {
    StreamGrabber waiting(std::make_unique<CountingReader>(100), "clip", /*live=*/false, 1);
    cv::Mat frame;
    ASSERT_TRUE(waiting.next(frame));  // the reader now waits for frame 2 to be taken
  }
  {
    StreamGrabber endless(std::make_unique<CountingReader>(-1), "camera", /*live=*/true, 1);
    cv::Mat frame;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(endless.next(frame));
  }
  SUCCEED() << "both destructors returned";
}

// Frame 1, then a read that blocks until released (a stalled network camera), then the end.
class StallingReader : public VideoReader {
 public:
  explicit StallingReader(std::atomic<bool>* release) : release_(release) {}
  bool read(cv::Mat& frame) override {
    if (reads_++ == 0) {
      frame = cv::Mat(1, 1, CV_32S, cv::Scalar(1));
      return true;
    }
    while (!*release_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return false;
  }
  double fps() const override { return 30; }
  int64_t frame_count() const override { return 0; }

 private:
  std::atomic<bool>* release_;
  int reads_ = 0;
};

TEST(StreamGrabber, AStalledLiveSourceOffersItsLastFrameAgain) {
  std::atomic<bool> release{false};
  StreamGrabber grabber(std::make_unique<StallingReader>(&release), "camera", /*live=*/true, 1, std::chrono::milliseconds(20));
  cv::Mat frame;
  bool repeated = true;
  ASSERT_TRUE(grabber.next(frame, &repeated));
  EXPECT_FALSE(repeated);
  frame.at<int>(0, 0) = 99;  // the taker draws on its copy
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(grabber.next(frame, &repeated));
    EXPECT_TRUE(repeated);
    EXPECT_EQ(frame.at<int>(0, 0), 1) << "the frame as read, not as drawn on";
  }
  release = true;  // the read fails: the source ends
  for (int wait = 0; wait < 500 && grabber.next(frame, &repeated); ++wait) EXPECT_TRUE(repeated);
  EXPECT_FALSE(grabber.next(frame));
}

// A reader stuck in a read (a network stream before OpenCV's timeout) is not waited for: the destructor
// returns after its grace, the thread is counted as detached, and it ends on its own once the read returns.
TEST(StreamGrabber, DestroyingAGrabberStuckInAReadDoesNotWaitForIt) {
  std::atomic<bool> release{false};
  const int before = detached_threads_running();
  const auto start = std::chrono::steady_clock::now();
  {
    StreamGrabber grabber(std::make_unique<StallingReader>(&release), "http://cam/1", /*live=*/true, 1);
    cv::Mat frame;
    ASSERT_TRUE(grabber.next(frame));  // frame 1; the reader is now blocked
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_LT(waited, StreamGrabber::kStopGrace + std::chrono::seconds(5));
  EXPECT_EQ(detached_threads_running(), before + 1);
  release = true;
  for (int wait = 0; wait < 2000 && detached_threads_running() > before; ++wait)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(detached_threads_running(), before);
}

// Several sources share a round's deadline (detect_streams): a stalled one offers its last frame by the
// deadline, and the next source's fresh frame is not held up by a second wait.
TEST(StreamGrabber, AStalledSourceWaitsOnlyUntilTheRoundsDeadline) {
  std::atomic<bool> release{false};
  StreamGrabber stalled(std::make_unique<StallingReader>(&release), "cam 0", /*live=*/true, 1, std::chrono::milliseconds(300));
  cv::Mat frame;
  ASSERT_TRUE(stalled.next(frame));
  const auto start = StreamGrabber::Clock::now();
  bool repeated = false;
  ASSERT_TRUE(stalled.next(frame, start + std::chrono::milliseconds(50), &repeated));
  EXPECT_TRUE(repeated);
  const auto waited = StreamGrabber::Clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(50));
  EXPECT_LT(waited, std::chrono::milliseconds(300)) << "waited its patience, not the deadline";
  ASSERT_TRUE(stalled.next(frame, StreamGrabber::Clock::now(), &repeated));  // deadline already passed: at once
  EXPECT_TRUE(repeated);
  release = true;
}

class ThrowingReader : public VideoReader {
 public:
  bool read(cv::Mat&) override { throw std::runtime_error("decoder exploded"); }
  double fps() const override { return 30; }
  int64_t frame_count() const override { return 10; }
};

TEST(StreamGrabber, AReaderErrorIsThrownByNextNamingTheSource) {
  StreamGrabber grabber(std::make_unique<ThrowingReader>(), "rtsp://cam/1", /*live=*/false, 1);
  cv::Mat frame;
  try {
    grabber.next(frame);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "rtsp://cam/1: decoder exploded");
  }
}

}  // namespace
}  // namespace kestrel::data
