// Decoding images: JPEG through libjpeg-turbo (the fastest JPEG codec), PNG through libpng, with the
// EXIF orientation of JPEGs and PNGs (eXIf chunk) applied (as OpenCV's imread does for upstream); every
// other format upstream reads (BMP, TIFF, WebP, PFM ...) through OpenCV's imgcodecs in the run-time
// plugin (video_io.h), as cv2.imread. Output is 8-bit BGR.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

namespace kestrel::data {

std::vector<uint8_t> read_file_bytes(const std::string& path);

struct DecodedImage {
  cv::Mat image;        // H x W x 3 CV_8UC3 BGR, orientation applied
  std::string warning;  // non-fatal decoder complaint (e.g. extraneous bytes), empty if none
};

// Throws kestrel::Error naming `path` for unreadable, corrupt, truncated or unsupported images, and for
// formats other than JPEG and PNG when the OpenCV plugin is not available.
// keep_truncated: a JPEG that ends early is decoded as cv2.imread does, the missing part grey, with a
// warning (detect, as detect.py); datasets skip such a file rather than train on the grey.
DecodedImage decode_image(const std::vector<uint8_t>& bytes, const std::string& path, bool keep_truncated = false);
DecodedImage decode_image_file(const std::string& path, bool keep_truncated = false);

// Whether decode_image hands these bytes to the OpenCV plugin: neither JPEG nor PNG, or a CMYK/YCCK JPEG
// (libjpeg-turbo gives no BGR for those). What is decoded then depends on the plugin being available.
bool decoded_by_plugin(const std::vector<uint8_t>& bytes);

// The name of an image format these bytes are, by their content, that OpenCV decodes but upstream's dataset
// check refuses ("invalid image format PPM": PIL must identify it as one of IMG_FORMATS, whatever the file's
// name): netpbm and PFM ("PPM"), GIF, Radiance HDR, JPEG 2000, OpenEXR, Sun raster. Empty for anything else
// (JPEG, PNG, BMP, TIFF, WebP, and what no decoder knows, which decode_image then reports).
std::string format_upstream_datasets_refuse(const std::vector<uint8_t>& bytes);

// Encodes 8-bit BGR as JPEG (libjpeg-turbo) and writes it atomically; chroma at half resolution (4:2:0,
// as cv2.imwrite) unless full_chroma (4:4:4, as PIL's subsampling=0 for detect.py's crops).
void write_jpeg(const std::string& path, const cv::Mat& bgr, int quality = 90, bool full_chroma = false);

// Encodes 8-bit BGR as PNG (libpng, lossless: charts and plots) and writes it atomically.
void write_png(const std::string& path, const cv::Mat& bgr);

// EXIF orientation tag (1..8) of a JPEG, 1 when absent or unreadable.
int jpeg_exif_orientation(const uint8_t* data, size_t size);
// The same from a PNG's eXIf chunk (data starts with the PNG signature).
int png_exif_orientation(const uint8_t* data, size_t size);

}  // namespace kestrel::data
