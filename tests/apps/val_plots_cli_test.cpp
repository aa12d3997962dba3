// kestrel val writes upstream's validation charts and its first three batches (ground truth and
// predictions) into its run folder, and --noplots leaves them out; --augment, --save-txt, --save-hybrid, --task speed and study.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kestrel/data/dataset_config.h"
#include "kestrel/data/image_io.h"
#include "kestrel/eval/plots.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/weights_file.h"
#include "kestrel/models/yolo_model.h"
#include "test_support.h"

namespace kestrel {
namespace {

TEST(ValPlotsCli, WritesChartsUnlessNoplots) {
  test::TempDir dir;
  // One short epoch: the weights only need to exist, the charts are drawn whatever they detect.
  auto r = test::run_command(test::kestrel_binary() + " train --cfg yolov5n --data data/demo/demo.yaml --epochs 1 --img 64"
                             " --batch-size 16 --workers 2 --device cpu --quiet --noval --project " + dir.file("runs"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string weights = dir.file("runs/exp/weights/last.safetensors");
  ASSERT_TRUE(std::filesystem::exists(weights)) << r.output;
  const std::string val = test::kestrel_binary() + " val --data data/demo/demo.yaml --img 64 --device cpu --weights " + weights +
                          " --project " + dir.file("val");
  r = test::run_command(val);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The confusion matrix always; the four curves only where some prediction was correct (val.py calls
  // ap_per_class(plot=True) only then), which one epoch at 64 px does not reach (the charts of a model that
  // scores: tests/train/trainer_test.cpp, Yolov5nMemorisesFourImages).
  const cv::Mat confusion = data::decode_image_file(dir.file("val/exp/confusion_matrix.png")).image;
  EXPECT_EQ(confusion.size(), cv::Size(eval::kConfusionWidth, eval::kConfusionHeight));
  ASSERT_NE(r.output.find("all         16        115          0          0          0          0"), std::string::npos) << r.output;
  for (const char* name : {"PR_curve.png", "F1_curve.png", "P_curve.png", "R_curve.png"})
    EXPECT_FALSE(std::filesystem::exists(dir.file(std::string("val/exp/") + name))) << name;
  EXPECT_FALSE(std::filesystem::exists(dir.file("val/exp/weights")));
  // The 16 validation images in batches of 32 (the default): val_batch0 only, a 4 x 4 grid of letterboxed
  // images whose long side is val.py's rect shape with 0.5 stride padding: ceil(64 / 32 + 0.5) x 32 = 96.
  for (const char* name : {"val/exp/val_batch0_labels.jpg", "val/exp/val_batch0_pred.jpg"}) {
    const cv::Mat img = data::decode_image_file(dir.file(name)).image;
    EXPECT_EQ(std::max(img.cols, img.rows), 4 * 96) << name;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("val/exp/val_batch1_labels.jpg")));
  // Batches of 4: upstream's first three are drawn, not the fourth; each a 2 x 2 grid.
  r = test::run_command(val + " --batch-size 4 --name four");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int i = 0; i < 3; ++i)
    for (const char* kind : {"labels", "pred"}) {
      const std::string path = dir.file("val/four/val_batch" + std::to_string(i) + "_" + kind + ".jpg");
      ASSERT_TRUE(std::filesystem::exists(path)) << path << "\n" << r.output;
      const cv::Mat img = data::decode_image_file(path).image;
      EXPECT_EQ(std::max(img.cols, img.rows), 2 * 96) << path;
    }
  EXPECT_FALSE(std::filesystem::exists(dir.file("val/four/val_batch3_labels.jpg")));
  r = test::run_command(val + " --noplots");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("val/exp2"))) << "--noplots without --save-json writes nothing";
  r = test::run_command(val + " --noplots --augment");  // test-time augmentation through the whole validation
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("all"), std::string::npos) << r.output;
  // val.py's --task speed: the val split timed at detect's thresholds; no charts, no JSON, no run folder.
  r = test::run_command(val + " --task speed --save-json --name speed");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Speed: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("                   all         16        115"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("val/speed"))) << r.output;
}

// The rows of a study file, each a list of its numbers (none when the file cannot be read).
std::vector<std::vector<double>> study_rows(const std::string& path) {
  std::vector<std::vector<double>> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream row(line);
    rows.emplace_back();
    for (double x; row >> x;) rows.back().push_back(x);
  }
  return rows;
}

