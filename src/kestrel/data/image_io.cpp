#include "kestrel/data/image_io.h"

#include <cctype>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include <png.h>
#include <turbojpeg.h>

#include <opencv2/core.hpp>

#include "kestrel/core/atomic_file.h"
#include "kestrel/core/error.h"
#include "kestrel/core/regular_file.h"
#include "kestrel/data/video_io.h"

namespace kestrel::data {
namespace {

bool is_jpeg(const std::vector<uint8_t>& b) { return b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF; }
bool is_png(const std::vector<uint8_t>& b) {
  static const uint8_t magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  return b.size() >= 8 && std::memcmp(b.data(), magic, 8) == 0;
}

uint32_t read_u32(const uint8_t* p, bool little) {
  return little ? (p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24)
                : (static_cast<uint32_t>(p[0]) << 24 | p[1] << 16 | p[2] << 8 | p[3]);
}
uint16_t read_u16(const uint8_t* p, bool little) {
  return static_cast<uint16_t>(little ? (p[0] | p[1] << 8) : (p[0] << 8 | p[1]));
}

// Orientation tag of the TIFF structure inside an APP1 "Exif\0\0" segment; 1 if absent.
int tiff_orientation(const uint8_t* tiff, size_t size) {
  if (size < 8) return 1;
  const bool little = tiff[0] == 'I' && tiff[1] == 'I';
  if (!little && !(tiff[0] == 'M' && tiff[1] == 'M')) return 1;
  const size_t ifd = read_u32(tiff + 4, little);  // size_t: an offset near 2^32 must not wrap past the check
  if (ifd + 2 > size) return 1;
  const uint16_t entries = read_u16(tiff + ifd, little);
  for (uint32_t i = 0; i < entries; ++i) {
    const size_t at = ifd + 2 + 12 * static_cast<size_t>(i);
    if (at + 12 > size) return 1;
    if (read_u16(tiff + at, little) == 0x0112) {
      const int value = read_u16(tiff + at + 8, little);
      return value >= 1 && value <= 8 ? value : 1;
    }
  }
  return 1;
}

cv::Mat apply_orientation(cv::Mat img, int orientation) {
  cv::Mat out;
  switch (orientation) {
    case 2: cv::flip(img, out, 1); return out;
    case 3: cv::rotate(img, out, cv::ROTATE_180); return out;
    case 4: cv::flip(img, out, 0); return out;
    case 5: cv::transpose(img, out); return out;
    case 6: cv::rotate(img, out, cv::ROTATE_90_CLOCKWISE); return out;
    case 7: cv::transpose(img, out); cv::rotate(out, out, cv::ROTATE_180); return out;
    case 8: cv::rotate(img, out, cv::ROTATE_90_COUNTERCLOCKWISE); return out;
    default: return img;
  }
}

// OpenCV's imread limits (CV_IO_MAX_IMAGE_WIDTH/HEIGHT/PIXELS): what upstream's cv2.imread refuses is
// refused here too, before a header (corrupt or not) makes the decoder allocate and fill tens of gigabytes.
constexpr int64_t kMaxImageSide = int64_t{1} << 20;
constexpr int64_t kMaxImagePixels = int64_t{1} << 30;

// "" if the size is within the limits, else the problem.
std::string size_problem(int64_t width, int64_t height) {
  if (width <= kMaxImageSide && height <= kMaxImageSide && width * height <= kMaxImagePixels) return "";
  return cat("image of ", width, "x", height, " pixels is too large (at most 2^30 pixels, as OpenCV's imread)");
}

// `kind` says why the image needs the plugin, for the error where it is not available.
DecodedImage decode_with_plugin(const std::vector<uint8_t>& bytes, const std::string& path, const char* kind);

DecodedImage decode_jpeg(const std::vector<uint8_t>& bytes, const std::string& path, bool keep_truncated) {
  // One decompressor per thread: creating one costs more than decoding a small image's header.
  thread_local std::unique_ptr<void, int (*)(tjhandle)> handle(tjInitDecompress(), tjDestroy);
  if (!handle) fail(path, ": cannot initialise the JPEG decoder");
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  auto* data = const_cast<unsigned char*>(bytes.data());
  if (tjDecompressHeader3(handle.get(), data, bytes.size(), &width, &height, &subsampling, &colorspace) != 0)
    fail(path, ": corrupt or truncated JPEG (", tjGetErrorStr2(handle.get()), ")");
  // A file cut before its frame header parses as "tables only": no size, nothing to decode.
  if (width <= 0 || height <= 0) fail(path, ": corrupt or truncated JPEG (no frame header)");
  if (const std::string problem = size_problem(width, height); !problem.empty()) fail(path, ": ", problem);
  // libjpeg-turbo cannot convert CMYK/YCCK to BGR; OpenCV (cv2.imread) converts them itself. The file is
  // decoded here to CMYK first, only to refuse a truncated one as below (OpenCV would fill the rest with grey).
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) {
    if (const std::string problem = video_support_problem(); !problem.empty())
      fail(path, ": a CMYK JPEG, which kestrel decodes with its OpenCV plugin only (JPEG and PNG without it); ", problem);
    // At 1/8 scale: the entropy decoder still reads all the data (a cut file still runs out), the pixels cost
    // 1/64 of a full decode.
    const tjscalingfactor eighth{1, 8};
    const int w = TJSCALED(width, eighth), h = TJSCALED(height, eighth);
    std::string warning;
    {
      std::vector<unsigned char> cmyk(static_cast<size_t>(w) * static_cast<size_t>(h) * 4);
      if (tjDecompress2(handle.get(), data, bytes.size(), cmyk.data(), w, w * 4, h, TJPF_CMYK, 0) != 0) {
        const std::string message = tjGetErrorStr2(handle.get());
        if (tjGetErrorCode(handle.get()) != TJERR_WARNING) fail(path, ": corrupt JPEG (", message, ")");
        const bool truncated = message.find("Premature end") != std::string::npos;
        if (truncated && !keep_truncated) fail(path, ": truncated JPEG (", message, ")");
        warning = truncated ? cat("truncated JPEG, the missing part grey (", message, ")") : message;
      }
    }
    DecodedImage out = decode_with_plugin(bytes, path, "a CMYK JPEG");
    if (out.warning.empty()) out.warning = warning;
    return out;
  }
  DecodedImage out;
  out.image.create(height, width, CV_8UC3);
  if (tjDecompress2(handle.get(), data, bytes.size(), out.image.data, width, static_cast<int>(out.image.step), height, TJPF_BGR,
                    TJFLAG_ACCURATEDCT) != 0) {
    const std::string message = tjGetErrorStr2(handle.get());
    if (tjGetErrorCode(handle.get()) != TJERR_WARNING) fail(path, ": corrupt JPEG (", message, ")");
    // Premature end = truncated file: the missing part is decoded as grey. Skipped rather than trained on.
    const bool truncated = message.find("Premature end") != std::string::npos;
    if (truncated && !keep_truncated) fail(path, ": truncated JPEG (", message, ")");
    out.warning = truncated ? cat("truncated JPEG, the missing part grey (", message, ")") : message;
  }
  out.image = apply_orientation(out.image, jpeg_exif_orientation(bytes.data(), bytes.size()));
  return out;
}

// libpng reports errors by longjmp: the reader keeps its state in plain C structures and no C++ object is
// created between the setjmp and libpng's calls, so a longjmp skips no destructor.
struct PngSource {
  const uint8_t* data;
  size_t size;
  size_t at;
  char error[256];
  char warning[256];
};

void png_read_from_memory(png_structp png, png_bytep out, png_size_t n) {
  auto* source = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > source->size - source->at) png_error(png, "the file ends early");
  std::memcpy(out, source->data + source->at, n);
  source->at += n;
}
void png_on_error(png_structp png, png_const_charp message) {
  auto* source = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(source->error, sizeof source->error, "%s", message);
  png_longjmp(png, 1);
}
void png_on_warning(png_structp png, png_const_charp message) {
  auto* source = static_cast<PngSource*>(png_get_error_ptr(png));
  if (!source->warning[0]) std::snprintf(source->warning, sizeof source->warning, "%s", message);
}

