// Small JPEG and PNG seeds for image_io_fuzz, cut from a real photo:
//   make_image_seeds <photo.jpg> <out_dir>
// baseline 4:2:0, progressive, 4:4:4, grayscale JPEGs (one with an EXIF orientation), and BGR, gray,
// gray+alpha, palette-free RGBA and 16-bit-free PNGs through libpng's simplified API.
#include <png.h>
#include <turbojpeg.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <opencv2/imgproc.hpp>

#include "kestrel/data/image_io.h"

namespace {

void save(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::vector<uint8_t> jpeg(const cv::Mat& bgr, int subsampling, int flags, int pixel_format = TJPF_BGR) {
  tjhandle h = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  cv::Mat src = bgr;
  if (pixel_format == TJPF_GRAY) cv::cvtColor(bgr, src, cv::COLOR_BGR2GRAY);
  tjCompress2(h, src.data, src.cols, static_cast<int>(src.step), src.rows, pixel_format, &out, &size, subsampling, 75, flags);
  std::vector<uint8_t> bytes(out, out + size);
  tjFree(out);
  tjDestroy(h);
  return bytes;
}

// An APP1 Exif segment (big-endian TIFF, one IFD entry: Orientation = value) right after SOI.
std::vector<uint8_t> with_orientation(std::vector<uint8_t> j, int value) {
  const uint8_t tiff[] = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1,
                          0, static_cast<uint8_t>(value), 0, 0, 0, 0, 0, 0, 0, 0};
  std::vector<uint8_t> seg = {0xFF, 0xE1, 0, 0, 'E', 'x', 'i', 'f', 0, 0};
  seg.insert(seg.end(), tiff, tiff + sizeof tiff);
  const size_t length = seg.size() - 2;
  seg[2] = static_cast<uint8_t>(length >> 8);
  seg[3] = static_cast<uint8_t>(length & 0xFF);
  j.insert(j.begin() + 2, seg.begin(), seg.end());
  return j;
}

std::vector<uint8_t> png(const cv::Mat& bgr, png_uint_32 format) {
  cv::Mat src;
  switch (format) {
    case PNG_FORMAT_GRAY: cv::cvtColor(bgr, src, cv::COLOR_BGR2GRAY); break;
    case PNG_FORMAT_GA: {
      cv::Mat g;
      cv::cvtColor(bgr, g, cv::COLOR_BGR2GRAY);
      cv::Mat planes[] = {g, g};
      cv::merge(planes, 2, src);
      break;
    }
    case PNG_FORMAT_BGRA: cv::cvtColor(bgr, src, cv::COLOR_BGR2BGRA); break;
    default: src = bgr;
  }
  png_image p;
  std::memset(&p, 0, sizeof p);
  p.version = PNG_IMAGE_VERSION;
  p.width = src.cols;
  p.height = src.rows;
  p.format = format;
  png_alloc_size_t size = 0;
  png_image_write_to_memory(&p, nullptr, &size, 0, src.data, static_cast<png_int_32>(src.step), nullptr);
  std::vector<uint8_t> bytes(size);
  png_image_write_to_memory(&p, bytes.data(), &size, 0, src.data, static_cast<png_int_32>(src.step), nullptr);
  bytes.resize(size);
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <photo.jpg> <out_dir>\n", argv[0]);
    return 2;
  }
  const cv::Mat photo = kestrel::data::decode_image_file(argv[1]).image;
  cv::Mat small;
  cv::resize(photo, small, cv::Size(24, 16), 0, 0, cv::INTER_AREA);
  const std::string d = argv[2];
  save(d + "/baseline420.jpg", jpeg(small, TJSAMP_420, 0));
  save(d + "/progressive.jpg", jpeg(small, TJSAMP_420, TJFLAG_PROGRESSIVE));
  save(d + "/baseline444.jpg", jpeg(small, TJSAMP_444, 0));
  save(d + "/gray.jpg", jpeg(small, TJSAMP_GRAY, 0, TJPF_GRAY));
  save(d + "/exif6.jpg", with_orientation(jpeg(small, TJSAMP_420, 0), 6));
  save(d + "/bgr.png", png(small, PNG_FORMAT_BGR));
  save(d + "/gray.png", png(small, PNG_FORMAT_GRAY));
  save(d + "/ga.png", png(small, PNG_FORMAT_GA));
  save(d + "/bgra.png", png(small, PNG_FORMAT_BGRA));
  return 0;
}
