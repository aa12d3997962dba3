// detect --visualize's files: .npy that NumPy reads back, the channel grid's layout and colours
// (matplotlib's viridis end points), upstream's module-type names and the layers it skips; and the CLI
// writing one pair of files per body layer.
#include <gtest/gtest.h>

#include <filesystem>

#include <ATen/ATen.h>
#include <opencv2/core.hpp>

#include "kestrel/data/image_io.h"
#include "kestrel/eval/feature_maps.h"
#include "test_support.h"

namespace kestrel::eval {
namespace {

TEST(FeatureMaps, NpyIsWhatNumpyReads) {
  test::TempDir dir;
  const at::Tensor t = at::arange(24, at::kFloat).view({2, 3, 4}) / 7;
  write_npy_float32(dir.file("a.npy"), t);
  write_npy_float32(dir.file("b.npy"), at::tensor({1.5f, -2.f}));
  const auto r = test::run_python("import numpy as np\na = np.load('" + dir.file("a.npy") + "')\nb = np.load('" +
                                  dir.file("b.npy") + "')\n"
                                  "print(a.shape, a.dtype, bool((a == np.arange(24, dtype=np.float32).reshape(2, 3, 4) / np.float32(7)).all()), b.tolist())\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(2, 3, 4) float32 True [1.5, -2.0]"), std::string::npos) << r.output;
}

TEST(FeatureMaps, ModuleTypesAreUpstreams) {
  EXPECT_EQ(feature_module_type("nn.Upsample", false), "Upsample");  // torch.nn.modules.upsampling.Upsample
  EXPECT_EQ(feature_module_type("C3", false), "C3");
  EXPECT_EQ(feature_module_type("Conv", true), "Sequential");  // n > 1: an nn.Sequential of Convs
}

cv::Vec3b pixel(const cv::Mat& img, int x, int y) { return img.at<cv::Vec3b>(y, x); }

void expect_near(const cv::Vec3b& got, const cv::Vec3b& want) {
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(got[k], want[k], 3) << "channel " << k;
}

// [1, 40, 6, 9]: 32 of 40 channels in 4 rows of 8 tiles, each 220 x 146 (the map's 9:6 aspect) with 4 px
// gaps: 8 * 224 + 4 = 1796 wide, 4 * 150 + 4 = 604 high. Channel 0 constant: viridis' lowest colour
// everywhere (matplotlib's viridis(0) = RGB 68, 1, 84); channel 1 a ramp: its maximum in viridis'
// highest colour (RGB 253, 231, 37), its minimum in the lowest.
TEST(FeatureMaps, GridLayoutAndColours) {
  test::TempDir dir;
  at::Tensor x = at::rand({1, 40, 6, 9});
  x[0][0].fill_(3.f);
  x[0][1].copy_(at::arange(54, at::kFloat).view({6, 9}));
  const std::string png = save_feature_maps(x, "Conv", 7, dir.path());
  EXPECT_EQ(png, dir.file("stage7_Conv_features.png"));
  const cv::Mat img = data::decode_image_file(png).image;
  EXPECT_EQ(img.cols, 1796);
  EXPECT_EQ(img.rows, 604);
  const cv::Vec3b lowest(84, 1, 68), highest(37, 231, 253);  // BGR
  expect_near(pixel(img, 4 + 110, 4 + 73), lowest);           // tile 0, centre
  expect_near(pixel(img, 228 + 2, 4 + 2), lowest);            // tile 1, top-left: the ramp's 0
  expect_near(pixel(img, 228 + 217, 4 + 143), highest);       // tile 1, bottom-right: the ramp's 53
  EXPECT_EQ(pixel(img, 2, 2), cv::Vec3b(255, 255, 255));      // the gap
  EXPECT_TRUE(std::filesystem::exists(dir.file("stage7_Conv_features.npy")));
  // upstream skips the head and maps one pixel high or wide
  EXPECT_EQ(save_feature_maps(x, "IDetect", 8, dir.path()), "");
  EXPECT_EQ(save_feature_maps(at::rand({1, 4, 1, 9}), "Conv", 9, dir.path()), "");
  EXPECT_FALSE(std::filesystem::exists(dir.file("stage9_Conv_features.png")));
}

// yolov5n: 24 body layers, each with a PNG and an .npy under <run>/<stem>/ (upstream's names: Upsample for
// nn.Upsample, C3, SPPF, Concat), none for the Detect layer; a second run's folder for the same stem is
// <stem>2 (increment_path).
TEST(FeatureMaps, DetectVisualizeWritesEveryBodyLayer) {
  test::TempDir dir;
  auto r = test::run_command(test::kestrel_binary() + " train --cfg yolov5n --data " + test::demo_subset(dir, 1) +
                             " --epochs 1 --img 64 --batch-size 1 --workers 1 --device cpu --quiet --noval --project " + dir.file("runs"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string detect = test::kestrel_binary() + " detect --weights " + dir.file("runs/exp/weights/last.safetensors") +
                             " --source data/demo/images/val/000000000139.jpg --img 64 --visualize --nosave --exist-ok --project " +
                             dir.file("det");
  r = test::run_command(detect);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int pngs = 0, npys = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("det/exp/000000000139"))) {
    pngs += e.path().extension() == ".png";
    npys += e.path().extension() == ".npy";
  }
  EXPECT_EQ(pngs, 24) << r.output;
  EXPECT_EQ(npys, 24);
  for (const char* name : {"stage2_C3_features.png", "stage9_SPPF_features.png", "stage11_Upsample_features.png",
                           "stage12_Concat_features.png", "stage23_C3_features.png"})
    EXPECT_TRUE(std::filesystem::exists(dir.file(std::string("det/exp/000000000139/") + name))) << name;
  r = test::run_command(detect);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("det/exp/0000000001392/stage0_Conv_features.png"))) << r.output;
}

}  // namespace
}  // namespace kestrel::eval
