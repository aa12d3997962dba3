// kestrel detect: box scaling back to the original image, label-file lines, summaries, the class filter,
// and the kestrel binary end to end on demo images (weights of a freshly built, untrained yolov5n).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <ATen/ATen.h>

#include "data/data_test_support.h"
#include "kestrel/data/augment.h"
#include "kestrel/data/image_io.h"
#include "kestrel/eval/detector.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/weights_file.h"
#include "test_support.h"

namespace kestrel::eval {
namespace {

namespace fs = std::filesystem;

at::Tensor rows(std::vector<float> values) {
  const int64_t n = static_cast<int64_t>(values.size()) / 6;
  return at::tensor(values, at::kFloat).view({n, 6});
}

void expect_row(const at::Tensor& t, int64_t i, std::vector<float> expected) {
  for (size_t k = 0; k < expected.size(); ++k)
    EXPECT_NEAR(t[i][static_cast<int64_t>(k)].item<float>(), expected[k], 1e-3) << "row " << i << " column " << k;
}

// Seeded: two calls give the same weights (the class-filter test compares two detectors).
std::shared_ptr<models::YoloModel> tiny_model(int nc) {
  torch::manual_seed(0);
  return models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), nc);
}

TEST(DetectScaleBoxes, WideImagePaddedTopAndBottom) {
  // 1000 x 333 at 640 with stride 32: gain 0.64, resized 640 x 213 (round(213.12)), height padded by
  // 427 % 32 = 11 rows (5 above, 6 below) to 640 x 224.
  const cv::Mat image(333, 1000, CV_8UC3, cv::Scalar::all(0));
  const data::Letterbox lb = data::letterbox(image, 640, 640, data::LetterboxOptions{});
  ASSERT_EQ(lb.image.size(), cv::Size(640, 224));
  // Upstream recomputes from the shapes: gain = min(224 / 333, 640 / 1000) = 0.64,
  // pad = ((640 - 640) / 2, (224 - 213.12) / 2) = (0, 5.44).
  const at::Tensor input = rows({64, 69.44f, 320, 133.44f, 0.9f, 2,  // -> 100, 100, 500, 200
                                 -10, 0, 700, 230, 0.5f, 7});     // outside on every side -> clipped
  const at::Tensor out = scale_boxes_to_original(input, lb.image.size(), image.size());
  expect_row(out, 0, {100, 100, 500, 200, 0.9f, 2});
  // x1 -15.6 -> 0, y1 -8.5 -> 0, x2 1093.75 -> 1000, y2 350.875 -> 333; conf and class untouched
  expect_row(out, 1, {0, 0, 1000, 333, 0.5f, 7});
  EXPECT_EQ(input[0][0].item<float>(), 64) << "the input is not modified";
}

TEST(DetectScaleBoxes, TallImagePaddedLeftAndRight) {
  // 480 x 640 (w x h) at 320: gain 0.5, resized 240 x 320, width padded by 80 % 32 = 16 (8 per side).
  const cv::Mat image(640, 480, CV_8UC3, cv::Scalar::all(0));
  const data::Letterbox lb = data::letterbox(image, 320, 320, data::LetterboxOptions{});
  ASSERT_EQ(lb.image.size(), cv::Size(256, 320));
  const at::Tensor out = scale_boxes_to_original(rows({8, 0, 248, 320, 0.3f, 0, 58, 50, 108, 150, 0.2f, 1}),
                                                 lb.image.size(), image.size());
  expect_row(out, 0, {0, 0, 480, 640, 0.3f, 0});
  expect_row(out, 1, {100, 100, 200, 300, 0.2f, 1});
  EXPECT_EQ(scale_boxes_to_original(at::zeros({0, 6}), {256, 320}, {480, 640}).size(0), 0);
}

