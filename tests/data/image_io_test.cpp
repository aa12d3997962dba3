// Decoding: JPEG and PNG to BGR, EXIF orientation, and broken files.
#include <gtest/gtest.h>

#include "data/data_test_support.h"
#include "kestrel/core/error.h"
#include "kestrel/data/image_io.h"
#include "test_support.h"

namespace kestrel::data {
namespace {

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    decode_image(bytes, "img.jpg");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ImageIo, PngIsLosslessBgr) {
  test::TempDir dir;
  cv::Mat img = test::coordinate_image(7, 5);
  test::write_png(dir.file("a.png"), img);
  auto d = decode_image_file(dir.file("a.png"));
  ASSERT_EQ(d.image.type(), CV_8UC3);
  EXPECT_EQ(cv::norm(d.image, img, cv::NORM_INF), 0.0);
}

TEST(ImageIo, JpegDecodesCloseToTheOriginal) {
  cv::Mat img(16, 24, CV_8UC3, cv::Scalar(30, 120, 220));  // flat colour: JPEG reproduces it within a few levels
  auto d = decode_image(test::encode_jpeg(img, 95), "flat.jpg");
  EXPECT_EQ(d.image.size(), img.size());
  EXPECT_LE(cv::norm(d.image, img, cv::NORM_INF), 3.0);
  EXPECT_TRUE(d.warning.empty());
}

// Orientation 6 = the stored image must be rotated 90 degrees clockwise to display upright.
TEST(ImageIo, ExifOrientationIsApplied) {
  cv::Mat stored(10, 20, CV_8UC3, cv::Scalar(0, 0, 0));
  stored(cv::Rect(0, 0, 8, 8)).setTo(cv::Scalar(255, 255, 255));  // white block at the stored top-left
  auto jpeg = test::with_exif_orientation(test::encode_jpeg(stored, 100), 6);
  EXPECT_EQ(jpeg_exif_orientation(jpeg.data(), jpeg.size()), 6);
  auto d = decode_image(jpeg, "rotated.jpg");
  ASSERT_EQ(d.image.cols, 10);
  ASSERT_EQ(d.image.rows, 20);
  // after a clockwise quarter turn the stored top-left corner is the displayed top-right corner
  EXPECT_GT(d.image.at<cv::Vec3b>(2, 7)[0], 200);
  EXPECT_LT(d.image.at<cv::Vec3b>(17, 2)[0], 50);
  EXPECT_LT(d.image.at<cv::Vec3b>(2, 0)[0], 50);
  // orientation 3 (180 degrees): top-left -> bottom-right
  auto upside = decode_image(test::with_exif_orientation(test::encode_jpeg(stored, 100), 3), "r.jpg");
  ASSERT_EQ(upside.image.cols, 20);
  EXPECT_GT(upside.image.at<cv::Vec3b>(7, 17)[0], 200);
  EXPECT_LT(upside.image.at<cv::Vec3b>(2, 2)[0], 50);
  // no EXIF: 1
  auto plain = test::encode_jpeg(stored);
  EXPECT_EQ(jpeg_exif_orientation(plain.data(), plain.size()), 1);
}

TEST(ImageIoErrors, BrokenFilesAreReported) {
  cv::Mat img = test::coordinate_image(32, 32);
  auto jpeg = test::encode_jpeg(img);
  EXPECT_EQ(error_of({}), "img.jpg: empty file");
  EXPECT_NE(error_of({'B', 'M', 1, 2, 3}).find("img.jpg: unsupported image format"), std::string::npos);
  // cut inside the entropy-coded data of a larger image: the decoder runs out of data mid-scan
  auto big = test::encode_jpeg(test::coordinate_image(128, 128));
  auto truncated = std::vector<uint8_t>(big.begin(), big.begin() + static_cast<long>(big.size() * 2 / 3));
  EXPECT_NE(error_of(truncated).find("img.jpg: truncated JPEG"), std::string::npos) << error_of(truncated);
  auto header_only = std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + 20);
  EXPECT_NE(error_of(header_only).find("img.jpg: corrupt or truncated JPEG"), std::string::npos) << error_of(header_only);
  std::vector<uint8_t> png_garbage = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 1, 2, 3, 4, 5};
  EXPECT_NE(error_of(png_garbage).find("img.jpg: corrupt PNG"), std::string::npos) << error_of(png_garbage);
  EXPECT_THROW(decode_image_file("/nonexistent/x.jpg"), Error);
}

}  // namespace
}  // namespace kestrel::data
