// Augmentation hyperparameters: defaults equal hyp.scratch-low.yaml, files override them.
#include <filesystem>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "kestrel/core/error.h"
#include "kestrel/data/hyp.h"
#include "test_support.h"

namespace kestrel::data {
namespace {

AugmentOptions augment_options_of(const std::string& path, bool* yolov7_recipe = nullptr) {
  return augment_options_from_yaml(YAML::LoadFile(path), path, yolov7_recipe);
}

TEST(Hyp, DefaultsAreYolov5ScratchLow) {
  // values of YOLOv5's data/hyps/hyp.scratch-low.yaml (peers.md section 2.1)
  AugmentOptions o;
  EXPECT_DOUBLE_EQ(o.hsv_h, 0.015);
  EXPECT_DOUBLE_EQ(o.hsv_s, 0.7);
  EXPECT_DOUBLE_EQ(o.hsv_v, 0.4);
  EXPECT_DOUBLE_EQ(o.translate, 0.1);
  EXPECT_DOUBLE_EQ(o.scale, 0.5);
  EXPECT_DOUBLE_EQ(o.fliplr, 0.5);
  EXPECT_DOUBLE_EQ(o.mosaic, 1.0);
  EXPECT_DOUBLE_EQ(o.mixup, 0.0);
  EXPECT_DOUBLE_EQ(o.copy_paste, 0.0);
  EXPECT_DOUBLE_EQ(o.degrees, 0.0);
}

TEST(Hyp, FileOverridesAndYolov7Recipe) {
  test::TempDir dir;
  test::write_file(dir.file("p5.yaml"), "lr0: 0.01\nscale: 0.9\ntranslate: 0.2\nmixup: 0.15\npaste_in: 0.15\nloss_ota: 1\n");
  bool v7 = false;
  AugmentOptions o = augment_options_of(dir.file("p5.yaml"), &v7);
  EXPECT_TRUE(v7);
  EXPECT_DOUBLE_EQ(o.scale, 0.9);
  EXPECT_DOUBLE_EQ(o.translate, 0.2);
  EXPECT_DOUBLE_EQ(o.mixup, 0.15);
  EXPECT_DOUBLE_EQ(o.mosaic9, 0.2);
  EXPECT_DOUBLE_EQ(o.hsv_h, 0.015);  // untouched keys keep their defaults
  test::write_file(dir.file("bad.yaml"), "scale: big\n");
  try {
    augment_options_of(dir.file("bad.yaml"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.yaml:1: 'scale' must be a number"), std::string::npos) << e.what();
  }
  for (const char* text : {"scale: .nan\n", "degrees: .inf\n", "copy_paste: 1.5\n", "mixup: -0.1\n"}) {
    test::write_file(dir.file("out_of_range.yaml"), text);
    EXPECT_THROW(augment_options_of(dir.file("out_of_range.yaml")), Error) << text;
  }
}

// YOLOv7's zoom is U(1 - scale, 1.1 + scale) (utils/datasets.py random_perspective): a scale down to -0.05 is a
// range (at -0.05 the constant 1.05), below it none. YOLOv5's U(1 - scale, 1 + scale) has none below 0.
TEST(Hyp, Yolov7ScaleMayBeNegativeDownToItsZoomRange) {
  test::TempDir dir;
  test::write_file(dir.file("v7.yaml"), "loss_ota: 1\nscale: -0.05\n");
  EXPECT_DOUBLE_EQ(augment_options_of(dir.file("v7.yaml")).scale, -0.05);
  test::write_file(dir.file("v7_below.yaml"), "loss_ota: 1\nscale: -0.06\n");
  try {
    augment_options_of(dir.file("v7_below.yaml"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("v7_below.yaml:2: 'scale' must be a finite number >= -0.05"), std::string::npos)
        << e.what();
  }
  test::write_file(dir.file("v5.yaml"), "scale: -0.05\n");
  EXPECT_THROW(augment_options_of(dir.file("v5.yaml")), Error);
}

// --hyp as upstream's commands spell it finds the bundled file: a bare name (with or without .yaml), and
// YOLOv5's data/hyps/<file> or YOLOv7's data/<file> when no such file exists here. Other folders are
// taken as given (the loader names them when missing).
TEST(Hyp, UpstreamSpellingsFindTheBundledFiles) {
  const auto bundled = [](const std::string& file) {
    return std::filesystem::path(resolve_hyp_path(file)).lexically_normal().generic_string();
  };
  EXPECT_NE(bundled("hyp.scratch-low").find("configs/hyps/hyp.scratch-low.yaml"), std::string::npos);
  EXPECT_NE(bundled("data/hyps/hyp.scratch-low.yaml").find("configs/hyps/hyp.scratch-low.yaml"), std::string::npos);
  EXPECT_NE(bundled("data/hyps/hyp.VOC.yaml").find("configs/hyps/hyp.VOC.yaml"), std::string::npos);
  EXPECT_NE(bundled("data/hyp.scratch.p5.yaml").find("configs/hyps/hyp.scratch.p5.yaml"), std::string::npos);
  EXPECT_NE(bundled("data/hyp.scratch.custom.yaml").find("configs/hyps/hyp.scratch.custom.yaml"), std::string::npos);
  EXPECT_EQ(resolve_hyp_path("other/hyp.scratch-low.yaml"), "other/hyp.scratch-low.yaml");
  EXPECT_EQ(resolve_hyp_path("data/hyps/hyp.mine.yaml"), "data/hyps/hyp.mine.yaml");
  EXPECT_EQ(resolve_hyp_path("data/demo/demo.yaml"), "data/demo/demo.yaml");  // exists: as given
}

}  // namespace
}  // namespace kestrel::data