TEST(DetectLabelLine, UpstreamPercentGFormat) {
  // Box 100..500 x 100..200 in a 1000 x 333 image: cx 0.3, cy 150/333, w 0.4, h 100/333 ('%g': 6 digits).
  const at::Tensor r = rows({100, 100, 500, 200, 0.87654321f, 3});
  EXPECT_EQ(label_line(r[0], {1000, 333}, false), "3 0.3 0.45045 0.4 0.3003");
  EXPECT_EQ(label_line(r[0], {1000, 333}, true), "3 0.3 0.45045 0.4 0.3003 0.876543");
  // Whole image: integers print without a decimal point, as Python's '%g'.
  EXPECT_EQ(label_line(rows({0, 0, 640, 480, 1, 0})[0], {640, 480}, true), "0 0.5 0.5 1 1 1");
  // Small values switch to exponent form like Python: '%g' % 1e-05 == '1e-05'.
  EXPECT_EQ(label_line(rows({0, 0, 0.01f, 0.01f, 0.25f, 12})[0], {1000, 1000}, true), "12 5e-06 5e-06 1e-05 1e-05 0.25");
}

TEST(DetectLabelLine, PascalVocCorners) {
  // YOLOv5 detect.py --save-format 1: the corners over the image's size. The same box as above: x1 0.1,
  // y1 100/333, x2 0.5, y2 200/333 = 0.6006006 ('%g': 0.600601).
  const at::Tensor r = rows({100, 100, 500, 200, 0.87654321f, 3});
  EXPECT_EQ(label_line(r[0], {1000, 333}, false, LabelFormat::pascal_voc), "3 0.1 0.3003 0.5 0.600601");
  EXPECT_EQ(label_line(r[0], {1000, 333}, true, LabelFormat::pascal_voc), "3 0.1 0.3003 0.5 0.600601 0.876543");
  EXPECT_EQ(label_line(rows({0, 0, 640, 480, 1, 0})[0], {640, 480}, false, LabelFormat::pascal_voc), "0 0 0 1 1");
}

TEST(DetectPredictionsCsv, PythonCsvQuotingAndTwoDecimals) {
  // Python's csv module (excel dialect, QUOTE_MINIMAL) quotes a field that holds a comma, a quote or a line
  // break, doubling its quotes, and ends rows with CRLF; '%.2f' rounds the float's exact value, ties to
  // even (0.125 -> 0.12, 0.875 -> 0.88), as Python's f"{x:.2f}".
  EXPECT_STREQ(kPredictionsCsvHeader, "Image Name,Prediction,Confidence\r\n");
  EXPECT_EQ(predictions_csv_row("000000000139.jpg", "person", 0.876f), "000000000139.jpg,person,0.88\r\n");
  EXPECT_EQ(predictions_csv_row("a,b.jpg", "say \"hi\"", 0.5f), "\"a,b.jpg\",\"say \"\"hi\"\"\",0.50\r\n");
  EXPECT_EQ(predictions_csv_row("x\ny.jpg", "tie", 0.125f), "\"x\ny.jpg\",tie,0.12\r\n");
  EXPECT_EQ(predictions_csv_row("sp ace.jpg", "traffic light", 0.875f), "sp ace.jpg,traffic light,0.88\r\n");
}

TEST(DetectPredictionsCsv, StreamNamesAsPathOfCleanStr) {
  // Expected: Python's Path(clean_str(url)).name with YOLOv5's clean_str (run by hand, 2026-12-02).
  EXPECT_EQ(stream_csv_name("rtsp://host/live"), "live");
  EXPECT_EQ(stream_csv_name("http://h/watch?v=x"), "watch_v_x");
  EXPECT_EQ(stream_csv_name("0"), "0");
  EXPECT_EQ(stream_csv_name("http://x/a/"), "a");
  EXPECT_EQ(stream_csv_name("rtsp://user:pw@cam¿1/s€ream"), "s_ream");
  EXPECT_EQ(stream_csv_name("rtmp://h"), "h");
}

TEST(DetectSummary, CountsPerClassInClassOrder) {
  const std::vector<std::string> names = {"person", "bicycle", "car", "tie"};
  EXPECT_EQ(summarize_detections(rows({0, 0, 1, 1, 0.9f, 3, 0, 0, 1, 1, 0.8f, 0, 0, 0, 1, 1, 0.7f, 0}), names),
            "2 persons, 1 tie, ");
  EXPECT_EQ(summarize_detections(at::zeros({0, 6}), names), "(no detections), ");
}

