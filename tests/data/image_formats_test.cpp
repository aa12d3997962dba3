// The formats upstream reads besides JPEG and PNG (BMP, TIFF, WebP ...), decoded through the OpenCV plugin
// as cv2.imread: a BMP built byte by byte with its pixels worked out by hand, files written by Pillow from
// a known array (decoded to exactly that array, in BGR order), broken files naming the file, and the
// error when the plugin is missing.
#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <utility>

#include "data/data_test_support.h"
#include "kestrel/core/error.h"
#include "kestrel/data/image_io.h"
#include "kestrel/data/video_io.h"
#include "test_support.h"

namespace kestrel::data {
namespace {

std::string error_of(const std::vector<uint8_t>& bytes, const std::string& path = "x.bmp") {
  return test::error_message([&] { decode_image(bytes, path); });
}

// 3 x 2 pixels. Displayed top row: red, green, blue; bottom row: white, black, (R 10, G 20, B 30).
// A BMP stores the bottom row first, each pixel as B, G, R, and pads each row of 9 bytes to 12.
const std::vector<uint8_t> kBmp3x2 = {
    'B', 'M', 78, 0, 0, 0,  0, 0, 0, 0,  54, 0, 0, 0,              // file header: size 78, pixels at 54
    40, 0, 0, 0,  3, 0, 0, 0,  2, 0, 0, 0,  1, 0,  24, 0,          // info header: 3 x 2, 1 plane, 24 bits
    0, 0, 0, 0,  24, 0, 0, 0,  0, 0, 0, 0,  0, 0, 0, 0,            // no compression, 24 bytes of pixels
    0, 0, 0, 0,  0, 0, 0, 0,                                       // no palette
    255, 255, 255,  0, 0, 0,  30, 20, 10,  0, 0, 0,                // bottom row, padding
    0, 0, 255,  0, 255, 0,  255, 0, 0,  0, 0, 0};                  // top row, padding

TEST(ImageFormats, HandBuiltBmpDecodesToItsPixels) {
  ASSERT_EQ(kBmp3x2.size(), 78u);
  cv::Mat expected(2, 3, CV_8UC3);
  expected.at<cv::Vec3b>(0, 0) = {0, 0, 255};  // B, G, R
  expected.at<cv::Vec3b>(0, 1) = {0, 255, 0};
  expected.at<cv::Vec3b>(0, 2) = {255, 0, 0};
  expected.at<cv::Vec3b>(1, 0) = {255, 255, 255};
  expected.at<cv::Vec3b>(1, 1) = {0, 0, 0};
  expected.at<cv::Vec3b>(1, 2) = {30, 20, 10};
  EXPECT_EQ(test::encode_bmp(expected), kBmp3x2) << "the tests' BMP writer lays files out as the hand-built one";
  if (const std::string problem = video_support_problem(); !problem.empty()) GTEST_SKIP() << problem;
  const DecodedImage d = decode_image(kBmp3x2, "hand.bmp");
  ASSERT_EQ(d.image.type(), CV_8UC3);
  ASSERT_EQ(d.image.size(), cv::Size(3, 2));
  EXPECT_EQ(cv::norm(d.image, expected, cv::NORM_INF), 0.0);
  EXPECT_TRUE(d.warning.empty());
}

TEST(ImageFormats, BrokenFilesNameTheFile) {
  if (const std::string problem = video_support_problem(); !problem.empty()) GTEST_SKIP() << problem;
  // cut inside the pixels, inside the header, and not an image at all
  for (size_t size : {70, 60, 20}) {
    const std::string error = error_of(std::vector<uint8_t>(kBmp3x2.begin(), kBmp3x2.begin() + static_cast<long>(size)));
    EXPECT_EQ(error, "x.bmp: corrupt or unsupported image (OpenCV could not decode it)") << size << " bytes";
  }
  EXPECT_EQ(error_of({'h', 'e', 'l', 'l', 'o'}, "y.tif"), "y.tif: corrupt or unsupported image (OpenCV could not decode it)");
  // a header claiming 60000 x 60000 pixels (over 2^30) is refused before OpenCV allocates anything
  std::vector<uint8_t> giant = kBmp3x2;
  giant[18] = 60000 & 0xFF, giant[19] = 60000 >> 8, giant[22] = 60000 & 0xFF, giant[23] = 60000 >> 8;
  EXPECT_EQ(error_of(giant), "x.bmp: corrupt or unsupported image (its header claims more pixels than OpenCV's imread "
                             "allows: at most 2^30, and 2^20 a side)");
}

TEST(ImageFormats, WithoutThePluginOnlyJpegAndPngDecode) {
  const std::string problem = video_support_problem();
  if (problem.empty()) GTEST_SKIP() << "the plugin is available here";
  EXPECT_EQ(error_of(kBmp3x2), "x.bmp: not a JPEG or PNG, which kestrel decodes with its OpenCV plugin only (JPEG and PNG without it); " + problem);
}

TEST(ImageFormats, DecodingFromManyThreadsAgrees) {
  if (const std::string problem = video_support_problem(); !problem.empty()) GTEST_SKIP() << problem;
  const cv::Mat img = test::coordinate_image(33, 17);
  const std::vector<uint8_t> good = test::encode_bmp(img);
  const std::vector<uint8_t> cut(good.begin(), good.begin() + 100);
  std::vector<int> mismatches(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        if (cv::norm(decode_image(good, "a.bmp").image, img, cv::NORM_INF) != 0) ++mismatches[t];
        if (error_of(cut).find("x.bmp: corrupt or unsupported image") == std::string::npos) ++mismatches[t];
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(8, 0));
}

// Pillow writes the files from arrays defined by formulas; the same formulas give the expected pixels here.
constexpr int kW = 7, kH = 5;  // odd width: BMP rows of 21 bytes are padded
cv::Vec3b rgb_at(int x, int y) {
  return {static_cast<uint8_t>((37 * x + 11 * y) % 256), static_cast<uint8_t>((5 * x + 91 * y + 7) % 256),
          static_cast<uint8_t>((x * x + 3 * y + 200) % 256)};
}
uint8_t grey_at(int x, int y) { return static_cast<uint8_t>((29 * x + 53 * y + 3) % 256); }

// Pixels of a decoded 8-bit BGR image that differ from expected(x, y) (BGR).
template <class Expected>
int mismatches(const cv::Mat& bgr, Expected expected) {
  int wrong = 0;
  for (int y = 0; y < bgr.rows; ++y)
    for (int x = 0; x < bgr.cols; ++x) wrong += bgr.at<cv::Vec3b>(y, x) != expected(x, y);
  return wrong;
}
cv::Vec3b bgr_of(const cv::Vec3b& rgb) { return {rgb[2], rgb[1], rgb[0]}; }

const char* kPillowScript = R"(
import sys
try:
    import numpy as np
    from PIL import Image
except ImportError as e:
    print('SKIP', e)
    sys.exit(0)
H, W = 5, 7
y, x = np.mgrid[0:H, 0:W]
rgb = np.stack([(37 * x + 11 * y) % 256, (5 * x + 91 * y + 7) % 256, (x * x + 3 * y + 200) % 256], -1).astype(np.uint8)
grey = ((29 * x + 53 * y + 3) % 256).astype(np.uint8)
def alpha(a): return np.concatenate([rgb, np.full((H, W, 1), a, np.uint8)], -1)
im = Image.fromarray(rgb)
im.save(DIR + '/rgb.bmp')
im.save(DIR + '/raw.tif', compression=None)
im.save(DIR + '/lzw.tif', compression='tiff_lzw')
im.save(DIR + '/deflate.tif', compression='tiff_adobe_deflate')
im.save(DIR + '/lossless.webp', lossless=True)
Image.fromarray(alpha(255)).save(DIR + '/rgba.tif')            # libtiff would premultiply a partial alpha
Image.fromarray(alpha(128)).save(DIR + '/rgba.webp', lossless=True, exact=True)
Image.fromarray(grey).save(DIR + '/grey.bmp')                  # 8-bit palette of greys
Image.fromarray(grey).save(DIR + '/grey.tif')
Image.fromarray(grey.astype(np.uint16) * 256).save(DIR + '/grey16.tif')  # 16 bits: v * 256 -> v
exif = Image.Exif()
exif[0x0112] = 6                                               # stored image turned 90 degrees clockwise to view
im.save(DIR + '/rotated.tif', exif=exif)
im.save(DIR + '/rotated.png', exif=exif)                         # an eXIf chunk (kestrel's own PNG path)
# PNGs kestrel decodes itself, each as cv2.imread does: colours as stored whatever the transparency, the high
# byte of 16-bit samples, no gamma correction.
import struct
from PIL import PngImagePlugin
Image.fromarray(alpha(0)).save(DIR + '/rgba0.png')
Image.fromarray(alpha(128)).save(DIR + '/rgba128.png')
Image.fromarray(np.stack([grey, np.full((H, W), 7, np.uint8)], -1), 'LA').save(DIR + '/grey_alpha.png')
Image.fromarray(grey.astype(np.uint16) * 256 + 255).save(DIR + '/grey16.png')  # high byte v
pal = Image.fromarray(grey, 'P')
pal.putpalette([c for i in range(256) for c in (i, (7 * i) % 256, 255 - i)])
pal.save(DIR + '/palette_trns.png', transparency=bytes([0, 40] * 128))  # a tRNS chunk
gamma = PngImagePlugin.PngInfo()
gamma.add(b'gAMA', struct.pack('>I', 100000))                  # "linear": libpng's simplified API would re-encode
im.save(DIR + '/gamma1.png', pnginfo=gamma)
im.convert('CMYK').save(DIR + '/cmyk.jpg', quality=95)           # libjpeg-turbo cannot give BGR: OpenCV decodes it
Image.open(DIR + '/cmyk.jpg').convert('RGB').save(DIR + '/cmyk_by_pil.png')  # PIL's own CMYK conversion
big = Image.fromarray(np.stack([(x * 9 + y * 3) % 256 for _ in range(3)], -1).astype(np.uint8)).resize((96, 64))
big.convert('CMYK').save(DIR + '/cmyk_big.jpg', quality=95)
data = open(DIR + '/cmyk_big.jpg', 'rb').read()
open(DIR + '/cmyk_cut.jpg', 'wb').write(data[:len(data) * 2 // 3])      # cut inside the scan
im.resize((70, 50)).save(DIR + '/pil_q95.jpg', quality=95, subsampling=0)  # PIL's encoder, as detect.py's crops
im.resize((70, 50)).save(DIR + '/source.png')
print('OK')
)";

class PillowFormats : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string problem = video_support_problem(); !problem.empty()) GTEST_SKIP() << problem;
    const test::CommandResult r = test::run_python("DIR = '" + dir.path() + "'\n" + kPillowScript);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    if (r.output.rfind("SKIP", 0) == 0) GTEST_SKIP() << "Pillow is not installed: " << r.output;
    ASSERT_NE(r.output.find("OK"), std::string::npos) << r.output;
  }
  test::TempDir dir;
};

