#include "kestrel/data/quad.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <ATen/ATen.h>

#include "kestrel/core/error.h"

namespace kestrel::data {

namespace {

// Upstream's 2x bilinear upsample of one [3, h, w] uint8 image (F.interpolate, align_corners=False, in float,
// cast back with .type(uint8)). Doubling puts every source position at a quarter pixel: output x reads
// x_src = (2x - 1) / 4 (clamped at 0), so the weights are 0, 1/4 or 3/4 and the float sums are exact; in
// sixteenths of a level the integer sum is the same number and truncation the same byte. Written out
// because the loader's worker threads run no ATen kernel (one would start an OpenMP team per worker).
void upsample2x(const uint8_t* in, uint8_t* out, int64_t h, int64_t w) {
  struct Tap {
    int64_t i0, i1;
    int w0, w1;  // quarters, w0 + w1 = 4
  };
  const auto taps = [](int64_t n) {
    std::vector<Tap> t(static_cast<size_t>(2 * n));
    for (int64_t d = 0; d < 2 * n; ++d) {
      const int64_t q = std::max<int64_t>(2 * d - 1, 0);  // source position in quarters
      const int64_t i0 = q / 4;
      const int frac = static_cast<int>(q % 4);
      t[static_cast<size_t>(d)] = {i0, std::min(i0 + 1, n - 1), 4 - frac, frac};
    }
    return t;
  };
  const std::vector<Tap> ty = taps(h), tx = taps(w);
  for (int64_t c = 0; c < 3; ++c) {
    const uint8_t* plane = in + c * h * w;
    uint8_t* dst = out + c * 4 * h * w;
    for (const Tap& y : ty) {
      const uint8_t *r0 = plane + y.i0 * w, *r1 = plane + y.i1 * w;
      for (const Tap& x : tx) {
        const int top = x.w0 * r0[x.i0] + x.w1 * r0[x.i1], bottom = x.w0 * r1[x.i0] + x.w1 * r1[x.i1];
        *dst++ = static_cast<uint8_t>((y.w0 * top + y.w1 * bottom) / 16);
      }
    }
  }
}

}  // namespace

Batch quad_collate(const Batch& batch, const std::vector<bool>& stitch) {
  const int64_t b = batch.images.size(0), h = batch.images.size(2), w = batch.images.size(3);
  const int64_t groups = b / 4, m = batch.targets.size(1);
  if (groups < 1) fail("--quad: a batch needs at least 4 images (got ", b, "); use a batch size that is a multiple of 4");
  if (static_cast<int64_t>(stitch.size()) != groups) fail("quad_collate: ", stitch.size(), " choices for ", groups, " groups");
  if (!batch.images.is_contiguous() || !batch.targets.is_contiguous() || !batch.target_mask.is_contiguous())
    fail("quad_collate: the batch's tensors must be contiguous");
  // Allocations only, filled through pointers (see upsample2x).
  const bool pinned = batch.images.is_pinned();
  Batch out;
  out.images = at::empty({groups, 3, 2 * h, 2 * w}, batch.images.options().pinned_memory(pinned));
  out.targets = at::empty({groups, 4 * m, 5}, batch.targets.options().pinned_memory(pinned));
  out.target_mask = at::empty({groups, 4 * m}, batch.target_mask.options().pinned_memory(pinned));
  std::memset(out.targets.data_ptr<float>(), 0, out.targets.nbytes());
  std::memset(out.target_mask.data_ptr<bool>(), 0, out.target_mask.nbytes());
  out.meta = batch.meta;
  out.index = batch.index;
  out.dropped_boxes = batch.dropped_boxes;
  const uint8_t* images = batch.images.data_ptr<uint8_t>();
  const float* targets = batch.targets.data_ptr<float>();
  const bool* mask = batch.target_mask.data_ptr<bool>();
  uint8_t* out_images = out.images.data_ptr<uint8_t>();
  float* out_targets = out.targets.data_ptr<float>();
  bool* out_mask = out.target_mask.data_ptr<bool>();
  const int64_t image_bytes = 3 * h * w;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t i = 4 * g;
    uint8_t* canvas = out_images + g * 4 * image_bytes;  // [3, 2H, 2W]
    int64_t rows = 0;
    // Copies image k's real rows to the group's next rows, moved by (dx, dy) and scaled by s.
    auto place = [&](int64_t k, float dx, float dy, float s) {
      for (int64_t r = 0; r < m; ++r) {
        if (!mask[k * m + r]) continue;
        const float* src = targets + (k * m + r) * 5;
        float* dst = out_targets + (g * 4 * m + rows) * 5;
        dst[0] = src[0];
        dst[1] = (src[1] + dx) * s;
        dst[2] = (src[2] + dy) * s;
        dst[3] = src[3] * s;
        dst[4] = src[4] * s;
        out_mask[g * 4 * m + rows++] = true;
      }
    };
    if (stitch[static_cast<size_t>(g)]) {
      // Columns (i over i+1) and (i+2 over i+3): image k's row y of plane c lands at canvas row
      // y + (k odd ? H : 0), column offset (k >= i+2 ? W : 0).
      for (int64_t k = 0; k < 4; ++k) {
        const uint8_t* src = images + (i + k) * image_bytes;
        const int64_t row0 = k % 2 ? h : 0, col0 = k >= 2 ? w : 0;
        for (int64_t c = 0; c < 3; ++c)
          for (int64_t y = 0; y < h; ++y)
            std::memcpy(canvas + (c * 2 * h + row0 + y) * 2 * w + col0, src + (c * h + y) * w, static_cast<size_t>(w));
      }
      place(i, 0, 0, 0.5f);
      place(i + 1, 0, 1, 0.5f);
      place(i + 2, 1, 0, 0.5f);
      place(i + 3, 1, 1, 0.5f);
    } else {
      upsample2x(images + i * image_bytes, canvas, h, w);
      place(i, 0, 0, 1.0f);
    }
    out.boxes += rows;
  }
  return out;
}

}  // namespace kestrel::data
