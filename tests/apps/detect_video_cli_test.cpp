// kestrel detect --source VIDEO: every frame detected and written to <run>/<stem>.mp4, per-frame label
// files <stem>_<frame>.txt (frames from 1), upstream's "video 1/1 (f/n)" lines; an unreadable video is an
// error that names it and leaves no run folder.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <opencv2/imgproc.hpp>

#include "kestrel/data/image_io.h"
#include "kestrel/data/video_io.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/weights_file.h"
#include "kestrel/models/yolo_model.h"
#include "test_support.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

struct VideoRun {
  test::TempDir dir;
  std::string weights = dir.file("w.safetensors"), project = dir.file("runs");

  VideoRun() {
    // An untrained 3-class yolov5n: at conf 0.0001 it proposes boxes on any frame.
    auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), 3);
    models::save_model_weights(weights, *model, models::describe_config("yolov5n", {"person", "bicycle", "car"}));
  }
  test::CommandResult detect(const std::string& source, const std::string& args) const {
    return test::run_command(test::kestrel_binary() + " detect --device cpu --img 160 --weights " + weights +
                             " --source " + source + " --project " + project + " " + args);
  }
};

// Five frames of a demo photo (MJPG .avi, 10 fps), shifted 10 pixels a frame so that no two are equal.
std::string make_clip(const test::TempDir& dir, cv::Size size) {
  const cv::Mat photo = data::decode_image_file("data/demo/images/val/000000000139.jpg").image;
  const std::string path = dir.file("clip.avi");
  auto writer = data::create_video(path, 10, size, "MJPG");
  for (int f = 0; f < 5; ++f) {
    cv::Mat frame;
    cv::resize(photo(cv::Rect(10 * f, 0, photo.cols - 60, photo.rows)), frame, size, 0, 0, cv::INTER_AREA);
    EXPECT_TRUE(writer->write(frame));
  }
  return path;
}

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(DetectVideoCli, WritesAnAnnotatedVideoAndLabelsPerFrame) {
  if (const std::string problem = data::video_support_problem(); !problem.empty()) GTEST_SKIP() << problem;
  VideoRun run;
  const cv::Size size(192, 128);
  const std::string clip = make_clip(run.dir, size);
  const auto r = run.detect(clip, "--conf-thres 0.0001 --max-det 20 --save-txt --save-conf");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int f = 1; f <= 5; ++f)
    EXPECT_NE(r.output.find("video 1/1 (" + std::to_string(f) + "/5) " + clip + ": "), std::string::npos) << f << "\n" << r.output;
  const std::string exp = run.project + "/exp";
  EXPECT_NE(r.output.find("Results saved to " + exp + "\n5 labels saved to " + exp + "/labels\n"), std::string::npos) << r.output;

  // The annotated video: as many frames as the clip, of the clip's size.
  auto video = data::open_video(exp + "/clip.mp4");
  cv::Mat frame;
  int frames = 0;
  while (video->read(frame)) {
    EXPECT_EQ(frame.size(), size);
    ++frames;
  }
  EXPECT_EQ(frames, 5);
  EXPECT_NEAR(video->fps(), 10, 1e-6);

  // Label files clip_1.txt .. clip_5.txt, up to --max-det lines of "cls cx cy w h conf".
  for (int f = 1; f <= 5; ++f) {
    std::ifstream in(exp + "/labels/clip_" + std::to_string(f) + ".txt");
    ASSERT_TRUE(in) << "frame " << f;
    int lines = 0;
    for (std::string line; std::getline(in, line); ++lines) {
      std::istringstream row(line);
      double cls, cx, cy, w, h, conf;
      ASSERT_TRUE(row >> cls >> cx >> cy >> w >> h >> conf) << line;
      EXPECT_TRUE(cls == 0 || cls == 1 || cls == 2) << line;
      for (double v : {cx, cy, w, h}) EXPECT_TRUE(v >= 0 && v <= 1) << line;
    }
    EXPECT_GT(lines, 0) << "frame " << f;
    EXPECT_LE(lines, 20) << "frame " << f;
  }
  EXPECT_FALSE(fs::exists(exp + "/labels/clip_0.txt"));
  EXPECT_FALSE(fs::exists(exp + "/labels/clip_6.txt"));

  // --nosave: labels only, no video.
  const auto nosave = run.detect(clip, "--conf-thres 0.0001 --max-det 5 --save-txt --nosave --name quiet");
  ASSERT_EQ(nosave.exit_code, 0) << nosave.output;
  EXPECT_FALSE(fs::exists(run.project + "/quiet/clip.mp4"));
  EXPECT_TRUE(fs::exists(run.project + "/quiet/labels/clip_5.txt"));

  // --vid-stride 2: upstream reads two frames and keeps the second, so frames 2 and 4 of 5 are detected
  // (5 // 2 = 2 shown as the total), numbered 1 and 2; their labels are those of frames 2 and 4 above.
  const auto stride = run.detect(clip, "--conf-thres 0.0001 --max-det 20 --save-txt --save-conf --nosave --vid-stride 2 --name stride");
  ASSERT_EQ(stride.exit_code, 0) << stride.output;
  EXPECT_NE(stride.output.find("video 1/1 (2/2) " + clip + ": "), std::string::npos) << stride.output;
  EXPECT_EQ(stride.output.find("(3/2)"), std::string::npos) << stride.output;
  EXPECT_EQ(file_text(run.project + "/stride/labels/clip_1.txt"), file_text(exp + "/labels/clip_2.txt"));
  EXPECT_EQ(file_text(run.project + "/stride/labels/clip_2.txt"), file_text(exp + "/labels/clip_4.txt"));
  EXPECT_FALSE(fs::exists(run.project + "/stride/labels/clip_3.txt"));
}

