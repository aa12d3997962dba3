#include "kestrel/train/training_run.h"

#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include <ATen/ATen.h>

#include "test_support.h"

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

// --multi-scale's draw is Python's random.randrange(int(img * 0.5), int(img * 1.5) + gs) // gs * gs on the same
// MT19937 state (train.py's line), and the resize keeps the aspect with both sides rounded up to the stride.
TEST(MultiScale, SizesArePythonsRandrangeOnStrideMultiples) {
  std::mt19937 rng(77);
  std::ostringstream state, ours;
  state << rng;  // CPython's getstate() layout: the 624 words and the position
  for (int i = 0; i < 20; ++i) ours << multi_scale_size(640, 32, rng) << "\n";
  for (int i = 0; i < 20; ++i) ours << multi_scale_size(100, 64, rng) << "\n";
  const auto py = test::run_python("import random\nw = [int(x) for x in '" + state.str() + "'.split()]\n" + R"(
random.setstate((3, tuple(w), None))
for _ in range(20): print(random.randrange(int(640 * 0.5), int(640 * 1.5) + 32) // 32 * 32)
for _ in range(20): print(random.randrange(int(100 * 0.5), int(100 * 1.5) + 64) // 64 * 64)
)");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  EXPECT_EQ(ours.str(), py.output);

  // A 2 x 3 x 64 x 96 batch to long side 160: sf 160 / 96, so 64 -> ceil(106.7 / 32) * 32 = 128, 96 -> 160.
  const at::Tensor images = at::rand({2, 3, 64, 96});
  const at::Tensor resized = multi_scale_resize(images, 160, 32);
  EXPECT_EQ(resized.sizes(), (at::IntArrayRef{2, 3, 128, 160}));
  EXPECT_TRUE(at::allclose(resized, at::upsample_bilinear2d(images, {128, 160}, false)));
  EXPECT_TRUE(multi_scale_resize(images, 96, 32).is_same(images)) << "the long side already: unchanged";
}

}  // namespace
}  // namespace kestrel::train