TEST_F(PillowFormats, ColourFilesDecodeToTheArrayInBgr) {
  for (const char* name : {"rgb.bmp", "raw.tif", "lzw.tif", "deflate.tif", "lossless.webp", "rgba.tif", "rgba.webp"}) {
    SCOPED_TRACE(name);
    const DecodedImage d = decode_image_file(dir.file(name));
    ASSERT_EQ(d.image.type(), CV_8UC3);
    ASSERT_EQ(d.image.size(), cv::Size(kW, kH));
    EXPECT_EQ(mismatches(d.image, [](int x, int y) { return bgr_of(rgb_at(x, y)); }), 0);
  }
}

TEST_F(PillowFormats, GreyFilesBecomeThreeEqualChannels) {
  for (const char* name : {"grey.bmp", "grey.tif", "grey16.tif"}) {
    SCOPED_TRACE(name);
    const DecodedImage d = decode_image_file(dir.file(name));
    ASSERT_EQ(d.image.type(), CV_8UC3);
    ASSERT_EQ(d.image.size(), cv::Size(kW, kH));
    EXPECT_EQ(mismatches(d.image, [](int x, int y) { return cv::Vec3b::all(grey_at(x, y)); }), 0);
  }
}

// cv2.imread applies a TIFF's and a PNG's EXIF orientation (checked with opencv-python 5.0: a PNG of
// 20 x 10 with orientation 6 reads as 10 x 20); so does kestrel. Orientation 6: displayed pixel (x, y)
// is stored pixel (y, H - 1 - x), and the displayed image is H wide and W tall.
TEST_F(PillowFormats, ExifOrientationIsAppliedAsCv2Imread) {
  for (const char* name : {"rotated.tif", "rotated.png"}) {
    SCOPED_TRACE(name);
    const DecodedImage d = decode_image_file(dir.file(name));
    ASSERT_EQ(d.image.size(), cv::Size(kH, kW));
    EXPECT_EQ(mismatches(d.image, [](int x, int y) { return bgr_of(rgb_at(y, kH - 1 - x)); }), 0);
  }
}

