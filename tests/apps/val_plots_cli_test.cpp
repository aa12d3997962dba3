// kestrel val writes upstream's validation charts and its first three batches (ground truth and
// predictions) into its run folder, and --noplots leaves them out.
#include <gtest/gtest.h>

#include <filesystem>

#include "kestrel/data/image_io.h"
#include "kestrel/eval/plots.h"
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
  for (const char* name : {"confusion_matrix.png", "PR_curve.png", "F1_curve.png", "P_curve.png", "R_curve.png"}) {
    const std::string path = dir.file(std::string("val/exp/") + name);
    ASSERT_TRUE(std::filesystem::exists(path)) << path << "\n" << r.output;
    const cv::Mat img = data::decode_image_file(path).image;
    const bool confusion = std::string(name) == "confusion_matrix.png";
    EXPECT_EQ(img.cols, confusion ? eval::kConfusionWidth : eval::kCurveWidth) << name;
    EXPECT_EQ(img.rows, confusion ? eval::kConfusionHeight : eval::kCurveHeight) << name;
  }
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
}

}  // namespace
}  // namespace kestrel