// --vid-stride 2 over a folder of two videos, as LoadImages: the first video gives frames 2 and 4 (1-based),
// the second 1, 3 and 5 (a newly opened video's first frame is read without skipping). Each label file equals
// the stride-1 run's file of that frame. A stride longer than a lone video: nothing detected, no error.
TEST(DetectVideoCli, StrideOverSeveralVideosAsLoadImages) {
  if (const std::string problem = data::video_support_problem(); !problem.empty()) GTEST_SKIP() << problem;
  VideoRun run;
  const std::string clip = make_clip(run.dir, cv::Size(192, 128));
  fs::create_directories(run.dir.file("media"));
  fs::copy_file(clip, run.dir.file("media/a.avi"));
  fs::copy_file(clip, run.dir.file("media/b.avi"));
  const std::string args = "--conf-thres 0.0001 --max-det 20 --save-txt --save-conf --nosave ";
  ASSERT_EQ(run.detect(run.dir.file("media"), args + "--name every").exit_code, 0);
  const auto r = run.detect(run.dir.file("media"), args + "--vid-stride 2 --name stride");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string every = run.project + "/every/labels/", stride = run.project + "/stride/labels/";
  for (const auto& [kept, frame] : std::vector<std::pair<std::string, std::string>>{
           {"a_1", "a_2"}, {"a_2", "a_4"}, {"b_1", "b_1"}, {"b_2", "b_3"}, {"b_3", "b_5"}}) {
    ASSERT_TRUE(fs::exists(stride + kept + ".txt")) << kept << "\n" << r.output;
    EXPECT_EQ(file_text(stride + kept + ".txt"), file_text(every + frame + ".txt")) << kept;
  }
  EXPECT_FALSE(fs::exists(stride + "a_3.txt"));
  EXPECT_FALSE(fs::exists(stride + "b_4.txt"));
  const auto lone = run.detect(clip, args + "--vid-stride 7 --name long");
  ASSERT_EQ(lone.exit_code, 0) << lone.output;
  EXPECT_NE(lone.output.find("5 frames, fewer than --vid-stride 7: none detected"), std::string::npos) << lone.output;
}

