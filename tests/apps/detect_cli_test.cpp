// kestrel detect's per-family defaults: YOLOv7's detect.py keeps at most 300 boxes an image (its NMS has no
// max_det argument), YOLOv5's detect.py 1000 (--max-det); an explicit --max-det wins for both. And
// detect.py's other spellings, and where the outputs of images with the same name go.
#include <gtest/gtest.h>

#include <filesystem>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>

#include "data/data_test_support.h"
#include "kestrel/data/image_io.h"
#include "kestrel/data/video_io.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/weights_file.h"
#include "kestrel/models/yolo_model.h"
#include "test_support.h"

namespace kestrel {
namespace {

// An untrained 3-class (a, b, c) `config` saved as kestrel weights at `path`.
void write_untrained_weights(const std::string& path, const std::string& config = "yolov5n") {
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path(config)), 3);
  models::save_model_weights(path, *model, models::describe_config(config, {"a", "b", "c"}));
}

// Label lines written for the demo image by an untrained 3-class `config` at conf 0.0001 and IoU 0.99 (every
// candidate box survives NMS: far more than 1000 of them at 320 px).
int64_t boxes_written(const std::string& config, const std::string& args) {
  test::TempDir dir;
  write_untrained_weights(dir.file("w.safetensors"), config);
  const auto r = test::run_command(test::kestrel_binary() + " detect --device cpu --img 320 --conf-thres 0.0001 --iou-thres 0.99"
                                   " --save-txt --nosave --weights " + dir.file("w.safetensors") +
                                   " --source data/demo/images/val/000000000139.jpg --project " + dir.file("runs") + " " + args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream labels(dir.file("runs/exp/labels/000000000139.txt"));
  int64_t lines = 0;
  for (std::string line; std::getline(labels, line);) ++lines;
  return lines;
}

TEST(DetectCli, MaxDetDefaultsPerFamily) {
  EXPECT_EQ(boxes_written("yolov7-tiny", ""), 300);
  EXPECT_EQ(boxes_written("yolov7-tiny", "--max-det 500"), 500);
  EXPECT_EQ(boxes_written("yolov5n", ""), 1000);
}

// detect.py's spellings: --data is read (a warning when its names differ from the weights', which name
// the classes, or when it cannot be used), --update is accepted, --view-img and --dnn are refused with the reason.
TEST(DetectCli, UpstreamSpellings) {
  test::TempDir dir;
  write_untrained_weights(dir.file("w.safetensors"));
  {
    std::ofstream yaml(dir.file("abc.yaml"));
    yaml << "path: " << std::filesystem::absolute("data/demo").string() << "\ntrain: images/train\nval: images/val\n"
         << "nc: 3\nnames: [a, b, c]\n";
  }
  const std::string detect = test::kestrel_binary() + " detect --device cpu --img 160 --nosave --weights " +
                             dir.file("w.safetensors") + " --source data/demo/images/val/000000000139.jpg --project " +
                             dir.file("runs") + " ";
  auto r = test::run_command(detect + "--data data/demo/demo.yaml --update");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("WARNING: --data data/demo/demo.yaml names 80 classes unlike the 3 of"), std::string::npos)
      << r.output;
  r = test::run_command(detect + "--data " + dir.file("abc.yaml"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("WARNING: --data"), std::string::npos) << r.output;
  // detect.py does not read --data for weights with names: a file kestrel cannot use is only a warning.
  r = test::run_command(detect + "--data " + dir.file("missing.yaml"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("WARNING: --data ignored (the class names come from the weights): "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("missing.yaml"), std::string::npos) << r.output;
  // A class the model does not have would drop every box without a word (detect.py): refused.
  r = test::run_command(detect + "--classes 1 500");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--classes 500: " + dir.file("w.safetensors") + " has classes 0..2"), std::string::npos) << r.output;
  r = test::run_command(detect + "--view-img");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("kestrel opens no windows"), std::string::npos) << r.output;
  r = test::run_command(detect + "--dnn");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("onnxruntime"), std::string::npos) << r.output;
  r = test::run_command(test::kestrel_binary() + " val --device cpu --dnn --weights " + dir.file("w.safetensors"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("onnxruntime"), std::string::npos) << r.output;
  // detect.py's screen capture ("screen" and its region): refused with the reason, before a run folder;
  // an image file whose name starts so is an image as any other.
  const std::string in_dir = "cd " + dir.path() + " && " + test::kestrel_binary() + " detect --device cpu --img 160 --weights " +
                             dir.file("w.safetensors") + " --project screen-runs --source ";
  r = test::run_command(in_dir + "'screen 0 100 100 512 256'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--source screen 0 100 100 512 256: detect.py's screen capture is not supported"), std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("screen-runs")));
  // A YouTube page (detect.py: pafy), given or in a .streams list: refused with what to do, before a run folder.
  test::write_file(dir.file("yt.streams"), "rtsp://cam.local/live\nhttps://youtu.be/Zgi9g1ksQHc\n");
  for (const std::string& source : {std::string("'https://www.youtube.com/watch?v=Zgi9g1ksQHc'"), std::string("yt.streams")}) {
    r = test::run_command(in_dir + source);
    EXPECT_NE(r.exit_code, 0) << source;
    EXPECT_NE(r.output.find("is a YouTube page (detect.py reads it through pafy); kestrel has no YouTube client"),
              std::string::npos) << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("screen-runs")));
  // detect.py's default source lies in its repository: found from any working folder. A size below the
  // stride is rounded up with detect.py's warning (not refused).
  r = test::run_command("cd " + dir.path() + " && " + test::kestrel_binary() + " detect --device cpu --img 16 --weights " +
                        dir.file("w.safetensors") + " --project default-runs --nosave");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("WARNING: --img-size [16, 16] must be multiple of max stride 32, updating to [32, 32]"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("data/demo/images/val/"), std::string::npos) << r.output;
  std::filesystem::copy_file("data/demo/images/val/000000000139.jpg", dir.file("screenshot.jpg"));
  r = test::run_command(in_dir + "screenshot.jpg");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("screen-runs/exp/screenshot.jpg"))) << r.output;
  // --project '': the working folder, as train and val (and detect.py's Path('') / 'exp')
  r = test::run_command("cd " + dir.path() + " && " + test::kestrel_binary() + " detect --device cpu --img 160 --weights " +
                        dir.file("w.safetensors") + " --project '' --source screenshot.jpg");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("exp/screenshot.jpg"))) << r.output;
  // ... where a source folder above it leaves out only the run folders (exp, exp2, ...), not the user's files
  std::filesystem::create_directories(dir.file("work"));
  std::filesystem::copy_file("data/demo/images/val/000000000139.jpg", dir.file("work/own.jpg"));
  const std::string from_work = "cd " + dir.file("work") + " && " + test::kestrel_binary() + " detect --device cpu --img 160 --weights " +
                                dir.file("w.safetensors") + " --project '' --source ..";
  ASSERT_EQ(test::run_command(from_work).exit_code, 0);
  r = test::run_command(from_work);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("work/own.jpg: "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("work/exp/own.jpg: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("below --project . in its run folders exp, exp2, ..."), std::string::npos) << r.output;
}

// Images of the same name in a folder's subfolders, or beside each other with another extension, get
// outputs of their own (a/x.jpg and b/x.jpg were one file, and their label lines were appended together);
// a rerun into the same folder (--exist-ok) replaces the label files instead of appending to them.
TEST(DetectCli, ImagesOfTheSameNameKeepTheirOwnOutputs) {
  test::TempDir dir;
  write_untrained_weights(dir.file("w.safetensors"));
  const std::string image = "data/demo/images/val/000000000139.jpg";
  for (const char* sub : {"src/a", "src/b"}) std::filesystem::create_directories(dir.file(sub));
  std::filesystem::copy_file(image, dir.file("src/x.jpg"));
  std::filesystem::copy_file(image, dir.file("src/a/x.jpg"));
  std::filesystem::copy_file(image, dir.file("src/b/x.jpg"));
  std::filesystem::copy_file(image, dir.file("src/x.png"));  // same stem, other extension
  std::filesystem::copy_file(image, dir.file("src/x2.jpg"));  // keeps its own name: x.png's outputs skip it
  const std::string detect = test::kestrel_binary() + " detect --device cpu --img 160 --conf-thres 0.0001 --max-det 7"
                             " --save-txt --exist-ok --weights " + dir.file("w.safetensors") + " --source " + dir.file("src") +
                             " --project " + dir.file("runs");
  auto r = test::run_command(detect);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto lines = [&](const std::string& file) {
    std::ifstream in(dir.file("runs/exp/labels/" + file));
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  };
  // x.png keeps its name and format (a PNG) and is listed after x.jpg; x2 is x2.jpg's own name: x.png's label
  // file is x3.txt.
  for (const char* label : {"x.txt", "x2.txt", "x3.txt", "a/x.txt", "b/x.txt"}) EXPECT_EQ(lines(label), 7) << label;
  for (const char* annotated : {"x.jpg", "x2.jpg", "x.png", "a/x.jpg", "b/x.jpg"})
    EXPECT_TRUE(std::filesystem::exists(dir.file(std::string("runs/exp/") + annotated))) << annotated;
  EXPECT_FALSE(std::filesystem::exists(dir.file("runs/exp/x22.jpg")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("runs/exp/x3.jpg")));
  const std::vector<uint8_t> png = data::read_file_bytes(dir.file("runs/exp/x.png"));
  ASSERT_GE(png.size(), 8u);
  EXPECT_EQ(std::string(png.begin() + 1, png.begin() + 4), "PNG");
  EXPECT_NE(r.output.find("5 labels saved to"), std::string::npos) << r.output;
  r = test::run_command(detect);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(lines("a/x.txt"), 7) << "a rerun appended to the label file";
}

// An image of another format is written as a JPEG, under a name that a JPEG of its stem has as its own: the
// JPEG keeps x.jpg (and labels/x.txt), the BMP, listed first, gets x2.jpg and labels/x2.txt.
TEST(DetectCli, AJpegKeepsItsNameBesideABmpOfItsStem) {
  test::TempDir dir;
  if (!data::video_support_problem().empty()) GTEST_SKIP() << "BMP needs the OpenCV plugin: " << data::video_support_problem();
  write_untrained_weights(dir.file("w.safetensors"));
  std::filesystem::create_directories(dir.file("src"));
  std::filesystem::copy_file("data/demo/images/val/000000000139.jpg", dir.file("src/x.jpg"));
  test::write_bytes(dir.file("src/x.bmp"), test::encode_bmp(test::coordinate_image(96, 64)));
  const cv::Size jpeg_size = data::decode_image(data::read_file_bytes(dir.file("src/x.jpg")), "x.jpg").image.size();
  const auto r = test::run_command(test::kestrel_binary() + " detect --device cpu --img 160 --conf-thres 0.0001 --max-det 3"
                                   " --save-txt --weights " + dir.file("w.safetensors") + " --source " + dir.file("src") +
                                   " --project " + dir.file("runs"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto size_of = [&](const std::string& file) {
    return data::decode_image(data::read_file_bytes(dir.file("runs/exp/" + file)), file).image.size();
  };
  EXPECT_EQ(size_of("x.jpg"), jpeg_size);
  EXPECT_EQ(size_of("x2.jpg"), cv::Size(96, 64));
  for (const char* label : {"labels/x.txt", "labels/x2.txt"})
    EXPECT_TRUE(std::filesystem::exists(dir.file(std::string("runs/exp/") + label))) << label;
}

// YOLOv5 detect.py's --save-csv (HEAD): predictions.csv gets a row per detection, in the label file's order,
// with the image's file name (here with its subfolder, as its annotated copy), the class name and the
// confidence to two decimals; a rerun with --exist-ok appends, as upstream. --save-format 1 writes the
// corners of the same boxes (x1 = cx - w / 2 ...).
TEST(DetectCli, PredictionsCsvAndPascalVocLabels) {
  test::TempDir dir;
  write_untrained_weights(dir.file("w.safetensors"));
  std::filesystem::create_directories(dir.file("src/sub"));
  std::filesystem::copy_file("data/demo/images/val/000000000139.jpg", dir.file("src/x.jpg"));
  std::filesystem::copy_file("data/demo/images/val/000000000632.jpg", dir.file("src/sub/y.jpg"));
  const std::string detect = test::kestrel_binary() + " detect --device cpu --img 160 --conf-thres 0.0001 --max-det 7"
                             " --save-txt --save-conf --nosave --exist-ok --weights " + dir.file("w.safetensors") +
                             " --source " + dir.file("src") + " --project " + dir.file("runs") + " ";
  auto r = test::run_command(detect + "--save-csv");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Predictions saved to " + dir.file("runs/exp/predictions.csv")), std::string::npos) << r.output;
  const auto read_lines = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  };
  const std::vector<std::string> csv = read_lines(dir.file("runs/exp/predictions.csv"));
  ASSERT_EQ(csv.size(), 15u);
  EXPECT_EQ(csv[0], "Image Name,Prediction,Confidence\r");
  // Each image's rows against its label lines "cls cx cy w h conf".
  std::map<std::string, std::vector<std::string>> rows;
  for (size_t i = 1; i < csv.size(); ++i) rows[csv[i].substr(0, csv[i].find(','))].push_back(csv[i]);
  ASSERT_EQ(rows.size(), 2u);
  const std::vector<std::string> names = {"a", "b", "c"};
  for (const auto& [image, label_file] : {std::pair<std::string, std::string>{"x.jpg", "x.txt"}, {"sub/y.jpg", "sub/y.txt"}}) {
    const std::vector<std::string> labels = read_lines(dir.file("runs/exp/labels/" + label_file));
    ASSERT_EQ(labels.size(), 7u) << label_file;
    ASSERT_EQ(rows[image].size(), 7u) << image;
    for (size_t k = 0; k < labels.size(); ++k) {
      std::istringstream in(labels[k]);
      double cls = 0, cx = 0, cy = 0, w = 0, h = 0, conf = 0;
      in >> cls >> cx >> cy >> w >> h >> conf;
      char expected_conf[32];
      std::snprintf(expected_conf, sizeof expected_conf, "%.2f", conf);
      EXPECT_EQ(rows[image][k], image + "," + names.at(static_cast<size_t>(cls)) + "," + expected_conf + "\r") << k;
    }
  }
  r = test::run_command(detect + "--save-csv");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> appended = read_lines(dir.file("runs/exp/predictions.csv"));
  ASSERT_EQ(appended.size(), 29u) << "a rerun with --exist-ok appends rows, without a second header";
  EXPECT_EQ(std::vector<std::string>(appended.begin() + 15, appended.end()),
            std::vector<std::string>(csv.begin() + 1, csv.end()));

  // --save-format 1: the same detections as corners.
  const std::vector<std::string> yolo = read_lines(dir.file("runs/exp/labels/x.txt"));
  r = test::run_command(detect + "--save-format 1 --name voc");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("runs/voc/predictions.csv")));
  const std::vector<std::string> voc = read_lines(dir.file("runs/voc/labels/x.txt"));
  ASSERT_EQ(voc.size(), yolo.size());
  for (size_t k = 0; k < voc.size(); ++k) {
    std::istringstream a(yolo[k]), b(voc[k]);
    double c = 0, cx = 0, cy = 0, w = 0, h = 0, conf = 0, c2 = 0, x1 = 0, y1 = 0, x2 = 0, y2 = 0, conf2 = 0;
    a >> c >> cx >> cy >> w >> h >> conf;
    b >> c2 >> x1 >> y1 >> x2 >> y2 >> conf2;
    EXPECT_EQ(c, c2);
    EXPECT_EQ(conf, conf2);
    EXPECT_NEAR(x1, cx - w / 2, 2e-6) << voc[k];
    EXPECT_NEAR(y1, cy - h / 2, 2e-6) << voc[k];
    EXPECT_NEAR(x2, cx + w / 2, 2e-6) << voc[k];
    EXPECT_NEAR(y2, cy + h / 2, 2e-6) << voc[k];
  }
  r = test::run_command(detect + "--save-format 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--save-format"), std::string::npos) << r.output;
}