// What OpenCV itself (the plugin's imdecode, i.e. cv2.imread) makes of a file, for comparison.
cv::Mat opencv_decode(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  cv::Mat bgr;
  std::string error;
  EXPECT_TRUE(decode_image_with_plugin(bytes.data(), bytes.size(), path, bgr, error)) << error;
  return bgr;
}

TEST_F(PillowFormats, PngTransparencyDepthAndGammaAsCv2Imread) {
  const auto colour = [](int x, int y) { return bgr_of(rgb_at(x, y)); };
  const auto grey = [](int x, int y) { return cv::Vec3b::all(grey_at(x, y)); };
  const auto palette = [](int x, int y) {
    const int i = grey_at(x, y);
    return cv::Vec3b(static_cast<uint8_t>(255 - i), static_cast<uint8_t>((7 * i) % 256), static_cast<uint8_t>(i));
  };
  const std::vector<std::pair<const char*, std::function<cv::Vec3b(int, int)>>> cases = {
      {"rgba0.png", colour}, {"rgba128.png", colour}, {"grey_alpha.png", grey},
      {"grey16.png", grey},  {"palette_trns.png", palette}, {"gamma1.png", colour}};
  for (const auto& [name, expected] : cases) {
    SCOPED_TRACE(name);
    // Twice, the first time after another image of the same size has been freed: transparent pixels must
    // not take what the memory held before.
    decode_image_file(dir.file("rgb.bmp"));
    for (int pass = 0; pass < 2; ++pass) {
      const DecodedImage d = decode_image_file(dir.file(name));
      ASSERT_EQ(d.image.type(), CV_8UC3);
      ASSERT_EQ(d.image.size(), cv::Size(kW, kH));
      EXPECT_EQ(mismatches(d.image, expected), 0);
      EXPECT_EQ(cv::norm(d.image, opencv_decode(dir.file(name)), cv::NORM_INF), 0.0);
    }
  }
}

