#include "kestrel/train/training_run.h"

#include <gtest/gtest.h>

namespace kestrel::train {
namespace {

data::DatasetConfig dataset(const std::string& yaml, const std::string& val) {
  data::DatasetConfig cfg;
  cfg.source = yaml;
  cfg.val = {val};
  return cfg;
}

// Expected values from upstream: YOLOv5 v7.0 train.py validates best.pt with iou_thres=0.65 if is_coco else
// 0.60 (is_coco: the val entry ends with coco/val2017.txt); YOLOv7 train.py runs test.test(..., iou_thres=0.7)
// only when opt.data ends with coco.yaml and nc == 80.
TEST(FinalValidation, IouThresholdFollowsTheRecipesCocoRule) {
  const auto coco_by_path = dataset("data/my.yaml", "../datasets/coco/val2017.txt");
  const auto coco_by_name = dataset("data/coco.yaml", "../datasets/coco/images/val2017");
  const auto other = dataset("data/coco128.yaml", "../datasets/coco128/images/train2017");
  // YOLOv5: the val path decides, the YAML name and the class count do not
  EXPECT_DOUBLE_EQ(final_validation_iou_thres(false, coco_by_path, 80), 0.65);
  EXPECT_DOUBLE_EQ(final_validation_iou_thres(false, coco_by_path, 3), 0.65);
  EXPECT_DOUBLE_EQ(final_validation_iou_thres(false, coco_by_name, 80), 0.6);
  EXPECT_DOUBLE_EQ(final_validation_iou_thres(false, other, 80), 0.6);
  // YOLOv7: the YAML name and 80 classes decide, the val path does not
  EXPECT_DOUBLE_EQ(final_validation_iou_thres(true, coco_by_name, 80), 0.7);
  EXPECT_DOUBLE_EQ(final_validation_iou_thres(true, coco_by_name, 79), 0.6);
  EXPECT_DOUBLE_EQ(final_validation_iou_thres(true, coco_by_path, 80), 0.6);
  EXPECT_DOUBLE_EQ(final_validation_iou_thres(true, other, 80), 0.6);
}

}  // namespace
}  // namespace kestrel::train
