// Building small real image files for the data tests (encoded with libjpeg-turbo / libpng, BMP by hand).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

namespace kestrel::test {

std::vector<uint8_t> encode_jpeg(const cv::Mat& bgr, int quality = 95);
void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes);
void write_png(const std::string& path, const cv::Mat& bgr);
// An uncompressed 24-bit BMP (BITMAPINFOHEADER, bottom-up rows padded to 4 bytes), written byte by byte.
std::vector<uint8_t> encode_bmp(const cv::Mat& bgr);
// A JPEG with an APP1 EXIF segment carrying `orientation` right after the start-of-image marker.
std::vector<uint8_t> with_exif_orientation(const std::vector<uint8_t>& jpeg, int orientation);
// A w x h image whose pixel (x, y) is (x, y, 100) in B, G, R: positions are readable back after transforms.
cv::Mat coordinate_image(int w, int h);

}  // namespace kestrel::test
