// The video plugin: a clip written and read back frame by frame (count, size, content), upstream's video
// extensions, and errors that name the file for a missing or undecodable video.
#include <gtest/gtest.h>

#include <opencv2/imgproc.hpp>

#include "kestrel/core/error.h"
#include "kestrel/data/video_io.h"
#include "test_support.h"

namespace kestrel::data {
namespace {


TEST(VideoIo, SourcesByName) {
  for (const char* v : {"a.mp4", "b.AVI", "dir/c.mov", "d.mkv", "e.wmv", "f.ts", "g.mpeg"}) EXPECT_TRUE(is_video_file(v)) << v;
  for (const char* n : {"a.jpg", "b.png", "mp4", "list.txt", "dir/"}) EXPECT_FALSE(is_video_file(n)) << n;
  EXPECT_TRUE(is_camera_source("0"));
  EXPECT_TRUE(is_camera_source("12"));
  EXPECT_FALSE(is_camera_source("0.mp4"));
  EXPECT_FALSE(is_camera_source(""));
  EXPECT_FALSE(is_camera_source("images"));
  for (const char* url : {"tcp://127.0.0.1:8092", "udp://@:1234", "rtsps://cam.local/s", "RTSP://cam", "srt+x.y-z://h"})
    EXPECT_TRUE(has_url_scheme(url)) << url;
  for (const char* path : {"dir/a.mp4", "://x", "1tcp://x", "c:/videos/a.mp4", "a b://x", "/abs/x"})
    EXPECT_FALSE(has_url_scheme(path)) << path;
}

TEST(VideoIo, WritesAndReadsBackEveryFrame) {
  if (const std::string problem = video_support_problem(); !problem.empty()) GTEST_SKIP() << problem;
  test::TempDir dir;
  const std::string path = dir.file("clip.avi");
  const cv::Size size(96, 64);
  {
    auto writer = create_video(path, 10, size, "MJPG");
    for (int f = 0; f < 7; ++f) {
      // Frame f: grey level 30 * f, a white square whose left edge moves 8 pixels a frame.
      cv::Mat frame(size, CV_8UC3, cv::Scalar::all(30 * f));
      cv::rectangle(frame, cv::Rect(8 * f, 20, 16, 16), cv::Scalar::all(255), cv::FILLED);
      EXPECT_TRUE(writer->write(frame));
    }
    EXPECT_FALSE(writer->write(cv::Mat(10, 10, CV_8UC3))) << "a frame of another size is refused";
  }
  auto reader = open_video(path);
  EXPECT_NEAR(reader->fps(), 10, 1e-6);
  EXPECT_EQ(reader->frame_count(), 7);
  cv::Mat frame;
  int frames = 0;
  while (reader->read(frame)) {
    ASSERT_EQ(frame.size(), size);
    ASSERT_EQ(frame.type(), CV_8UC3);
    // MJPG is lossy: levels within a few units, the square where it was drawn.
    EXPECT_NEAR(frame.at<cv::Vec3b>(50, 90)[1], 30 * frames, 6) << "frame " << frames;
    EXPECT_GT(frame.at<cv::Vec3b>(28, 8 * frames + 8)[1], 240) << "frame " << frames;
    ++frames;
  }
  EXPECT_EQ(frames, 7);
}

TEST(VideoIo, UnreadableVideosNameTheFile) {
  if (const std::string problem = video_support_problem(); !problem.empty()) GTEST_SKIP() << problem;
  test::TempDir dir;
  test::write_file(dir.file("broken.mp4"), "not a video at all");
  const std::string broken = test::error_message([&] { open_video(dir.file("broken.mp4")); });
  EXPECT_NE(broken.find(dir.file("broken.mp4") + ": cannot read the video"), std::string::npos) << broken;
  const std::string missing = test::error_message([&] { open_video(dir.file("missing.avi")); });
  EXPECT_NE(missing.find(dir.file("missing.avi") + ": no such video file"), std::string::npos) << missing;
  EXPECT_NE(test::error_message([&] { create_video(dir.file("x.avi"), 10, {8, 8}, "MJPEG"); }).find("four-character"), std::string::npos);
  EXPECT_NE(test::error_message([&] { create_video(dir.file("no/such/folder/x.avi"), 10, {8, 8}, "MJPG"); }).find("x.avi: cannot write the video"),
            std::string::npos);
}

}  // namespace
}  // namespace kestrel::data