// val.py's --task study: one run folder with study_<data>_<weights>.txt, a row of 10 values per size 256 ...
// 1536 (each pass really at that size: its speed line names the shape), and study.png. Two weights files,
// two study files; with JSON the rows carry COCOeval's mAP; several weights are refused for a plain validation (val.py would ensemble them). Two
// images and a yolov5n at an eighth of the width keep the 1536 passes short.
TEST(ValPlotsCli, StudyWritesARowPerSizeAndThePlot) {
  test::TempDir dir;
  const std::string data = test::demo_subset(dir, 2);
  std::ifstream v5n("configs/models/yolov5n.yaml");
  std::stringstream cfg;
  cfg << v5n.rdbuf();
  std::string yaml = cfg.str();
  const size_t at = yaml.find("width_multiple: 0.25");
  ASSERT_NE(at, std::string::npos);
  test::write_file(dir.file("pico.yaml"), yaml.replace(at, 20, "width_multiple: 0.125"));
  auto r = test::run_command(test::kestrel_binary() + " train --cfg " + dir.file("pico.yaml") + " --data " + data +
                             " --epochs 1 --img 64 --batch-size 2 --workers 2 --device cpu --quiet --noval --project " + dir.file("runs"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string last = dir.file("runs/exp/weights/last.safetensors"), best = dir.file("runs/exp/weights/best.safetensors");
  r = test::run_command(test::kestrel_binary() + " val --task study --data " + data + " --batch-size 2 --device cpu --weights " +
                        last + " " + best + " --project " + dir.file("val"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int img = 256; img <= 1536; img += 128)
    EXPECT_NE(r.output.find("at shape (2, 3, " + std::to_string(img) + ", " + std::to_string(img) + ")"), std::string::npos) << img;
  for (const char* name : {"study_tiny_last.txt", "study_tiny_best.txt"}) {
    const auto rows = study_rows(dir.file(std::string("val/exp/") + name));
    EXPECT_EQ(rows.size(), 11u) << name << "\n" << r.output;
    for (const std::vector<double>& v : rows) {
      ASSERT_EQ(v.size(), 10u) << name;
      for (int k = 4; k < 7; ++k) EXPECT_EQ(v[k], 0) << "no validation loss outside training: " << name;
      EXPECT_GT(v[8], 0) << "inference time: " << name;
    }
  }
  EXPECT_TRUE(std::filesystem::exists(dir.file("val/exp/study.png"))) << r.output;

  // With JSON, every size saves its predictions and the row's mAP50 and mAP50-95 are COCOeval's (val.py's
  // rows). Annotations whose boxes are all crowds leave COCOeval nothing to score: its summary is -1, which
  // kestrel's own metrics (>= 0) can never be, so the rows show whose numbers they are.
  r = test::run_command(test::kestrel_binary() + " data coco " + data + " --split val --out " + dir.file("ann.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json ann = nlohmann::json::parse(std::ifstream(dir.file("ann.json")));
  ASSERT_FALSE(ann["annotations"].empty());
  for (auto& a : ann["annotations"]) a["iscrowd"] = 1;
  test::write_file(dir.file("crowd.json"), ann.dump());
  // (--conf-thres 0: an untrained model scores every box below val's 0.001, and val.py writes no JSON
  // without predictions; checked below.)
  r = test::run_command(test::kestrel_binary() + " val --task study --data " + data + " --batch-size 2 --device cpu --weights " +
                        best + " --save-json --conf-thres 0 --coco-ann " + dir.file("crowd.json") + " --project " + dir.file("val"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = study_rows(dir.file("val/exp2/study_tiny_best.txt"));
  EXPECT_EQ(rows.size(), 11u) << r.output;
  for (const std::vector<double>& v : rows) {
    ASSERT_EQ(v.size(), 10u);
    EXPECT_EQ(v[2], -1) << "mAP50 from COCOeval";
    EXPECT_EQ(v[3], -1) << "mAP50-95 from COCOeval";
  }
  for (int img = 256; img <= 1536; img += 128)
    EXPECT_TRUE(std::filesystem::exists(dir.file("val/exp2/best_" + std::to_string(img) + "_predictions.json"))) << img;

  // No prediction above the threshold: as val.py (`if save_json and len(jdict)`), no JSON file and no COCOeval.
  r = test::run_command(test::kestrel_binary() + " val --data " + data + " --img 64 --device cpu --weights " + best +
                        " --save-json --coco-ann " + dir.file("crowd.json") + " --project " + dir.file("val") + " --name none");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("val/none/best_predictions.json"))) << r.output;
  EXPECT_EQ(r.output.find("Evaluating pycocotools mAP"), std::string::npos) << r.output;

  r = test::run_command(test::kestrel_binary() + " val --data " + data + " --device cpu --weights " + last + " " + best);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--weights: 2 files given"), std::string::npos) << r.output;
}

// --save-hybrid (val.py's, for auto-labelling): the labels join the predictions at confidence 1, so with no
// suppression among them (--iou-thres 1) every label is found first and exactly: mAP50 and mAP50-95 are
// val.py's perfect 0.995 (its 101-point AP ends on the recall sentinel's precision 0: the last 0.01 of
// recall counts half) whatever the model, and each image's txt file (--save-txt implied) holds every
// label row of the dataset's own label file.
TEST(ValPlotsCli, SaveHybridFindsEveryLabel) {
  test::TempDir dir;
  const std::string data = test::demo_subset(dir, 3);
  auto r = test::run_command(test::kestrel_binary() + " train --cfg yolov5n --data " + data + " --epochs 1 --img 64"
                             " --batch-size 3 --workers 2 --device cpu --quiet --noval --project " + dir.file("runs"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // At --img 640 these images (long side 640) are not resized. At other sizes val.py's scale_boxes, which
  // kestrel follows, maps x back with the height's ratio, which the rounding of the resized height makes
  // differ from the width's: the saved boxes move by up to ~1 % at 128.
  r = test::run_command(test::kestrel_binary() + " val --data " + data + " --img 640 --device cpu --noplots --save-hybrid"
                        " --iou-thres 1.0 --weights " + dir.file("runs/exp/weights/last.safetensors") + " --project " + dir.file("val"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("WARNING: --save-hybrid will return high mAP"), std::string::npos) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  while (std::getline(lines, line) && line.find(" all ") == std::string::npos) {}
  std::istringstream all(line);
  std::string name;
  int images = 0, instances = 0;
  double p = 0, rec = 0, map50 = 0, map = 0;
  ASSERT_TRUE(all >> name >> images >> instances >> p >> rec >> map50 >> map) << r.output;
  EXPECT_EQ(images, 3);
  EXPECT_EQ(instances, 6);
  EXPECT_NEAR(map50, 0.995, 1e-9) << line;
  EXPECT_NEAR(map, 0.995, 1e-9) << line;
  for (const char* stem : {"000000000025", "000000000030", "000000000036"}) {
    std::vector<std::vector<double>> saved;
    std::ifstream out(dir.file(std::string("val/exp/labels/") + stem + ".txt"));
    ASSERT_TRUE(out) << stem << "\n" << r.output;
    for (std::string row; std::getline(out, row);) {
      std::istringstream values(row);
      std::vector<double> v(5);
      ASSERT_TRUE(values >> v[0] >> v[1] >> v[2] >> v[3] >> v[4]) << row;
      saved.push_back(v);
    }
    std::ifstream truth(std::string("data/demo/labels/train/") + stem + ".txt");
    int found = 0, labels = 0;
    for (std::string row; std::getline(truth, row); ++labels) {
      std::istringstream values(row);
      std::vector<double> v(5);
      ASSERT_TRUE(values >> v[0] >> v[1] >> v[2] >> v[3] >> v[4]) << row;
      for (const auto& s : saved) {
        bool same = s[0] == v[0];
        for (int k = 1; k < 5; ++k) same = same && std::abs(s[k] - v[k]) < 1e-4;
        if (same) {
          ++found;
          break;
        }
      }
    }
    EXPECT_EQ(found, labels) << stem;
    EXPECT_GT(labels, 0) << stem;
  }
  // With --single-cls the labels are one class but the model still predicts 80: the label rows take the
  // head's width, and the metric is perfect again.
  r = test::run_command(test::kestrel_binary() + " val --data " + data + " --img 640 --device cpu --noplots --save-hybrid"
                        " --single-cls --iou-thres 1.0 --weights " + dir.file("runs/exp/weights/last.safetensors") +
                        " --project " + dir.file("val") + " --name single");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("all          3          6          1          1      0.995      0.995"), std::string::npos) << r.output;
}

// --save-txt --save-conf beside --save-json of the same pass: per image as many label lines as COCO
// predictions, each line "cls cx cy w h conf" whose box is the JSON box divided by the image size.
TEST(ValPlotsCli, SaveTxtWritesEveryPredictionOfItsImage) {
  test::TempDir dir;
  auto r = test::run_command(test::kestrel_binary() + " train --cfg yolov5n --data data/demo/demo.yaml --epochs 1 --img 64"
                             " --batch-size 16 --workers 2 --device cpu --quiet --noval --project " + dir.file("runs"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_command(test::kestrel_binary() + " val --data data/demo/demo.yaml --img 64 --device cpu --noplots --save-txt"
                        " --save-conf --save-json --max-det 20 --conf-thres 1e-7 --weights " + dir.file("runs/exp/weights/last.safetensors") +
                        " --project " + dir.file("val"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string labels = dir.file("val/exp/labels");
  ASSERT_NE(r.output.find(" labels saved to " + labels), std::string::npos) << r.output;
  std::ifstream json_file(dir.file("val/exp/last_predictions.json"));
  const nlohmann::json predictions = nlohmann::json::parse(json_file);
  ASSERT_GT(predictions.size(), 0u);
  std::map<int64_t, std::vector<nlohmann::json>> by_image;
  for (const auto& p : predictions) by_image[p["image_id"].get<int64_t>()].push_back(p);
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(labels)) {
    ++files;
    const std::string stem = entry.path().stem().string();
    const cv::Mat image = data::decode_image_file("data/demo/images/val/" + stem + ".jpg").image;
    const auto& expected = by_image[std::stoll(stem)];
    std::ifstream in(entry.path());
    size_t k = 0;
    for (std::string line; std::getline(in, line); ++k) {
      std::istringstream row(line);
      double cls, cx, cy, w, h, conf;
      ASSERT_TRUE(row >> cls >> cx >> cy >> w >> h >> conf) << line;
      ASSERT_LT(k, expected.size()) << entry.path();
      const auto& bbox = expected[k]["bbox"];  // x, y, w, h in pixels, rounded to 1e-3; same order (conf descending)
      EXPECT_NEAR(cx, (bbox[0].get<double>() + bbox[2].get<double>() / 2) / image.cols, 1e-4) << line;
      EXPECT_NEAR(cy, (bbox[1].get<double>() + bbox[3].get<double>() / 2) / image.rows, 1e-4) << line;
      EXPECT_NEAR(w, bbox[2].get<double>() / image.cols, 1e-4) << line;
      EXPECT_NEAR(h, bbox[3].get<double>() / image.rows, 1e-4) << line;
      EXPECT_NEAR(conf, expected[k]["score"].get<double>(), 1e-4) << line;
      EXPECT_EQ(cls, expected[k]["category_id"].get<double>()) << line;
    }
    EXPECT_EQ(k, expected.size()) << entry.path();
  }
  EXPECT_EQ(files, by_image.size()) << "a label file for every image with predictions";

  // Two images of one stem (a/x.jpg, b/x.jpg) share val.py's label file: said, not silently mixed.
  for (const char* sub : {"dup/images/val/a", "dup/images/val/b"}) {
    std::filesystem::create_directories(dir.file(sub));
    std::filesystem::copy_file("data/demo/images/val/000000000139.jpg", dir.file(std::string(sub) + "/x.jpg"));
  }
  std::filesystem::copy_file("data/demo/demo.yaml", dir.file("dup/demo.yaml"));
  r = test::run_command(test::kestrel_binary() + " val --data " + dir.file("dup/demo.yaml") + " --img 64 --device cpu --noplots"
                        " --save-txt --weights " + dir.file("runs/exp/weights/last.safetensors") + " --project " + dir.file("val"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("WARNING: 2 images share their file stem with another image of the split (e.g. x): as val.py, "
                          "their predictions are appended to one labels/x.txt"), std::string::npos) << r.output;
}

// --coco-ann with a file made before one image became unreadable: the predictions keep their images' ids
// (by the file's file_name), not ranks that shift past the skipped image. --save-hybrid adds the labels as
// predictions of confidence 1, and an untrained model's own scores stay below the 0.001 threshold, so
// COCO's AP50 over the 15 images left is near 1 when every id is right; shifted ids gave 0.28 here.
TEST(ValPlotsCli, CocoIdsFollowTheAnnotationFileNames) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("rs/images/val"));
  std::filesystem::create_directories(dir.file("rs/labels/val"));
  int n = 0;
  for (const auto& image : std::filesystem::directory_iterator("data/demo/images/val")) {
    const std::string stem = "img_" + std::to_string(10 + n++);
    std::filesystem::copy_file(image.path(), dir.file("rs/images/val/" + stem + ".jpg"));
    std::filesystem::copy_file("data/demo/labels/val/" + image.path().stem().string() + ".txt", dir.file("rs/labels/val/" + stem + ".txt"));
  }
  std::filesystem::copy_file("data/demo/demo.yaml", dir.file("rs/demo.yaml"));
  auto r = test::run_command(test::kestrel_binary() + " data coco " + dir.file("rs/demo.yaml") + " --split val --out " + dir.file("ann.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  test::write_file(dir.file("rs/images/val/img_13.jpg"), "no longer an image");
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), 80);
  std::vector<std::string> names;
  for (int c = 0; c < 80; ++c) names.push_back(data::load_dataset_config("data/demo/demo.yaml").names[c]);
  models::save_model_weights(dir.file("w.safetensors"), *model, models::describe_config("yolov5n", names));
  r = test::run_command(test::kestrel_binary() + " val --data " + dir.file("rs/demo.yaml") + " --img 128 --device cpu --noplots"
                        " --save-hybrid --save-json --coco-ann " + dir.file("ann.json") + " --weights " + dir.file("w.safetensors") +
                        " --project " + dir.file("val"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_NE(r.output.find("img_13.jpg"), std::string::npos) << r.output;  // reported as skipped
  const std::string ap50 = " Average Precision  (AP) @[ IoU=0.50      | area=   all | maxDets=100 ] = ";
  const size_t at = r.output.find(ap50);
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_GT(std::stod(r.output.substr(at + ap50.size(), 5)), 0.9) << r.output;
}

// --single-cls keeps the weights' class names (val.py: model.names): the one class predicted is the weights'
// class 0, so a one-category annotation file naming it ('rider', id 500: neither an index nor a COCO id)
// maps every prediction to 500. Named 'item' (train.py's single-class name) it would match nothing.
TEST(ValPlotsCli, SingleClsPredictionsTakeTheWeightsFirstName) {
  test::TempDir dir;
  auto r = test::run_command(test::kestrel_binary() + " data coco data/demo/demo.yaml --split val --out " + dir.file("ann.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json ann = nlohmann::json::parse(std::ifstream(dir.file("ann.json")));
  ann["categories"] = nlohmann::json::array({{{"id", 500}, {"name", "rider"}, {"supercategory", "none"}}});
  for (auto& a : ann["annotations"]) a["category_id"] = 500;
  test::write_file(dir.file("one.json"), ann.dump());
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), 80);
  std::vector<std::string> names = data::load_dataset_config("data/demo/demo.yaml").names;
  names[0] = "rider";  // the weights' names, not the dataset's
  models::save_model_weights(dir.file("w.safetensors"), *model, models::describe_config("yolov5n", names));
  r = test::run_command(test::kestrel_binary() + " val --data data/demo/demo.yaml --img 64 --device cpu --noplots --single-cls"
                        " --save-hybrid --save-json --coco-ann " + dir.file("one.json") + " --weights " + dir.file("w.safetensors") +
                        " --project " + dir.file("val"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json predictions = nlohmann::json::parse(std::ifstream(dir.file("val/exp/w_predictions.json")));
  ASSERT_GT(predictions.size(), 0u);
  for (const auto& p : predictions) ASSERT_EQ(p["category_id"].get<int>(), 500) << p.dump();
}

}  // namespace
}  // namespace kestrel