// A truncated CMYK JPEG is refused as a truncated RGB one is (OpenCV would fill the rest with grey).
TEST_F(PillowFormats, TruncatedCmykJpegIsRefused) {
  EXPECT_NO_THROW(decode_image_file(dir.file("cmyk_big.jpg")));
  const std::string error = test::error_message([&] { decode_image_file(dir.file("cmyk_cut.jpg")); });
  EXPECT_NE(error.find("cmyk_cut.jpg: truncated JPEG"), std::string::npos) << error;
}

// kestrel's JPEG encoder is libjpeg's accurate DCT, as PIL's (and cv2.imwrite's): the same image at quality 95,
// 4:4:4, decodes to the same pixels (TurboJPEG's default fast DCT was up to 13 levels apart).
TEST_F(PillowFormats, JpegEncoderMatchesPillowsAtTheSameSettings) {
  const cv::Mat source = decode_image_file(dir.file("source.png")).image;
  write_jpeg(dir.file("kestrel_q95.jpg"), source, 95, /*full_chroma=*/true);
  const cv::Mat ours = decode_image_file(dir.file("kestrel_q95.jpg")).image, pil = decode_image_file(dir.file("pil_q95.jpg")).image;
  EXPECT_EQ(cv::norm(ours, pil, cv::NORM_INF), 0.0);
}

// (kestrel hands CMYK to OpenCV itself, so the check is against PIL's decoder and conversion, within the
// rounding of their two CMYK -> RGB formulas.)
TEST_F(PillowFormats, CmykJpegDecodesToItsColours) {
  const DecodedImage d = decode_image_file(dir.file("cmyk.jpg"));
  ASSERT_EQ(d.image.type(), CV_8UC3);
  ASSERT_EQ(d.image.size(), cv::Size(kW, kH));
  const cv::Mat pil = decode_image_file(dir.file("cmyk_by_pil.png")).image;
  EXPECT_LE(cv::norm(d.image, pil, cv::NORM_INF), 2.0);
}

}  // namespace
}  // namespace kestrel::data
