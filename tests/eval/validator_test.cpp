// The validation table: val.py v7.0's rows, pf = '%22s' + '%11i' * 2 + '%11.3g' * 4 with `seen` (every
// image validated) in the Images column of every class row. Expected lines are that format string
// evaluated by Python. And --save-json's image ids against `kestrel data coco`'s.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "data/data_test_support.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/eval/plots.h"
#include "kestrel/eval/validator.h"
#include "kestrel/eval/yolo_to_coco.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/yolo_model.h"
#include "kestrel/train/split_loader.h"
#include "test_support.h"

namespace kestrel::eval {
namespace {

TEST(ValidationTable, RowsAsValPy) {
  ValidationResult r;
  r.images = 5;
  r.labels = 4;
  r.instances = {3, 1};
  r.metrics.classes = at::tensor({0, 1}, at::kLong);
  r.metrics.precision = at::tensor({0.5, 1.0}, at::kDouble);
  r.metrics.recall = at::tensor({0.25, 0.0}, at::kDouble);
  r.metrics.ap = at::zeros({2, 10}, at::kDouble);
  r.metrics.ap[0].fill_(0.4);  // mAP50 0.4, mAP50-95 0.4
  r.metrics.ap[1][0] = 0.2;    // mAP50 0.2, mAP50-95 0.02
  r.metrics.mp = 0.75, r.metrics.mr = 0.125, r.metrics.map50 = 0.3, r.metrics.map = 0.21;
  r.metrics.scored = true;
  const std::string table = format_validation_table(r, {"cat", "dog"}, /*per_class=*/true);
  EXPECT_EQ(table,
            "                 Class     Images  Instances          P          R      mAP50   mAP50-95\n"
            "                   all          5          4       0.75      0.125        0.3       0.21\n"
            "                   cat          5          3        0.5       0.25        0.4        0.4\n"
            "                   dog          5          1          1          0        0.2       0.02\n");
  // Python's %22s pads by characters: a UTF-8 name (2 characters, 6 bytes) lines up with the others.
  const std::string utf8 = format_validation_table(r, {"\xe8\xa1\x8c\xe4\xba\xba", "dog"}, true);
  EXPECT_NE(utf8.find("\n" + std::string(20, ' ') + "\xe8\xa1\x8c\xe4\xba\xba          5          3"), std::string::npos) << utf8;
  EXPECT_EQ(format_validation_table(r, {"cat", "dog"}, /*per_class=*/false),
            "                 Class     Images  Instances          P          R      mAP50   mAP50-95\n"
            "                   all          5          4       0.75      0.125        0.3       0.21\n");
  // val.py prints no class rows for one class (nc > 1), nor when no prediction was correct (no ap_class),
  // and warns when the split has no labels.
  const std::string header_and_all =
      "                 Class     Images  Instances          P          R      mAP50   mAP50-95\n"
      "                   all          5          4       0.75      0.125        0.3       0.21\n";
  EXPECT_EQ(format_validation_table(r, {"item"}, true), header_and_all);
  r.metrics.scored = false;  // nothing correct: val.py's zeros
  r.metrics.mp = r.metrics.mr = r.metrics.map50 = r.metrics.map = 0;
  EXPECT_EQ(format_validation_table(r, {"cat", "dog"}, true),
            "                 Class     Images  Instances          P          R      mAP50   mAP50-95\n"
            "                   all          5          4          0          0          0          0\n");
  r.labels = 0;
  EXPECT_NE(format_validation_table(r, {"cat", "dog"}, true).find("WARNING: no labels found in val set, can not compute metrics without labels"), std::string::npos);
  EXPECT_NE(format_validation_table(r, {"cat", "dog"}, true, "test").find("no labels found in test set"), std::string::npos);
}

// Images whose stems are not numbers get ids 1..n in path order in `kestrel data coco`'s file; the
// predictions of `val --save-json` must use the same ids although rectangular batches visit the images by
// aspect ratio (here a, c, b). The three images differ in shape, so a detection credited to the wrong image
// lies outside it: every detection of an untrained model (conf 1e-6, so there are many) must lie within the
// image its id names.
// The val split of `cfg` at `img_size`, one image per batch.
train::SplitLoader val_split(const data::DatasetConfig& cfg, int img_size) {
  train::ValLoaderOptions l;
  l.img_size = img_size;
  l.batch_size = 1;
  l.workers = 1;
  l.nc_for_check = cfg.nc;
  return train::make_val_loader(cfg, "val", l);
}

TEST(ValidationJson, ImageIdsAreTheAnnotationFilesWhateverTheBatchOrder) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("images/val"));
  std::filesystem::create_directories(dir.file("labels/val"));
  const std::map<std::string, cv::Size> images = {{"a", {320, 80}}, {"b", {80, 320}}, {"c", {200, 200}}};
  for (const auto& [stem, size] : images) {
    test::write_bytes(dir.file("images/val/" + stem + ".jpg"), test::encode_jpeg(test::coordinate_image(size.width, size.height)));
    test::write_file(dir.file("labels/val/" + stem + ".txt"), "0 0.5 0.5 0.5 0.5\n");
  }
  test::write_file(dir.file("d.yaml"), "path: .\ntrain: images/val\nval: images/val\nnames: [thing]\n");
  const data::DatasetConfig cfg = data::load_dataset_config(dir.file("d.yaml"));
  const nlohmann::json annotations = yolo_to_coco(dir.file("images/val"), cfg.names);
  std::map<int64_t, cv::Size> size_of_id;
  for (const auto& image : annotations["images"]) size_of_id[image["id"].get<int64_t>()] = {image["width"], image["height"]};
  ASSERT_EQ(size_of_id.size(), 3u);