// Decodes as OpenCV's PNG decoder does for cv2.imread(path) (8-bit, 3 channels): 16-bit samples keep their
// high byte, alpha and tRNS transparency are dropped (the stored colours stay), palettes and grey expand to
// BGR, and no gamma correction whatever the file's gAMA/sRGB/iCCP chunks say. Returns false with
// source.error set on a corrupt file; `too_large` is set (and false returned) before allocating an image
// over imread's limits.
// `rows` and `out` belong to the caller: a longjmp out of libpng must not skip a destructor here.
bool read_png(PngSource& source, png_structp png, png_infop info, cv::Mat& out, std::vector<png_bytep>& rows,
              std::string& too_large) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, &source, png_read_from_memory);
  png_read_info(png, info);
  const png_uint_32 width = png_get_image_width(png, info), height = png_get_image_height(png, info);
  const int color_type = png_get_color_type(png, info), bit_depth = png_get_bit_depth(png, info);
  too_large = size_problem(width, height);
  if (!too_large.empty()) return false;
  if (bit_depth == 16) png_set_strip_16(png);
  png_set_strip_alpha(png);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if ((color_type & PNG_COLOR_MASK_COLOR) == 0 && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (color_type & PNG_COLOR_MASK_COLOR) png_set_bgr(png);
  else png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<size_t>(width) * 3) png_error(png, "unexpected row layout after conversion");
  out.create(static_cast<int>(height), static_cast<int>(width), CV_8UC3);
  rows.resize(height);
  for (png_uint_32 y = 0; y < height; ++y) rows[y] = out.ptr<png_byte>(static_cast<int>(y));
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  return true;
}