TEST(Detector, ClassFilterAndBoxesInsideTheOriginal) {
  // An untrained 3-class yolov5n: every score is near the bias priors, so conf 0.0001 keeps plenty.
  const cv::Mat image = [] {
    cv::Mat m(150, 260, CV_8UC3);
    cv::randu(m, 0, 255);
    return m;
  }();
  DetectorOptions o;
  o.img_height = o.img_width = 100;  // rounded up to 128
  o.nms.conf_thres = 0.0001;
  o.nms.max_det = 1000;
  Detector all(tiny_model(3), c10::Device(c10::kCPU), o);
  EXPECT_EQ(all.network_size(), cv::Size(128, 128));
  const Detections d = all.detect(image);
  ASSERT_GT(d.boxes.size(0), 0);
  // 260 x 150 at 128: gain 128/260, resized 128 x 74, padded by 54 % 32 = 22 to 128 x 96
  EXPECT_EQ(d.input_size, cv::Size(128, 96));
  EXPECT_GE(d.boxes.slice(1, 0, 4).min().item<float>(), 0);
  EXPECT_LE(d.boxes.select(1, 0).max().item<float>(), 260);
  EXPECT_LE(d.boxes.select(1, 2).max().item<float>(), 260);
  EXPECT_LE(d.boxes.select(1, 3).max().item<float>(), 150);
  // detect.py rounds the boxes to whole pixels before writing labels, crops and drawing them.
  const at::Tensor corners = d.boxes.slice(1, 0, 4);
  EXPECT_TRUE(corners.equal(corners.round())) << corners;
  const at::Tensor classes = d.boxes.select(1, 5);
  ASSERT_GT(classes.eq(1).sum().item<int64_t>(), 0) << "the untrained model proposes class 1 somewhere";
  ASSERT_GT(classes.ne(1).sum().item<int64_t>(), 0);

  o.nms.classes = {1};
  Detector only(tiny_model(3), c10::Device(c10::kCPU), o);
  const Detections f = only.detect(image);
  ASSERT_GT(f.boxes.size(0), 0);
  EXPECT_TRUE(f.boxes.select(1, 5).eq(1).all().item<bool>());
  // Same weights, class-aware NMS: exactly the class-1 detections of the unfiltered run (none cut by max_det).
  ASSERT_LT(d.boxes.size(0), 1000);
  EXPECT_EQ(f.boxes.size(0), classes.eq(1).sum().item<int64_t>());
  EXPECT_EQ(only.images(), 1);
}

// --augment goes through predict_augmented (checked against upstream in test_time_augment_test.cpp):
// the detections differ from the single pass and stay inside the original image.
TEST(Detector, AugmentedInferenceKeepsBoxesInsideTheOriginal) {
  cv::Mat image(150, 260, CV_8UC3);
  cv::randu(image, 0, 255);
  DetectorOptions o;
  o.img_height = o.img_width = 128;
  o.nms.conf_thres = 0.0001;
  const Detections plain = Detector(tiny_model(3), c10::Device(c10::kCPU), o).detect(image);
  o.augment = true;
  const Detections d = Detector(tiny_model(3), c10::Device(c10::kCPU), o).detect(image);
  ASSERT_GT(d.boxes.size(0), 0);
  EXPECT_EQ(d.input_size, plain.input_size);
  EXPECT_FALSE(d.boxes.sizes() == plain.boxes.sizes() && at::allclose(d.boxes, plain.boxes));
  EXPECT_GE(d.boxes.slice(1, 0, 4).min().item<float>(), 0);
  EXPECT_LE(d.boxes.select(1, 2).max().item<float>(), 260);
  EXPECT_LE(d.boxes.select(1, 3).max().item<float>(), 150);
}

// save_one_box by hand (gain 1.02, pad 10, float32). [10, 20, 50, 60]: centre (30, 40), sides
// 40 * 1.02 + 10 = 50.8, corners 4.6 -> 4, 14.6 -> 14, 55.4 -> 55, 65.4 -> 65. [0, 0, 20, 10]: x from
// -5.2 (truncated to -5, clipped to 0) to 25.2; y from -5.1 to 15.1. [90, 90, 100, 100]: 84.9 .. 105.1,
// clipped to the 100-pixel image.
TEST(DetectCrop, SaveOneBoxRegion) {
  const auto region = [](std::vector<float> row) { return crop_region(at::tensor(row), cv::Size(100, 100)); };
  EXPECT_EQ(region({10, 20, 50, 60, 0.9f, 1}), cv::Rect(4, 14, 51, 51));
  EXPECT_EQ(region({0, 0, 20, 10, 0.9f, 1}), cv::Rect(0, 0, 25, 15));
  EXPECT_EQ(region({90, 90, 100, 100, 0.9f, 1}), cv::Rect(84, 84, 16, 16));
  EXPECT_TRUE(region({100, 50, 100, 60, 0.9f, 1}).width > 0);  // a zero-width box still gets the 10-pixel pad
  EXPECT_TRUE(crop_region(at::tensor(std::vector<float>{120, 120, 130, 130}), cv::Size(100, 100)).empty());
}