// A stream URL goes to OpenCV's videoio as it is: the clip served over HTTP by Python's http.server on a
// free local port gives the same frames (and labels) as the file.
TEST(DetectVideoCli, StreamUrlIsReadLikeTheFile) {
  if (const std::string problem = data::video_support_problem(); !problem.empty()) GTEST_SKIP() << problem;
  EXPECT_TRUE(data::is_stream_url("rtsp://camera/live"));
  EXPECT_TRUE(data::is_stream_url("HTTPS://host/clip.mp4"));
  EXPECT_FALSE(data::is_stream_url("clip.mp4"));
  EXPECT_FALSE(data::is_stream_url("http:/missing-slash"));
  // An image URL: upstream downloads it; kestrel says to.
  VideoRun images;
  const auto image_url = images.detect("https://example.com/zidane.jpg", "");
  EXPECT_EQ(image_url.exit_code, 1) << image_url.output;
  EXPECT_NE(image_url.output.find("an image URL; download the image"), std::string::npos) << image_url.output;
  VideoRun run;
  const std::string clip = make_clip(run.dir, cv::Size(192, 128));
  const std::string port_file = run.dir.file("port");
  test::write_file(run.dir.file("serve.py"),
                   "import functools, http.server, os\n"
                   "handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory='" + run.dir.path() + "')\n"
                   "http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None\n"
                   "server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)\n"
                   "open('" + port_file + ".tmp', 'w').write(str(server.server_address[1]))\n"
                   "os.rename('" + port_file + ".tmp', '" + port_file + "')\n"
                   "server.serve_forever()\n");
  const auto started = test::run_command(std::string(KESTREL_TEST_PYTHON) + " " + run.dir.file("serve.py") +
                                         " >/dev/null 2>&1 & echo $!");
  const std::string pid = started.output.substr(0, started.output.find('\n'));
  struct KillOnExit {  // also when an assertion below returns early
    std::string pid;
    ~KillOnExit() { test::run_command("kill " + pid); }
  } server{pid};
  for (int i = 0; i < 100 && !fs::exists(port_file); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::ifstream in(port_file);
  std::string port;
  in >> port;
  ASSERT_FALSE(port.empty()) << "the HTTP server did not start: " << started.output;
  const std::string url = "http://127.0.0.1:" + port + "/clip.avi";
  const auto r = run.detect(url, "--conf-thres 0.0001 --max-det 20 --save-txt --nosave --name url");
  const auto f = run.detect(clip, "--conf-thres 0.0001 --max-det 20 --save-txt --nosave --name file");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(r.output.find("video 1/1 (5/"), std::string::npos) << r.output;
  for (int k = 1; k <= 5; ++k) {
    const std::string name = "/labels/clip_" + std::to_string(k) + ".txt";
    ASSERT_TRUE(fs::exists(run.project + "/url" + name)) << name << "\n" << r.output;
    EXPECT_EQ(file_text(run.project + "/url" + name), file_text(run.project + "/file" + name)) << name;
  }
  // Escapes in the URL: the outputs are named as the file upstream downloads it to, "my clip.avi".
  fs::copy_file(clip, run.dir.file("my clip.avi"));
  const auto escaped = run.detect("http://127.0.0.1:" + port + "/my%20clip.avi", "--conf-thres 0.0001 --max-det 20 --save-txt --save-csv --nosave --name escaped");
  ASSERT_EQ(escaped.exit_code, 0) << escaped.output;
  EXPECT_EQ(file_text(run.project + "/escaped/labels/my clip_1.txt"), file_text(run.project + "/file/labels/clip_1.txt"));
  EXPECT_NE(file_text(run.project + "/escaped/predictions.csv").find("\nmy clip.avi,"), std::string::npos)
      << file_text(run.project + "/escaped/predictions.csv");
  // A URL without a video extension is a stream (detect.py's LoadStreams): "0: " lines, frames counted
  // from 0, 30 fps. This one has a frame count, so every frame is read, in order.
  fs::copy_file(clip, run.dir.file("live"));
  const auto live = run.detect("http://127.0.0.1:" + port + "/live", "--conf-thres 0.0001 --max-det 20 --save-txt --name live");
  ASSERT_EQ(live.exit_code, 0) << live.output;
  EXPECT_NE(live.output.find("\n0: 128x160 "), std::string::npos) << live.output;
  for (int k = 0; k < 5; ++k)
    EXPECT_EQ(file_text(run.project + "/live/labels/live_" + std::to_string(k) + ".txt"),
              file_text(run.project + "/file/labels/clip_" + std::to_string(k + 1) + ".txt")) << k;
  EXPECT_FALSE(fs::exists(run.project + "/live/labels/live_5.txt"));
  auto video = data::open_video(run.project + "/live/live.mp4");
  EXPECT_NEAR(video->fps(), 30, 1e-6);
}

TEST(DetectVideoCli, UnreadableVideoIsAnErrorNamingIt) {
  if (const std::string problem = data::video_support_problem(); !problem.empty()) GTEST_SKIP() << problem;
  VideoRun run;
  test::write_file(run.dir.file("broken.mp4"), "not a video");
  const auto r = run.detect(run.dir.file("broken.mp4"), "");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(run.dir.file("broken.mp4") + ": cannot read the video"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(run.project + "/exp")) << "no run folder for a source that cannot be read";
  const auto missing = run.detect(run.dir.file("gone.mov"), "");
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find(run.dir.file("gone.mov") + ": no such video file"), std::string::npos) << missing.output;
  // A stream nobody serves (port 1 refuses): said as a stream that could not be opened, not as a bad video.
  const auto refused = run.detect("http://127.0.0.1:1/clip.avi", "");
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find("http://127.0.0.1:1/clip.avi: cannot read the video (the stream could not be opened "
                                "(connection refused or timed out"), std::string::npos) << refused.output;
}