// A glob (or list) with two images of one file name: predictions.csv names them by their paths as listed,
// as their label files are told apart (top.txt, top2.txt); upstream writes "top.jpg" for both. A folder
// where predictions.csv goes is refused before anything runs.
TEST(DetectCli, PredictionsCsvTellsSameNamedImagesApart) {
  test::TempDir dir;
  write_untrained_weights(dir.file("w.safetensors"));
  for (const char* sub : {"src/a", "src/b"}) std::filesystem::create_directories(dir.file(sub));
  std::filesystem::copy_file("data/demo/images/val/000000000139.jpg", dir.file("src/a/top.jpg"));
  std::filesystem::copy_file("data/demo/images/val/000000000632.jpg", dir.file("src/b/top.jpg"));
  const std::string detect = test::kestrel_binary() + " detect --device cpu --img 160 --conf-thres 0.0001 --max-det 3"
                             " --save-csv --nosave --exist-ok --weights " + dir.file("w.safetensors") + " --source '" +
                             dir.file("src") + "/*/top.jpg' --project " + dir.file("runs");
  auto r = test::run_command(detect);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir.file("runs/exp/predictions.csv"), std::ios::binary);
  std::map<std::string, int> rows;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) ++rows[line.substr(0, line.find(','))];
  EXPECT_EQ(rows, (std::map<std::string, int>{{dir.file("src/a/top.jpg"), 3}, {dir.file("src/b/top.jpg"), 3}}));

  std::filesystem::remove(dir.file("runs/exp/predictions.csv"));
  std::filesystem::create_directories(dir.file("runs/exp/predictions.csv"));
  r = test::run_command(detect);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("predictions.csv: is a directory"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("image 1/2"), std::string::npos) << "detection ran before the check";
}

