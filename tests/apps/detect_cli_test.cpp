// kestrel detect's per-family defaults: YOLOv7's detect.py keeps at most 300 boxes an image (its NMS has no
// max_det argument), YOLOv5's detect.py 1000 (--max-det); an explicit --max-det wins for both. And
// detect.py's other spellings, and where the outputs of images with the same name go.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "kestrel/models/model_config.h"
#include "kestrel/models/weights_file.h"
#include "kestrel/models/yolo_model.h"
#include "test_support.h"

namespace kestrel {
namespace {

// Label lines written for the demo image by an untrained 3-class `config` at conf 0.0001 and IoU 0.99 (every
// candidate box survives NMS: far more than 1000 of them at 320 px).
int64_t boxes_written(const std::string& config, const std::string& args) {
  test::TempDir dir;
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path(config)), 3);
  models::save_model_weights(dir.file("w.safetensors"), *model, models::describe_config(config, {"a", "b", "c"}));
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
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), 3);
  models::save_model_weights(dir.file("w.safetensors"), *model, models::describe_config("yolov5n", {"a", "b", "c"}));
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
}

// Images of the same name in a folder's subfolders, or beside each other with another extension, get
// outputs of their own (a/x.jpg and b/x.jpg were one file, and their label lines were appended together);
// a rerun into the same folder (--exist-ok) replaces the label files instead of appending to them.
TEST(DetectCli, ImagesOfTheSameNameKeepTheirOwnOutputs) {
  test::TempDir dir;
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), 3);
  models::save_model_weights(dir.file("w.safetensors"), *model, models::describe_config("yolov5n", {"a", "b", "c"}));
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
  // x.png is annotated as a JPEG and listed after x.jpg; x2 is x2.jpg's own name: x.png's outputs are x3.
  for (const char* label : {"x.txt", "x2.txt", "x3.txt", "a/x.txt", "b/x.txt"}) EXPECT_EQ(lines(label), 7) << label;
  for (const char* annotated : {"x.jpg", "x2.jpg", "x3.jpg", "a/x.jpg", "b/x.jpg"})
    EXPECT_TRUE(std::filesystem::exists(dir.file(std::string("runs/exp/") + annotated))) << annotated;
  EXPECT_FALSE(std::filesystem::exists(dir.file("runs/exp/x22.jpg")));
  EXPECT_NE(r.output.find("5 labels saved to"), std::string::npos) << r.output;
  r = test::run_command(detect);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(lines("a/x.txt"), 7) << "a rerun appended to the label file";
}

}  // namespace
}  // namespace kestrel