// A folder (or glob) with images and videos: the images, then the videos, numbered together (detect.py's
// LoadImages: files = images + videos), each video to <run>/<stem>.mp4 with its own frame labels.
TEST(DetectVideoCli, FoldersAndGlobsMixImagesAndVideos) {
  if (const std::string problem = data::video_support_problem(); !problem.empty()) GTEST_SKIP() << problem;
  VideoRun run;
  fs::create_directories(run.dir.file("media"));
  const std::string clip = make_clip(run.dir, cv::Size(192, 128));
  fs::rename(clip, run.dir.file("media/clip.avi"));
  fs::copy_file("data/demo/images/val/000000000139.jpg", run.dir.file("media/photo.jpg"));
  auto r = run.detect(run.dir.file("media"), "--conf-thres 0.0001 --max-det 5 --save-txt --save-json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string exp = run.project + "/exp";
  // --save-json: the one image is id 1 (its stem "photo" is not a number), the 5 frames 2..6 after it.
  {
    std::ifstream in(exp + "/predictions.json");
    std::map<int64_t, int> per_id;
    for (const auto& d : nlohmann::json::parse(in)) ++per_id[d.at("image_id").get<int64_t>()];
    EXPECT_EQ(per_id, (std::map<int64_t, int>{{1, 5}, {2, 5}, {3, 5}, {4, 5}, {5, 5}, {6, 5}}));
  }
  EXPECT_NE(r.output.find("image 1/2 " + run.dir.file("media/photo.jpg")), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("video 2/2 (5/5) " + run.dir.file("media/clip.avi")), std::string::npos) << r.output;
  EXPECT_LT(r.output.find("image 1/2"), r.output.find("video 2/2")) << r.output;
  EXPECT_TRUE(fs::exists(exp + "/photo.jpg"));
  EXPECT_TRUE(fs::exists(exp + "/clip.mp4"));
  EXPECT_TRUE(fs::exists(exp + "/labels/clip_5.txt"));
  EXPECT_NE(r.output.find("6 labels saved to " + exp + "/labels"), std::string::npos) << r.output;
  // The same through a glob (quoted: kestrel expands it, as detect.py).
  r = run.detect("'" + run.dir.file("media/*.avi") + "'", "--conf-thres 0.0001 --max-det 5 --nosave --save-txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("video 1/1 (1/5) " + run.dir.file("media/clip.avi")), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("image 1/"), std::string::npos) << r.output;
  // A video that cannot be read is reported and skipped, as an unreadable image: the run goes on.
  fs::create_directories(run.dir.file("mixed"));
  fs::copy_file("data/demo/images/val/000000000139.jpg", run.dir.file("mixed/photo.jpg"));
  test::write_file(run.dir.file("mixed/broken.mp4"), "not a video");
  r = run.detect(run.dir.file("mixed"), "--nosave");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("video 2/2 " + run.dir.file("mixed/broken.mp4") + ": skipped ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 of 2 files skipped"), std::string::npos) << r.output;
  // A stream in a .txt list (v7.0 reads such a list as streams, kestrel as paths) is named, not dropped.
  test::write_file(run.dir.file("mixed/list.txt"), "photo.jpg\nhttp://127.0.0.1:1/live\n");
  r = run.detect(run.dir.file("mixed/list.txt"), "--nosave");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("list.txt:2: 'http://127.0.0.1:1/live' is a camera or stream"), std::string::npos) << r.output;
  // A failure to write an output while a video is detected is not an unreadable video: the run stops,
  // naming the file, as for images (here a label file's name is taken by a folder).
  fs::create_directories(run.project + "/wf/labels/clip_3.txt");
  r = run.detect(run.dir.file("media"), "--conf-thres 0.0001 --max-det 5 --save-txt --exist-ok --name wf");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(run.project + "/wf/labels/clip_3.txt"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("skipped"), std::string::npos) << r.output;
}

