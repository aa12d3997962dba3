// decode_image on arbitrary bytes (JPEG via turbojpeg, PNG via libpng, EXIF orientation), and the EXIF
// reader on its own. Only kestrel::Error naming the file may come out; a decoded image is 8-bit BGR. Other
// formats go to the OpenCV plugin, which the harness does not load (fuzz/build.sh): they end in its error.
//
// Inputs whose header claims more than 16 Mpixels (but within kestrel's limit of 2^30, OpenCV's) are not
// decoded: kestrel allocates up to 3 GB for those on purpose, which is over the fuzzer's memory limit.
// Sizes above the limit are still decoded, to check that they are refused.
#include <png.h>
#include <turbojpeg.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "kestrel/data/image_io.h"

using namespace kestrel;

namespace {

// The size a JPEG or PNG header claims, 0 x 0 if it cannot be read.
void claimed_size(const uint8_t* data, size_t size, int64_t& width, int64_t& height) {
  width = height = 0;
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) {
    static tjhandle handle = tjInitDecompress();
    int w = 0, h = 0, sub = 0, cs = 0;
    if (tjDecompressHeader3(handle, const_cast<uint8_t*>(data), size, &w, &h, &sub, &cs) == 0) width = w, height = h;
  } else {
    png_image png;
    std::memset(&png, 0, sizeof png);
    png.version = PNG_IMAGE_VERSION;
    if (png_image_begin_read_from_memory(&png, data, size)) {
      width = png.width, height = png.height;
      png_image_free(&png);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (const int orientation : {data::jpeg_exif_orientation(data, size), data::png_exif_orientation(data, size)})
    if (orientation < 1 || orientation > 8) fuzz::finding("EXIF orientation outside 1..8");
  int64_t width = 0, height = 0;
  claimed_size(data, size, width, height);
  const int64_t pixels = width * height;
  if (pixels > (int64_t{16} << 20) && width <= (1 << 20) && height <= (1 << 20) && pixels <= (int64_t{1} << 30))
    return 0;
  const std::vector<uint8_t> bytes(data, data + size);
  fuzz::expect_kestrel_errors_only("fuzz.img", [&] {
    const data::DecodedImage d = data::decode_image(bytes, "fuzz.img");
    if (d.image.empty() || d.image.type() != CV_8UC3) fuzz::finding("decoded image is not non-empty 8-bit BGR");
    if (d.image.total() > static_cast<size_t>(1) << 30) fuzz::finding("decoded image over 2^30 pixels");
  });
  return 0;
}