// Class names come from the weights file: a crop folder is one path component, never a way out of crops/.
TEST(DetectCrop, FolderNamesStayInsideTheCropsFolder) {
  const std::vector<std::string> names{"traffic light", "../../../escaped", "..", "", "a/b", "."};
  EXPECT_EQ(crop_folder_name(names, 0), "traffic light");  // as upstream
  EXPECT_EQ(crop_folder_name(names, 1), ".._.._.._escaped");
  EXPECT_EQ(crop_folder_name(names, 2), "2");
  EXPECT_EQ(crop_folder_name(names, 3), "3");
  EXPECT_EQ(crop_folder_name(names, 4), "a_b");
  EXPECT_EQ(crop_folder_name(names, 5), "5");
  EXPECT_EQ(crop_folder_name(names, 9), "9");  // beyond the names
  for (size_t c = 0; c < names.size(); ++c) {
    const std::filesystem::path folder = std::filesystem::path("run/crops") / crop_folder_name(names, c);
    EXPECT_EQ(folder.lexically_normal().parent_path(), std::filesystem::path("run/crops")) << c;
  }
}

// ---- the kestrel binary ------------------------------------------------------------------------------

struct DetectRun {
  test::TempDir dir;
  std::string weights = dir.file("w.safetensors"), source = dir.file("src"), project = dir.file("runs");
  const std::vector<std::string> demo = {"000000000139.jpg", "000000000632.jpg"};

  DetectRun() {
    auto model = tiny_model(3);
    models::save_model_weights(weights, *model, models::describe_config("yolov5n", {"person", "bicycle", "car"}));
    fs::create_directories(source);
    for (const auto& name : demo) fs::copy_file("data/demo/images/val/" + name, source + "/" + name);
  }
  test::CommandResult detect(const std::string& args) const {
    return test::run_command(test::kestrel_binary() + " detect --device cpu --weights " + weights + " --source " + source +
                             " --project " + project + " --img 320 " + args);
  }
};

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(DetectCli, WritesAnnotatedImagesLabelsAndUpstreamLines) {
  DetectRun run;
  const auto r = run.detect("--conf-thres 0.0001 --save-txt --save-conf --max-det 50");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string exp = run.project + "/exp";
  // 000000000139.jpg is 640 x 426: at 320 gain 0.5, 320 x 213 padded to 320 x 224
  EXPECT_TRUE(std::regex_search(r.output, std::regex("image 1/2 " + run.source + "/000000000139.jpg: 224x320 (\\d+ (person|bicycle|car)s?, )+[0-9.]+ms\n")))
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("image 2/2 " + run.source + "/000000000632.jpg: \\d+x\\d+ .*ms\n"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("Speed: [0-9.]+ms pre-process, [0-9.]+ms inference, [0-9.]+ms NMS per image at shape \\(1, 3, 320, 320\\)")))
      << r.output;
  EXPECT_NE(r.output.find("Results saved to " + exp + "\n2 labels saved to " + exp + "/labels\n"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(exp + "/weights")) << "detect runs have no weights folder";
  for (const auto& name : run.demo) {
    EXPECT_GT(fs::file_size(exp + "/" + name), 1000) << name;
    const auto labels = lines_of(exp + "/labels/" + fs::path(name).stem().string() + ".txt");
    ASSERT_GT(labels.size(), 0u) << name;
    EXPECT_LE(labels.size(), 50u) << "--max-det";
    double previous_conf = 0;
    for (const auto& line : labels) {
      std::istringstream in(line);
      double cls, cx, cy, w, h, conf;
      ASSERT_TRUE(in >> cls >> cx >> cy >> w >> h >> conf) << line;
      EXPECT_TRUE(in.eof()) << line;
      EXPECT_TRUE(cls == 0 || cls == 1 || cls == 2) << line;
      for (double v : {cx, cy, w, h}) EXPECT_TRUE(v >= 0 && v <= 1) << line;
      EXPECT_GE(conf, 0.0001) << line;
      EXPECT_GE(conf, previous_conf) << "upstream writes reversed(det): least confident first";
      previous_conf = conf;
    }
  }

  // The same run again goes to exp2; --nosave writes no images; --classes keeps one class.
  const auto again = run.detect("--conf-thres 0.0001 --save-txt --nosave --classes 2");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("Results saved to " + run.project + "/exp2"), std::string::npos) << again.output;
  EXPECT_FALSE(fs::exists(run.project + "/exp2/" + run.demo[0]));
  for (const auto& name : run.demo)
    for (const auto& line : lines_of(run.project + "/exp2/labels/" + fs::path(name).stem().string() + ".txt")) {
      EXPECT_EQ(line.rfind("2 ", 0), 0u) << line;
      EXPECT_EQ(std::count(line.begin(), line.end(), ' '), 4) << "no confidence without --save-conf: " << line;
    }
}

