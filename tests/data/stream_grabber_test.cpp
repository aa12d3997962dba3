// StreamGrabber: a file's frames all arrive, in order, whatever the taker's pace; a live source keeps
// only its newest frame (what the taker missed is counted as dropped); --vid-stride keeps every n-th;
// destroying a grabber whose reader is waiting, or never ends, returns.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

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
  StreamGrabber grabber(std::make_unique<CountingReader>(20), /*live=*/false, 1);
  const std::vector<int> taken = take_all(grabber, std::chrono::milliseconds(2));  // slower than the reader
  ASSERT_EQ(taken.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(taken[i], i + 1);
  EXPECT_EQ(grabber.frames_dropped(), 0);
  cv::Mat frame;
  EXPECT_FALSE(grabber.next(frame)) << "an ended source stays ended";
}

TEST(StreamGrabber, StrideKeepsEveryNthFrame) {
  StreamGrabber grabber(std::make_unique<CountingReader>(10), /*live=*/false, 3);
  EXPECT_EQ(take_all(grabber, std::chrono::milliseconds(0)), (std::vector<int>{3, 6, 9}));
  EXPECT_EQ(grabber.frames_read(), 10) << "the 10th is read, then the source ends before a 12th";
}

TEST(StreamGrabber, ALiveSourceKeepsOnlyItsNewestFrame) {
  // Nothing is taken until the source has ended: only its last frame is left; the others were dropped.
  // (Frame 50 replaces frame 49 when the 49th is dropped.)
  StreamGrabber grabber(std::make_unique<CountingReader>(50), /*live=*/true, 1);
  for (int wait = 0; wait < 2000 && grabber.frames_dropped() < 49; ++wait) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(grabber.frames_dropped(), 49);
  EXPECT_EQ(grabber.frames_read(), 50);
  EXPECT_EQ(take_all(grabber, std::chrono::milliseconds(0)), std::vector<int>{50});

  // Taken at any pace: newer frames only, each once, the last always; taken + dropped = read.
  StreamGrabber paced(std::make_unique<CountingReader>(300), /*live=*/true, 1);
  const std::vector<int> taken = take_all(paced, std::chrono::milliseconds(1));
  ASSERT_FALSE(taken.empty());
  for (size_t i = 1; i < taken.size(); ++i) EXPECT_GT(taken[i], taken[i - 1]);
  EXPECT_EQ(taken.back(), 300);
  EXPECT_EQ(static_cast<int64_t>(taken.size()) + paced.frames_dropped(), 300);
}

TEST(StreamGrabber, DestroyingAWaitingOrEndlessGrabberReturns) {
  {
    StreamGrabber waiting(std::make_unique<CountingReader>(100), /*live=*/false, 1);
    cv::Mat frame;
    ASSERT_TRUE(waiting.next(frame));  // the reader now waits for frame 2 to be taken
  }
  {
    StreamGrabber endless(std::make_unique<CountingReader>(-1), /*live=*/true, 1);
    cv::Mat frame;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(endless.next(frame));
  }
  SUCCEED() << "both destructors returned";
}

}  // namespace
}  // namespace kestrel::data
