// Decoding: JPEG and PNG to BGR, EXIF orientation, and broken files (other formats: image_formats_test.cpp).
#include <gtest/gtest.h>

#include "data/data_test_support.h"
#include "kestrel/core/error.h"
#include "kestrel/data/image_io.h"
#include "kestrel/data/video_io.h"
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
  // neither JPEG nor PNG: OpenCV's turn (the plugin), or an error saying the plugin is missing
  const std::string other = error_of({'B', 'M', 1, 2, 3});
  EXPECT_EQ(other, video_support_problem().empty()
                       ? "img.jpg: corrupt or unsupported image (OpenCV could not decode it)"
                       : "img.jpg: not a JPEG or PNG, which kestrel decodes with its OpenCV plugin only (JPEG and PNG without it); " + video_support_problem());
  // cut inside the entropy-coded data of a larger image: the decoder runs out of data mid-scan
  auto big = test::encode_jpeg(test::coordinate_image(128, 128));
  auto truncated = std::vector<uint8_t>(big.begin(), big.begin() + static_cast<long>(big.size() * 2 / 3));
  EXPECT_NE(error_of(truncated).find("img.jpg: truncated JPEG"), std::string::npos) << error_of(truncated);
  auto header_only = std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + 20);
  EXPECT_NE(error_of(header_only).find("img.jpg: corrupt or truncated JPEG"), std::string::npos) << error_of(header_only);
  std::vector<uint8_t> png_garbage = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 1, 2, 3, 4, 5};
  EXPECT_EQ(error_of(png_garbage), "img.jpg: corrupt or truncated PNG (the file ends early)");
  // a PNG cut in its image data, one without its end chunk (cv2.imread refuses both), one with a damaged CRC
  test::TempDir dir;
  write_png(dir.file("x.png"), test::coordinate_image(64, 48));
  const std::vector<uint8_t> png = read_file_bytes(dir.file("x.png"));
  EXPECT_EQ(error_of(std::vector<uint8_t>(png.begin(), png.begin() + static_cast<long>(png.size() / 2))),
            "img.jpg: corrupt or truncated PNG (the file ends early)");
  EXPECT_EQ(error_of(std::vector<uint8_t>(png.begin(), png.end() - 12)),
            "img.jpg: corrupt or truncated PNG (the file ends early)");
  std::vector<uint8_t> bad_crc = png;
  bad_crc[bad_crc.size() - 16] ^= 0xFF;  // the last byte of the last IDAT's CRC (IEND is the final 12 bytes)
  EXPECT_EQ(error_of(bad_crc), "img.jpg: corrupt or truncated PNG (IDAT: CRC error)");
  EXPECT_THROW(decode_image_file("/nonexistent/x.jpg"), Error);
}

// Fuzzing finding: an IFD offset near 2^32 wrapped the bounds check (uint32 arithmetic) and read far
// outside the file. It is now an unreadable EXIF block: orientation 1, the image decoded as stored.
TEST(ImageIoErrors, ExifOffsetNearFourGigabytesIsIgnored) {
  cv::Mat stored(10, 20, CV_8UC3, cv::Scalar(0, 0, 0));
  auto jpeg = test::with_exif_orientation(test::encode_jpeg(stored, 100), 6);
  // SOI (2) + APP1 marker and length (4) + "Exif\0\0" (6): the TIFF header at 12, its IFD offset at 16..19
  ASSERT_EQ(jpeg[12], 'I');
  jpeg[16] = 0xFE, jpeg[17] = 0xFF, jpeg[18] = 0xFF, jpeg[19] = 0xFF;
  EXPECT_EQ(jpeg_exif_orientation(jpeg.data(), jpeg.size()), 1);
  auto d = decode_image(jpeg, "img.jpg");
  EXPECT_EQ(d.image.cols, 20);
  EXPECT_EQ(d.image.rows, 10);
}