DecodedImage decode_png(const std::vector<uint8_t>& bytes, const std::string& path) {
  PngSource source{bytes.data(), bytes.size(), 8, {0}, {0}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &source, png_on_error, png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!info) {
    png_destroy_read_struct(png ? &png : nullptr, nullptr, nullptr);
    fail(path, ": cannot initialise the PNG decoder");
  }
  png_set_sig_bytes(png, 8);  // decode_image checked the signature
  // Destroyed on every way out, a C++ exception from read_png's allocations included (no setjmp in this frame).
  struct PngStructs {
    png_structp png;
    png_infop info;
    ~PngStructs() { png_destroy_read_struct(&png, &info, nullptr); }
  } structs{png, info};
  DecodedImage out;
  std::string too_large;
  std::vector<png_bytep> rows;
  const bool ok = read_png(source, png, info, out.image, rows, too_large);
  if (!too_large.empty()) fail(path, ": ", too_large);
  if (!ok) fail(path, ": corrupt or truncated PNG (", source.error, ")");
  out.warning = source.warning;
  // cv2.imread applies a PNG's eXIf orientation too (and upstream's exif_size reads it through PIL).
  out.image = apply_orientation(out.image, png_exif_orientation(bytes.data(), bytes.size()));
  return out;
}

// Every other format (BMP, TIFF, WebP, PFM ...) as upstream reads them all: cv::imdecode with IMREAD_COLOR, in
// the OpenCV plugin (video_io.h), which also applies the EXIF orientation OpenCV reads (TIFF, not WebP).
// imdecode refuses sizes over imread's limits before allocating; the same limit is checked again here, as
// OpenCV's can be raised through the environment (OPENCV_IO_MAX_IMAGE_PIXELS).
DecodedImage decode_with_plugin(const std::vector<uint8_t>& bytes, const std::string& path, const char* kind) {
  if (const std::string problem = video_support_problem(); !problem.empty())
    fail(path, ": ", kind, ", which kestrel decodes with its OpenCV plugin only (JPEG and PNG without it); ", problem);
  DecodedImage out;
  std::string error;
  if (!decode_image_with_plugin(bytes.data(), bytes.size(), path, out.image, error))
    fail(path, ": corrupt or unsupported image (", error.empty() ? "OpenCV could not decode it" : error, ")");
  if (const std::string problem = size_problem(out.image.cols, out.image.rows); !problem.empty()) fail(path, ": ", problem);
  if (out.image.type() != CV_8UC3) fail(path, ": OpenCV did not decode it to 8-bit BGR (type ", out.image.type(), ")");
  return out;
}

}  // namespace

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  require_regular_file(path);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(path, ": cannot be read");
  const std::streamsize size = in.tellg();
  std::vector<uint8_t> bytes(static_cast<size_t>(std::max<std::streamsize>(size, 0)));
  in.seekg(0);
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size)) fail(path, ": read failed");
  return bytes;
}

int png_exif_orientation(const uint8_t* data, size_t size) {
  // Chunks after the 8-byte signature: u32 big-endian length, 4-byte type, data, u32 CRC.
  size_t at = 8;
  while (at + 12 <= size) {
    const size_t length = read_u32(data + at, /*little=*/false);
    if (length > size - at - 12) break;  // runs past the file
    const uint8_t* type = data + at + 4;
    const uint8_t* payload = data + at + 8;
    if (std::memcmp(type, "eXIf", 4) == 0) {
      // The TIFF structure itself; some writers keep JPEG's "Exif\0\0" prefix.
      if (length >= 6 && std::memcmp(payload, "Exif\0\0", 6) == 0) return tiff_orientation(payload + 6, length - 6);
      return tiff_orientation(payload, length);
    }
    if (std::memcmp(type, "IEND", 4) == 0) break;
    at += 12 + length;
  }
  return 1;
}

int jpeg_exif_orientation(const uint8_t* data, size_t size) {
  size_t at = 2;  // after SOI
  while (at + 4 <= size && data[at] == 0xFF) {
    const uint8_t marker = data[at + 1];
    if (marker == 0xDA || marker == 0xD9) break;  // start of scan / end of image: no more headers
    const size_t length = static_cast<size_t>(data[at + 2]) << 8 | data[at + 3];
    if (length < 2 || at + 2 + length > size) break;
    if (marker == 0xE1 && length >= 8 && std::memcmp(data + at + 4, "Exif\0\0", 6) == 0)
      return tiff_orientation(data + at + 10, length - 8);
    at += 2 + length;
  }
  return 1;
}