// Two videos of one stem (a/clip.avi, b/clip.avi) and an image whose label file is a frame file's name
// (clip_1.jpg -> labels/clip_1.txt): each video gets a stem of its own, nothing is overwritten or mixed.
TEST(DetectVideoCli, VideosOfOneStemKeepTheirOwnOutputs) {
  if (const std::string problem = data::video_support_problem(); !problem.empty()) GTEST_SKIP() << problem;
  VideoRun run;
  const std::string clip = make_clip(run.dir, cv::Size(192, 128));
  for (const char* sub : {"media/a", "media/b"}) {
    fs::create_directories(run.dir.file(sub));
    fs::copy_file(clip, run.dir.file(std::string(sub) + "/clip.avi"));
  }
  fs::copy_file("data/demo/images/val/000000000139.jpg", run.dir.file("media/clip_1.jpg"));
  auto r = run.detect(run.dir.file("media"), "--conf-thres 0.0001 --max-det 5 --save-txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string exp = run.project + "/exp";
  EXPECT_TRUE(fs::exists(exp + "/clip2.mp4")) << r.output;  // "clip" would write labels/clip_1.txt
  EXPECT_TRUE(fs::exists(exp + "/clip3.mp4")) << r.output;
  EXPECT_FALSE(fs::exists(exp + "/clip.mp4")) << r.output;
  for (const char* label : {"clip_1.txt", "clip2_5.txt", "clip3_5.txt"}) EXPECT_TRUE(fs::exists(exp + "/labels/" + label)) << label;
  EXPECT_NE(r.output.find("11 labels saved to " + exp + "/labels"), std::string::npos) << r.output;
  // Without label files only the two videos' own stems clash.
  r = run.detect(run.dir.file("media"), "--max-det 5 --name plain");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(run.project + "/plain/clip.mp4")) << r.output;
  EXPECT_TRUE(fs::exists(run.project + "/plain/clip2.mp4")) << r.output;
}