// detect.py reads a truncated JPEG with cv2.imread (the missing part grey) and detects on it: so does kestrel,
// with a warning (datasets skip such a file). A source folder that holds --project (`--source .`) does not take
// earlier runs' outputs as sources.
TEST(DetectCli, TruncatedJpegsAreDetectedOnAndRunsAreNotSources) {
  DetectRun run;
  std::ifstream in("data/demo/images/val/000000000139.jpg", std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  test::write_bytes(run.source + "/cut.jpg", std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<long>(bytes.size() * 4 / 5)));
  const std::string runs = run.source + "/runs";
  for (const char* name : {"first", "second"}) {
    const auto r = test::run_command(test::kestrel_binary() + " detect --device cpu --weights " + run.weights + " --source " +
                                     run.source + " --project " + runs + " --img 320 --name " + name);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("image 3/3 " + run.source + "/cut.jpg: 224x320 "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("WARNING: " + run.source + "/cut.jpg: truncated JPEG, the missing part grey"), std::string::npos) << r.output;
    EXPECT_TRUE(fs::exists(runs + "/" + name + "/cut.jpg")) << r.output;
    if (std::string(name) == "second")
      EXPECT_NE(r.output.find("note: 3 files below --project " + runs + " (earlier runs' outputs) are not taken as sources"),
                std::string::npos) << r.output;
  }
  // Only a folder searched through the project is filtered: an earlier run's folder or file as --source is read.
  for (const std::string& source : {runs + "/first", runs + "/first/cut.jpg"}) {
    const auto r = test::run_command(test::kestrel_binary() + " detect --device cpu --weights " + run.weights + " --source " +
                                     source + " --project " + runs + " --img 320 --name again");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("not taken as sources"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("cut.jpg: 224x320 "), std::string::npos) << r.output;
  }
  // Thresholds outside [0, 1] are refused at the command line, naming the flag, before any folder is made.
  for (const char* flag : {"--conf-thres 2", "--iou-thres nan", "--conf-thres -0.1"}) {
    const auto r = run.detect(std::string(flag) + " --name bad");
    EXPECT_NE(r.exit_code, 0) << flag;
    EXPECT_NE(r.output.find(std::string(flag).substr(0, std::string(flag).find(' '))), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("in [0, 1]"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(fs::exists(run.project + "/bad"));
  // A glob starting with "screen" is a glob (detect.py's screen capture is the source "screen ...").
  fs::create_directories(run.dir.file("screenshots"));
  fs::copy_file(run.source + "/" + run.demo[0], run.dir.file("screenshots/a.jpg"));
  const auto glob = test::run_command("cd " + run.dir.path() + " && " + test::kestrel_binary() + " detect --device cpu --weights " +
                                      run.weights + " --source 'screenshots/*.jpg' --project " + run.project + " --img 320 --name glob");
  EXPECT_EQ(glob.exit_code, 0) << glob.output;
  EXPECT_NE(glob.output.find("image 1/1 "), std::string::npos) << glob.output;
}

TEST(DetectCli, CorruptImageIsReportedAndSkipped) {
  DetectRun run;
  test::write_file(run.source + "/broken.jpg", "not a jpeg");
  // Default thresholds: an untrained model detects nothing at conf 0.25.
  const auto r = run.detect("--name plain");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("image 3/3 " + run.source + "/broken.jpg: skipped ("), std::string::npos) << r.output;
  // Neither JPEG nor PNG: the OpenCV plugin's verdict, or without the plugin the formats kestrel reads alone.
  EXPECT_TRUE(r.output.find("broken.jpg: corrupt or unsupported image") != std::string::npos ||
              r.output.find("broken.jpg: not a JPEG or PNG") != std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 of 3 images skipped"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("000000000139.jpg: 224x320 (no detections), "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Results saved to " + run.project + "/plain\n"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(run.project + "/plain/" + run.demo[0]));
  EXPECT_TRUE(fs::exists(run.project + "/plain/" + run.demo[1]));
  EXPECT_FALSE(fs::exists(run.project + "/plain/broken.jpg"));

  // Nothing readable at all is an error, not a silent success.
  test::TempDir bad;
  test::write_file(bad.file("x.png"), "nope");
  const auto none = test::run_command(test::kestrel_binary() + " detect --device cpu --weights " + run.weights +
                                      " --source " + bad.path() + " --project " + run.project);
  EXPECT_EQ(none.exit_code, 1) << none.output;
  EXPECT_NE(none.output.find("none of the 1 images could be read"), std::string::npos) << none.output;
}

// --save-crop: each detection cut into crops/<class name>/<stem>.jpg, <stem>2.jpg, ... (upstream's
// increment_path); as many crops per class and image as label lines of that class.
TEST(DetectCli, SaveCropCutsEveryDetectionIntoItsClassFolder) {
  DetectRun run;
  const auto r = run.detect("--conf-thres 0.0001 --max-det 4 --save-txt --save-crop --nosave --name crops");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string exp = run.project + "/crops";
  const std::vector<std::string> names = {"person", "bicycle", "car"};
  int64_t crops = 0;
  for (const auto& image : run.demo) {
    const std::string stem = fs::path(image).stem().string();
    std::map<int, int> per_class;
    for (const auto& line : lines_of(exp + "/labels/" + stem + ".txt")) ++per_class[std::stoi(line)];
    for (const auto& [cls, n] : per_class) {
      const std::string dir = exp + "/crops/" + names[static_cast<size_t>(cls)] + "/";
      for (int k = 1; k <= n; ++k) {
        const std::string file = dir + stem + (k == 1 ? "" : std::to_string(k)) + ".jpg";
        ASSERT_TRUE(fs::exists(file)) << file << "\n" << r.output;
        const cv::Mat crop = data::decode_image_file(file).image;
        EXPECT_GT(crop.total(), 0u);
        EXPECT_LE(crop.cols, 640) << file;
        ++crops;
      }
      EXPECT_FALSE(fs::exists(dir + stem + std::to_string(n + 1) + ".jpg"));
    }
  }
  EXPECT_EQ(crops, 8) << "4 detections in each of the 2 images";
}

// Crops of one class and stem are numbered on past any files already there (a rerun with --exist-ok, a
// video's thousands of frames): upstream's search stops at 9999 and overwrites that file from then on.
TEST(DetectCli, SaveCropNumbersPastTenThousand) {
  DetectRun run;
  fs::remove(run.source + "/000000000632.jpg");
  const std::string dir = run.project + "/crops/crops/person";
  fs::create_directories(dir);
  std::ofstream(dir + "/000000000139.jpg").put('x');
  for (int n = 2; n <= 9999; ++n) std::ofstream(dir + "/000000000139" + std::to_string(n) + ".jpg").put('x');
  const auto r = run.detect("--conf-thres 0.0001 --max-det 3 --classes 0 --save-crop --nosave --name crops --exist-ok");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string file = dir + "/00000000013910000.jpg";
  ASSERT_TRUE(fs::exists(file)) << r.output;
  EXPECT_GT(data::decode_image_file(file).image.total(), 0u);
  EXPECT_EQ(fs::file_size(dir + "/0000000001399999.jpg"), 1u) << "an earlier crop was overwritten";
}

}  // namespace
}  // namespace kestrel::eval