DecodedImage decode_image(const std::vector<uint8_t>& bytes, const std::string& path, bool keep_truncated) {
  if (bytes.empty()) fail(path, ": empty file");
  if (is_jpeg(bytes)) return decode_jpeg(bytes, path, keep_truncated);
  if (is_png(bytes)) return decode_png(bytes, path);
  return decode_with_plugin(bytes, path, "not a JPEG or PNG");
}

DecodedImage decode_image_file(const std::string& path, bool keep_truncated) {
  return decode_image(read_file_bytes(path), path, keep_truncated);
}

std::string format_upstream_datasets_refuse(const std::vector<uint8_t>& b) {
  const auto starts = [&](const char* magic, size_t n) { return b.size() >= n && std::memcmp(b.data(), magic, n) == 0; };
  // Netpbm P1..P7 and PFM (PF, Pf): PIL names what it reads of them "PPM"; the rest it cannot identify.
  if (b.size() >= 3 && b[0] == 'P' && ((b[1] >= '1' && b[1] <= '7') || b[1] == 'F' || b[1] == 'f') && std::isspace(b[2]))
    return "PPM";
  if (starts("GIF87a", 6) || starts("GIF89a", 6)) return "GIF";
  if (starts("#?RADIANCE", 10) || starts("#?RGBE", 6)) return "HDR";
  if (starts("\0\0\0\x0CjP  \r\n\x87\n", 12) || starts("\xFF\x4F\xFF\x51", 4)) return "JPEG 2000";
  if (starts("\x76\x2F\x31\x01", 4)) return "OpenEXR";
  if (starts("\x59\xA6\x6A\x95", 4)) return "Sun raster";
  return "";
}

bool decoded_by_plugin(const std::vector<uint8_t>& bytes) {
  if (is_png(bytes)) return false;
  if (!is_jpeg(bytes)) return !bytes.empty();
  thread_local std::unique_ptr<void, int (*)(tjhandle)> handle(tjInitDecompress(), tjDestroy);
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (!handle || tjDecompressHeader3(handle.get(), const_cast<unsigned char*>(bytes.data()), bytes.size(), &width, &height,
                                     &subsampling, &colorspace) != 0)
    return false;  // a corrupt JPEG fails in libjpeg-turbo, with or without the plugin
  return colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
}

void write_jpeg(const std::string& path, const cv::Mat& bgr, int quality, bool full_chroma) {
  if (bgr.type() != CV_8UC3 || bgr.empty()) fail(path, ": write_jpeg needs a non-empty 8-bit BGR image");
  cv::Mat img = bgr.isContinuous() ? bgr : bgr.clone();
  std::unique_ptr<void, int (*)(tjhandle)> handle(tjInitCompress(), tjDestroy);
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  // The accurate DCT, as libjpeg's default that cv2.imwrite and PIL use (TurboJPEG's own default is the fast one:
  // pixels up to 13 levels apart at quality 95).
  if (tjCompress2(handle.get(), img.data, img.cols, static_cast<int>(img.step), img.rows, TJPF_BGR, &jpeg, &size, full_chroma ? TJSAMP_444 : TJSAMP_420,
                  quality, TJFLAG_ACCURATEDCT) != 0)
    fail(path, ": JPEG encoding failed (", tjGetErrorStr2(handle.get()), ")");
  std::unique_ptr<unsigned char, void (*)(unsigned char*)> owned(jpeg, tjFree);
  write_file_atomic(path, {{reinterpret_cast<const char*>(jpeg), size}}, Durability::kRename);
}

void write_png(const std::string& path, const cv::Mat& bgr) {
  if (bgr.type() != CV_8UC3 || bgr.empty()) fail(path, ": write_png needs a non-empty 8-bit BGR image");
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(bgr.cols);
  png.height = static_cast<png_uint_32>(bgr.rows);
  png.format = PNG_FORMAT_BGR;
  // Two passes of libpng's simplified API: the first (null buffer) sizes the encoded image.
  png_alloc_size_t size = 0;
  const auto stride = static_cast<png_int_32>(bgr.step / bgr.elemSize1());
  if (!png_image_write_to_memory(&png, nullptr, &size, 0, bgr.data, stride, nullptr))
    fail(path, ": PNG encoding failed (", png.message, ")");
  std::vector<uint8_t> encoded(size);
  if (!png_image_write_to_memory(&png, encoded.data(), &size, 0, bgr.data, stride, nullptr))
    fail(path, ": PNG encoding failed (", png.message, ")");
  write_file_atomic(path, {{reinterpret_cast<const char*>(encoded.data()), size}}, Durability::kRename);
}

}  // namespace kestrel::data
