#include "data/data_test_support.h"

#include <cstring>
#include <fstream>
#include <stdexcept>

#include <png.h>
#include <turbojpeg.h>

namespace kestrel::test {

std::vector<uint8_t> encode_jpeg(const cv::Mat& bgr, int quality) {
  tjhandle h = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  if (tjCompress2(h, bgr.data, bgr.cols, static_cast<int>(bgr.step), bgr.rows, TJPF_BGR, &out, &size, TJSAMP_444, quality, 0) != 0)
    throw std::runtime_error(tjGetErrorStr2(h));
  std::vector<uint8_t> bytes(out, out + size);
  tjFree(out);
  tjDestroy(h);
  return bytes;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_png(const std::string& path, const cv::Mat& bgr) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(bgr.cols);
  img.height = static_cast<png_uint_32>(bgr.rows);
  img.format = PNG_FORMAT_BGR;
  if (!png_image_write_to_file(&img, path.c_str(), 0, bgr.data, static_cast<png_int_32>(bgr.step), nullptr))
    throw std::runtime_error(img.message);
}

std::vector<uint8_t> encode_bmp(const cv::Mat& bgr) {
  const size_t row = (3 * static_cast<size_t>(bgr.cols) + 3) / 4 * 4;
  const size_t pixels = row * static_cast<size_t>(bgr.rows);
  std::vector<uint8_t> b(54 + pixels, 0);
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  b[0] = 'B', b[1] = 'M';
  put32(2, static_cast<uint32_t>(b.size()));
  put32(10, 54);                      // pixel data offset: file header (14) + info header (40)
  put32(14, 40);                      // BITMAPINFOHEADER
  put32(18, static_cast<uint32_t>(bgr.cols));
  put32(22, static_cast<uint32_t>(bgr.rows));  // positive height: bottom row first
  b[26] = 1;                          // planes
  b[28] = 24;                         // bits per pixel; compression (30) 0 = none
  put32(34, static_cast<uint32_t>(pixels));
  for (int y = 0; y < bgr.rows; ++y)
    std::memcpy(&b[54 + row * static_cast<size_t>(bgr.rows - 1 - y)], bgr.ptr(y), 3 * static_cast<size_t>(bgr.cols));
  return b;
}

std::vector<uint8_t> with_exif_orientation(const std::vector<uint8_t>& jpeg, int orientation) {
  // APP1: "Exif\0\0" + little-endian TIFF header + IFD0 with one SHORT entry 0x0112 = orientation.
  const std::vector<uint8_t> tiff = {'I', 'I', 42, 0, 8, 0, 0, 0,  // header, IFD0 at offset 8
                                     1, 0,                          // one entry
                                     0x12, 0x01, 3, 0, 1, 0, 0, 0, static_cast<uint8_t>(orientation), 0, 0, 0,
                                     0, 0, 0, 0};                   // no next IFD
  std::vector<uint8_t> payload = {'E', 'x', 'i', 'f', 0, 0};
  payload.insert(payload.end(), tiff.begin(), tiff.end());
  const size_t length = payload.size() + 2;
  std::vector<uint8_t> out = {0xFF, 0xD8, 0xFF, 0xE1, static_cast<uint8_t>(length >> 8), static_cast<uint8_t>(length & 0xFF)};
  out.insert(out.end(), payload.begin(), payload.end());
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}

cv::Mat coordinate_image(int w, int h) {
  cv::Mat img(h, w, CV_8UC3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) img.at<cv::Vec3b>(y, x) = cv::Vec3b(static_cast<uint8_t>(x * 8), static_cast<uint8_t>(y * 8), 100);
  return img;
}

}  // namespace kestrel::test
