// val --task study's pieces: upstream's image sizes, rows written exactly as numpy's savetxt(fmt='%10.4g')
// writes them (checked with the project's Python), the file name, and study.png: both row layouts drawn,
// bad files named with their line.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <opencv2/core.hpp>

#include "kestrel/core/error.h"
#include "kestrel/data/image_io.h"
#include "kestrel/eval/plot_canvas.h"
#include "kestrel/eval/val_study.h"
#include "test_support.h"

namespace kestrel::eval {
namespace {

TEST(ValStudy, ImageSizesAreUpstreams) {
  // range(256, 1536 + 128, 128)
  EXPECT_EQ(study_image_sizes(), (std::vector<int>{256, 384, 512, 640, 768, 896, 1024, 1152, 1280, 1408, 1536}));
}

ValidationResult example_result() {
  ValidationResult r;
  r.metrics.mp = 0.123456;
  r.metrics.mr = 0.98765432;
  r.metrics.map50 = 0.5;
  r.metrics.map = 0.33333333;
  r.loss = {0.0123, 2.5e-5, 0};
  r.ms_per_image = {1.23456, 12345.6, 0.0001};
  return r;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// val.py: P R mAP50 mAP 3 losses, pre-process, inference, NMS; test.py: ..., inference, NMS, their sum,
// imgsz, imgsz, batch size. numpy writes the same values with the same format for comparison.
TEST(ValStudy, RowsAreWhatNumpySavetxtWrites) {
  const ValidationResult r = example_result();
  test::TempDir dir;
  test::write_file(dir.file("rows.py"),
                   "import numpy as np\n"
                   "v5 = [0.123456, 0.98765432, 0.5, 0.33333333, 0.0123, 2.5e-5, 0, 1.23456, 12345.6, 0.0001]\n"
                   "v7 = v5[:7] + [12345.6, 0.0001, 12345.6 + 0.0001, 640, 640, 32]\n"
                   "np.savetxt('" + dir.file("v5.txt") + "', [v5], fmt='%10.4g')\n"
                   "np.savetxt('" + dir.file("v7.txt") + "', [v7], fmt='%10.4g')\n");
  const auto run = test::run_command(std::string(KESTREL_TEST_PYTHON) + " " + dir.file("rows.py"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(study_row(r, false, 640, 32) + "\n", read_text(dir.file("v5.txt")));
  EXPECT_EQ(study_row(r, true, 640, 32) + "\n", read_text(dir.file("v7.txt")));
  // By hand, the first columns: '%10.4g' of 0.123456 is "    0.1235", of 0.5 "       0.5".
  EXPECT_EQ(study_row(r, false, 640, 32).substr(0, 32), "    0.1235     0.9877        0.5");
}

TEST(ValStudy, FileNameIsDataStemAndWeightsStem) {
  EXPECT_EQ(study_file_name("data/coco128.yaml", "runs/train/exp/weights/best.safetensors"), "study_coco128_best.txt");
}

int pixels_of(const cv::Mat& img, const cv::Scalar& bgr) {
  cv::Mat mask;
  cv::inRange(img, bgr, bgr, mask);
  return cv::countNonZero(mask);
}

TEST(ValStudy, PlotDrawsEveryFileAndNamesBadOnes) {
  test::TempDir dir;
  // A val.py study (speed in column 8) whose best mAP is at the third size, and a test.py one (column 9)
  // whose best is the first size (upstream would draw nothing of it; kestrel draws all its points).
  std::string v5, v7;
  const double maps[] = {0.30, 0.35, 0.40, 0.38};
  for (int i = 0; i < 4; ++i) {
    ValidationResult r = example_result();
    r.metrics.map = maps[i];
    r.ms_per_image = {1, 2.0 + i, 0.5};
    v5 += study_row(r, false, 256 + 128 * i, 32) + "\n";
    r.metrics.map = 0.3 - 0.05 * i;
    v7 += study_row(r, true, 256 + 128 * i, 32) + "\n";
  }
  test::write_file(dir.file("study_coco_a.txt"), v5);
  test::write_file(dir.file("study_coco_b.txt"), v7);
  plot_study({dir.file("study_coco_b.txt"), dir.file("study_coco_a.txt")}, dir.file("study.png"));
  const cv::Mat img = data::decode_image_file(dir.file("study.png")).image;
  EXPECT_EQ(img.cols, 2000);
  EXPECT_EQ(img.rows, 1000);
  // Files are drawn in name order: a in tab10's first colour, b in its second.
  EXPECT_GT(pixels_of(img, canvas::tab10(0)), 200);
  EXPECT_GT(pixels_of(img, canvas::tab10(1)), 200);

  test::write_file(dir.file("short.txt"), v5 + "1 2 3\n");
  try {
    plot_study({dir.file("short.txt")}, dir.file("s.png"));
    ADD_FAILURE() << "a 3-value row was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("short.txt:5: 3 values"), std::string::npos) << e.what();
  }
  test::write_file(dir.file("words.txt"), "0.1 abc\n");
  EXPECT_THROW(plot_study({dir.file("words.txt")}, dir.file("s.png")), Error);
  test::write_file(dir.file("empty.txt"), "\n");
  EXPECT_THROW(plot_study({dir.file("empty.txt")}, dir.file("s.png")), Error);
  EXPECT_THROW(plot_study({dir.file("missing.txt")}, dir.file("s.png")), Error);
}

}  // namespace
}  // namespace kestrel::eval