// --save-json (the detect flag; val.py's save_one_json format): predictions.json holds each
// detection of the label files (--save-txt --save-conf), most confident first, with the numeric file stem
// as image id, bbox = [x1, y1, w, h] in pixels, the class index as category id without --data, and COCO's
// 91-ids (class c -> 1, 2, 3 for the first three) with a COCO --data.
TEST(DetectCli, SaveJsonWritesCocoResultsOfTheLabelLines) {
  test::TempDir dir;
  write_untrained_weights(dir.file("w.safetensors"));
  std::filesystem::create_directories(dir.file("src"));
  std::filesystem::copy_file("data/demo/images/val/000000000139.jpg", dir.file("src/000000000139.jpg"));  // 640 x 426
  std::filesystem::copy_file("data/demo/images/val/000000000632.jpg", dir.file("src/000000000632.jpg"));  // 640 x 483
  const std::string detect = test::kestrel_binary() + " detect --device cpu --img 160 --conf-thres 0.0001 --max-det 5"
                             " --save-json --save-txt --save-conf --nosave --weights " + dir.file("w.safetensors") +
                             " --source " + dir.file("src") + " --project " + dir.file("runs") + " ";
  auto r = test::run_command(detect + "--name plain");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("predictions.json (10 detections"), std::string::npos) << r.output;
  std::ifstream in(dir.file("runs/plain/predictions.json"));
  const nlohmann::json json = nlohmann::json::parse(in);
  ASSERT_EQ(json.size(), 10u);
  const std::map<int64_t, std::pair<std::string, cv::Size>> images = {{139, {"000000000139", {640, 426}}},
                                                                      {632, {"000000000632", {640, 483}}}};
  std::map<int64_t, std::vector<nlohmann::json>> by_image;
  for (const auto& d : json) by_image[d.at("image_id").get<int64_t>()].push_back(d);
  ASSERT_EQ(by_image.size(), 2u);
  for (const auto& [id, image] : images) {
    std::ifstream labels(dir.file("runs/plain/labels/" + image.first + ".txt"));
    std::vector<std::string> lines;
    for (std::string line; std::getline(labels, line);) lines.push_back(line);
    ASSERT_EQ(lines.size(), 5u);
    ASSERT_EQ(by_image[id].size(), 5u);
    for (size_t k = 0; k < 5; ++k) {  // label files: least confident first; JSON: most confident first
      std::istringstream line(lines[4 - k]);
      double cls = 0, cx = 0, cy = 0, w = 0, h = 0, conf = 0;
      line >> cls >> cx >> cy >> w >> h >> conf;
      const nlohmann::json& d = by_image[id][k];
      const double W = image.second.width, H = image.second.height;
      EXPECT_EQ(d.at("category_id").get<int>(), static_cast<int>(cls));
      EXPECT_NEAR(d.at("bbox")[0].get<double>(), (cx - w / 2) * W, 0.01) << lines[4 - k];
      EXPECT_NEAR(d.at("bbox")[1].get<double>(), (cy - h / 2) * H, 0.01) << lines[4 - k];
      EXPECT_NEAR(d.at("bbox")[2].get<double>(), w * W, 0.01) << lines[4 - k];
      EXPECT_NEAR(d.at("bbox")[3].get<double>(), h * H, 0.01) << lines[4 - k];
      EXPECT_NEAR(d.at("score").get<double>(), conf, 1e-5) << lines[4 - k];
    }
  }
  // A COCO --data (val.py's test: a YAML named coco.yaml): COCO's category ids.
  test::write_file(dir.file("coco.yaml"), "path: " + dir.file("src") + "\ntrain: .\nval: .\nnames: [a, b, c]\n");
  r = test::run_command(detect + "--name coco --data " + dir.file("coco.yaml"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream coco_in(dir.file("runs/coco/predictions.json"));
  const nlohmann::json coco = nlohmann::json::parse(coco_in);
  ASSERT_EQ(coco.size(), json.size());
  for (size_t i = 0; i < coco.size(); ++i) {
    EXPECT_EQ(coco[i].at("category_id").get<int>(), json[i].at("category_id").get<int>() + 1);  // 0, 1, 2 -> 1, 2, 3
    EXPECT_EQ(coco[i].at("bbox"), json[i].at("bbox"));
  }
}

}  // namespace
}  // namespace kestrel
