// kestrel detect's per-family defaults: YOLOv7's detect.py keeps at most 300 boxes an image (its NMS has no
// max_det argument), YOLOv5's detect.py 1000 (--max-det); an explicit --max-det wins for both.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kestrel