// A frame that does not decode ends the video: said, not silently shorter.
TEST(DetectVideoCli, AVideoThatStopsEarlyIsReported) {
  if (const std::string problem = data::video_support_problem(); !problem.empty()) GTEST_SKIP() << problem;
  VideoRun run;
  const std::string clip = make_clip(run.dir, cv::Size(192, 128));
  // The start of a frame's JPEG in the middle of the MJPG AVI (after the third "00dc", a name the header
  // also holds) overwritten with zeros; the index still lists 5 frames.
  std::string bytes;
  {
    std::ifstream in(clip, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  size_t at = 0;
  for (int k = 0; k < 3; ++k) at = bytes.find("00dc", at + 1);
  ASSERT_NE(at, std::string::npos);
  std::fill(bytes.begin() + static_cast<long>(at) + 8, bytes.begin() + static_cast<long>(at) + 600, '\0');
  test::write_file(clip, bytes);
  const auto r = run.detect(clip, "--nosave");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t warning = r.output.find("WARNING: " + clip + ": ended after frame ");
  ASSERT_NE(warning, std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" although the container announced 5 (a frame that cannot be decoded ends a video)", warning),
            std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("(5/5)"), std::string::npos) << r.output;
}

// Ctrl-C during a video (SIGTERM here, handled alike: a script's background job ignores SIGINT): the frame
// in hand is finished, the annotated video closed (a killed mp4 writer leaves a file without its index, which
// no player opens) holding exactly the frames detected, exit 130.
TEST(DetectVideoCli, CtrlCClosesAPlayableVideo) {
  if (const std::string problem = data::video_support_problem(); !problem.empty()) GTEST_SKIP() << problem;
  VideoRun run;
  const std::string clip = run.dir.file("long.avi");
  {
    const cv::Mat photo = data::decode_image_file("data/demo/images/val/000000000139.jpg").image;
    cv::Mat frame;
    cv::resize(photo, frame, cv::Size(192, 128), 0, 0, cv::INTER_AREA);
    auto writer = data::create_video(clip, 30, frame.size(), "MJPG");
    for (int f = 0; f < 1500; ++f) ASSERT_TRUE(writer->write(frame));  // minutes of detection on the CPU
  }
  const std::string log = run.dir.file("log.txt");
  test::write_file(run.dir.file("stop.sh"),
                   test::kestrel_binary() + " detect --device cpu --img 160 --weights " + run.weights + " --source " + clip +
                       " --project " + run.project + " --save-txt --conf-thres 0.0001 --max-det 5 > " + log + " 2>&1 & pid=$!; "
                       "for i in $(seq 600); do grep -q '(3/1500)' " + log + " && break; sleep 0.1; done; "
                       "kill -TERM $pid; wait $pid; echo \"exit=$?\"\n");
  const auto r = test::run_command("bash " + run.dir.file("stop.sh"));
  const std::string output = file_text(log);
  EXPECT_NE(r.output.find("exit=130"), std::string::npos) << r.output << output;
  EXPECT_NE(output.find("Stopping after this frame"), std::string::npos) << output;
  int labels = 0;
  for (const auto& entry : fs::directory_iterator(run.project + "/exp/labels")) labels += entry.path().extension() == ".txt";
  auto video = data::open_video(run.project + "/exp/long.mp4");
  cv::Mat frame;
  int frames = 0;
  while (video->read(frame)) ++frames;
  EXPECT_GE(frames, 3);
  EXPECT_LT(frames, 1500);
  EXPECT_EQ(frames, labels) << "every frame detected is in the video";
}


// A .streams list (detect.py's LoadStreams): each source read on its own thread, one frame of each per
// round until the shortest ends. Video files are handed over frame by frame, so round r of a clip is the
// clip's frame r + 1 read on its own: the same labels. Paths are relative to the list; a stem listed
// twice gets an increment; stream outputs are written at 30 fps, as upstream's.
TEST(DetectVideoCli, StreamsListDetectsEverySourceInRounds) {
  if (const std::string problem = data::video_support_problem(); !problem.empty()) GTEST_SKIP() << problem;
  VideoRun run;
  const std::string clip = make_clip(run.dir, cv::Size(192, 128));  // 5 frames
  fs::create_directories(run.dir.file("media"));
  fs::copy_file(clip, run.dir.file("media/long.avi"));
  {  // 3 frames of another size
    const cv::Mat photo = data::decode_image_file("data/demo/images/val/000000000139.jpg").image;
    auto writer = data::create_video(run.dir.file("media/short.avi"), 10, cv::Size(160, 160), "MJPG");
    for (int f = 0; f < 3; ++f) {
      cv::Mat frame;
      cv::resize(photo(cv::Rect(0, 10 * f, photo.cols, photo.rows - 40)), frame, cv::Size(160, 160), 0, 0, cv::INTER_AREA);
      ASSERT_TRUE(writer->write(frame));
    }
  }
  fs::create_directories(run.dir.file("lists"));
  test::write_file(run.dir.file("lists/three.streams"), "../media/long.avi\n\n  ../media/short.avi \n" + run.dir.file("media/long.avi") + "\n");
  const std::string args = "--conf-thres 0.0001 --max-det 20 --save-txt --save-conf --save-csv";
  const auto r = run.detect(run.dir.file("lists/three.streams"), args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string exp = run.project + "/exp";
  EXPECT_NE(r.output.find("media/short.avi: ended after 3 frames; stopping the 3 streams"), std::string::npos) << r.output;
  // LoadStreams' line for each source opened (both clips written at 10 fps), then a blank line.
  EXPECT_NE(r.output.find("1/3: " + run.dir.file("media/long.avi") + "...  Success (5 frames 192x128 at 10.00 FPS)\n"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2/3: " + run.dir.file("media/short.avi") + "...  Success (3 frames 160x160 at 10.00 FPS)\n"
                          "3/3: " + run.dir.file("media/long.avi") + "...  Success (5 frames 192x128 at 10.00 FPS)\n\n"),
            std::string::npos) << r.output;
  for (const char* prefix : {"0: ", "1: ", "2: "}) EXPECT_NE(r.output.find(std::string("\n") + prefix), std::string::npos) << r.output;
  // Each clip alone, as the reference.
  for (const char* stem : {"long", "short"}) {
    const auto alone = run.detect(run.dir.file(std::string("media/") + stem + ".avi"), args + " --nosave --name " + stem);
    ASSERT_EQ(alone.exit_code, 0) << alone.output;
  }
  for (int round = 0; round < 3; ++round) {
    const std::string frame = std::to_string(round + 1), n = std::to_string(round);
    const std::string long_ref = file_text(run.project + "/long/labels/long_" + frame + ".txt");
    ASSERT_FALSE(long_ref.empty()) << frame;
    EXPECT_EQ(file_text(exp + "/labels/long_" + n + ".txt"), long_ref) << "round " << round;
    EXPECT_EQ(file_text(exp + "/labels/long2_" + n + ".txt"), long_ref) << "round " << round << ": the same clip, listed again";
    EXPECT_EQ(file_text(exp + "/labels/short_" + n + ".txt"), file_text(run.project + "/short/labels/short_" + frame + ".txt"))
        << "round " << round;
  }
  EXPECT_FALSE(fs::exists(exp + "/labels/long_3.txt")) << "the shortest source ends every stream";
  // predictions.csv names the frames by the source's file name, as upstream's Path(clean_str(source)).name.
  const std::string csv = file_text(exp + "/predictions.csv");
  EXPECT_NE(csv.find("\r\nlong.avi,"), std::string::npos);
  EXPECT_NE(csv.find("\r\nshort.avi,"), std::string::npos);
  for (const auto& [name, size] : {std::pair<std::string, cv::Size>{"long", {192, 128}}, {"short", {160, 160}}, {"long2", {192, 128}}}) {
    auto video = data::open_video(exp + "/" + name + ".mp4");
    cv::Mat frame;
    int frames = 0;
    while (video->read(frame)) {
      EXPECT_EQ(frame.size(), size) << name;
      ++frames;
    }
    EXPECT_EQ(frames, 3) << name;
    EXPECT_NEAR(video->fps(), 30, 1e-6) << name;
  }

  // --vid-stride 2: upstream's LoadStreams keeps frames 0, 2, 4 ... (1-based 1, 3, 5): two rounds of the
  // 3-frame clip.
  const auto stride = run.detect(run.dir.file("lists/three.streams"), args + " --nosave --vid-stride 2 --name stride");
  ASSERT_EQ(stride.exit_code, 0) << stride.output;
  for (const auto& [round, frame] : {std::pair<int, int>{0, 1}, {1, 3}})
    EXPECT_EQ(file_text(run.project + "/stride/labels/long_" + std::to_string(round) + ".txt"),
              file_text(run.project + "/long/labels/long_" + std::to_string(frame) + ".txt")) << round;
  EXPECT_FALSE(fs::exists(run.project + "/stride/labels/long_2.txt"));

  // A source that cannot be opened, or a list without sources: an error naming the list, no run folder.
  test::write_file(run.dir.file("lists/bad.streams"), "../media/long.avi\n../media/gone.avi\n");
  auto bad = run.detect(run.dir.file("lists/bad.streams"), "--name bad");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("bad.streams: source 2/2: "), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("gone.avi"), std::string::npos) << bad.output;
  test::write_file(run.dir.file("lists/empty.streams"), "\n  \n");
  bad = run.detect(run.dir.file("lists/empty.streams"), "--name bad");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("empty.streams: lists no camera, stream or video"), std::string::npos) << bad.output;
  // A URL of any scheme is handed over as written (LoadStreams), not taken for a path beside the list.
  test::write_file(run.dir.file("lists/tcp.streams"), "tcp://127.0.0.1:1\n");
  bad = run.detect(run.dir.file("lists/tcp.streams"), "--name bad");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("tcp.streams: source 1/1: tcp://127.0.0.1:1: cannot read the video"), std::string::npos) << bad.output;
  bad = run.detect(run.dir.file("lists/none.streams"), "--name bad");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("none.streams: file not found"), std::string::npos) << bad.output;
  EXPECT_FALSE(fs::exists(run.project + "/bad"));
}

}  // namespace
}  // namespace kestrel