// PNG chunk CRC (ISO 3309, as zlib's crc32), to keep a patched header valid.
uint32_t png_crc(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

void put_be32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

// Fuzzing finding: a header claiming a giant size (a corrupt file of a few hundred bytes) made kestrel
// allocate it: 12.7 GB filled by the JPEG decoder, or for a PNG an OpenCV allocation exception without the
// file name. Sizes over OpenCV imread's limit (2^30 pixels, sides up to 2^20) are refused before decoding.
TEST(ImageIoErrors, GiantClaimedSizeIsRefusedBeforeAllocating) {
  auto jpeg = test::encode_jpeg(test::coordinate_image(16, 16));
  size_t sof = 2;
  while (sof + 9 < jpeg.size() && !(jpeg[sof] == 0xFF && jpeg[sof + 1] == 0xC0)) ++sof;
  ASSERT_LT(sof + 9, jpeg.size());
  // SOF0: marker (2), length (2), precision (1), height (2), width (2)
  jpeg[sof + 5] = 60000 >> 8, jpeg[sof + 6] = 60000 & 0xFF, jpeg[sof + 7] = 60000 >> 8, jpeg[sof + 8] = 60000 & 0xFF;
  EXPECT_EQ(error_of(jpeg), "img.jpg: image of 60000x60000 pixels is too large (at most 2^30 pixels, as OpenCV's imread)");

  test::TempDir dir;
  test::write_png(dir.file("a.png"), test::coordinate_image(8, 8));
  auto png = read_file_bytes(dir.file("a.png"));
  // signature (8), IHDR length (4) and type (4), width at 16, height at 20, 13 data bytes, CRC at 29
  ASSERT_EQ(std::string(png.begin() + 12, png.begin() + 16), "IHDR");
  put_be32(png, 16, 1000000);
  put_be32(png, 20, 1000000);
  put_be32(png, 29, png_crc(png.data() + 12, 17));
  EXPECT_EQ(error_of(png), "img.jpg: image of 1000000x1000000 pixels is too large (at most 2^30 pixels, as OpenCV's imread)");
  put_be32(png, 16, 40000);  // within the side limit, 1.6e9 pixels over the total
  put_be32(png, 20, 40000);
  put_be32(png, 29, png_crc(png.data() + 12, 17));
  EXPECT_NE(error_of(png).find("img.jpg: image of 40000x40000 pixels is too large"), std::string::npos) << error_of(png);
}

// A PNG's eXIf chunk: a chunk is u32 length, type, data, CRC (the scanner does not check CRCs, so
// zeros do here). Built around kestrel's own PNG bytes; orientation read from the TIFF structure,
// with or without JPEG's "Exif\0\0" prefix; broken or absent chunks give 1.
TEST(ImageIo, PngExifOrientationIsReadFromItsChunk) {
  cv::Mat stored(10, 20, CV_8UC3, cv::Scalar(0, 0, 0));
  stored(cv::Rect(0, 0, 8, 8)).setTo(cv::Scalar(255, 255, 255));
  test::TempDir dir;
  write_png(dir.file("plain.png"), stored);
  const std::vector<uint8_t> png = read_file_bytes(dir.file("plain.png"));
  EXPECT_EQ(png_exif_orientation(png.data(), png.size()), 1);
  auto with_chunk = [&](std::vector<uint8_t> payload, size_t claimed_extra = 0) {
    const size_t length = payload.size() + claimed_extra;
    std::vector<uint8_t> chunk = {static_cast<uint8_t>(length >> 24), static_cast<uint8_t>(length >> 16),
                                  static_cast<uint8_t>(length >> 8), static_cast<uint8_t>(length), 'e', 'X', 'I', 'f'};
    chunk.insert(chunk.end(), payload.begin(), payload.end());
    chunk.insert(chunk.end(), {0, 0, 0, 0});
    std::vector<uint8_t> out(png.begin(), png.begin() + 33);  // signature (8) + IHDR (4 + 4 + 13 + 4)
    out.insert(out.end(), chunk.begin(), chunk.end());
    out.insert(out.end(), png.begin() + 33, png.end());
    return out;
  };
  // Big-endian TIFF: "MM", 42, IFD0 at 8, one entry: tag 0x0112, SHORT, count 1, value 8 (then padding).
  const std::vector<uint8_t> tiff = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0};
  auto eight = with_chunk(tiff);
  EXPECT_EQ(png_exif_orientation(eight.data(), eight.size()), 8);
  std::vector<uint8_t> prefixed = {'E', 'x', 'i', 'f', 0, 0};
  prefixed.insert(prefixed.end(), tiff.begin(), tiff.end());
  auto eight_prefixed = with_chunk(prefixed);
  EXPECT_EQ(png_exif_orientation(eight_prefixed.data(), eight_prefixed.size()), 8);
  auto past_the_end = with_chunk(tiff, 1u << 30);  // a length beyond the file: not read
  EXPECT_EQ(png_exif_orientation(past_the_end.data(), past_the_end.size()), 1);

  // Orientation 8 = rotate 90 degrees counter-clockwise to display: the stored top-left corner becomes
  // the displayed bottom-left one, and the 20 x 10 image displays 10 x 20.
  const DecodedImage d = decode_image(eight, "rotated.png");
  ASSERT_EQ(d.image.size(), cv::Size(10, 20));
  EXPECT_EQ(d.image.at<cv::Vec3b>(17, 2), cv::Vec3b(255, 255, 255));
  EXPECT_EQ(d.image.at<cv::Vec3b>(2, 2), cv::Vec3b(0, 0, 0));
  EXPECT_EQ(d.image.at<cv::Vec3b>(17, 8), cv::Vec3b(0, 0, 0));
}

}  // namespace
}  // namespace kestrel::data