  torch::manual_seed(0);
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), cfg.nc);
  const train::SplitLoader split = val_split(cfg, 160);
  ASSERT_NE(split.dataset->records()[1].image.find("c.jpg"), std::string::npos) << "the batches are not in path order";
  ValidationOptions v;
  v.save_json = true;
  v.nms.conf_thres = 1e-6;
  const ValidationResult r = validate(*model, *split.loader, *split.dataset, c10::Device(c10::kCPU), cfg.nc, v);
  ASSERT_GT(r.predictions.size(), 30u);
  std::map<int64_t, int> per_image;
  for (const auto& d : r.predictions) {
    const int64_t id = d.image_id;
    ASSERT_TRUE(size_of_id.count(id)) << "image id " << id << " is not in the annotation file";
    ++per_image[id];
    const cv::Size size = size_of_id[id];
    EXPECT_LE(d.box.x + d.box.w, size.width + 1e-3) << "a detection beyond image " << id << "'s width";
    EXPECT_LE(d.box.y + d.box.h, size.height + 1e-3) << "a detection beyond image " << id << "'s height";
  }
  EXPECT_EQ(per_image.size(), 3u);
}

// An image without detections: val.py v7.0 counts its labels as missed in the confusion matrix (detections=None);
// YOLOv7's test.py and yolov3 v9.6.0's val.py pass over it (`if len(pred) == 0: ... continue`).
TEST(ValidationConfusion, AnImageWithoutDetectionsCountsOnlyInV5) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("images/val"));
  std::filesystem::create_directories(dir.file("labels/val"));
  test::write_bytes(dir.file("images/val/a.jpg"), test::encode_jpeg(test::coordinate_image(64, 64)));
  test::write_file(dir.file("labels/val/a.txt"), "1 0.5 0.5 0.5 0.5\n0 0.3 0.3 0.2 0.2\n");
  test::write_file(dir.file("d.yaml"), "path: .\ntrain: images/val\nval: images/val\nnames: [a, b]\n");
  const data::DatasetConfig cfg = data::load_dataset_config(dir.file("d.yaml"));
  torch::manual_seed(0);
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), cfg.nc);
  const train::SplitLoader split = val_split(cfg, 64);
  for (MetricStyle style : {MetricStyle::yolov5, MetricStyle::yolov7, MetricStyle::yolov7_v5_metric, MetricStyle::yolov3}) {
    ConfusionMatrix confusion(cfg.nc);
    ValidationOptions v;
    v.metric = style;
    v.nms.conf_thres = 1.0;  // scores are below 1: no detection survives
    v.confusion = &confusion;
    const ValidationResult r = validate(*model, *split.loader, *split.dataset, c10::Device(c10::kCPU), cfg.nc, v);
    EXPECT_EQ(r.metrics.map50, 0.0);
    const int64_t counted = confusion.matrix().sum().item<int64_t>();
    if (style == MetricStyle::yolov5) {
      EXPECT_EQ(counted, 2);
      EXPECT_EQ(confusion.count(2, 0), 1);  // [background, class]: both labels missed
      EXPECT_EQ(confusion.count(2, 1), 1);
    } else {
      EXPECT_EQ(counted, 0) << static_cast<int>(style);
    }
  }
}

}  // namespace
}  // namespace kestrel::eval
