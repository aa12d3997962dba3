#include "kestrel/data/quad.h"

#include <ATen/ATen.h>

#include "kestrel/core/error.h"

namespace kestrel::data {

Batch quad_collate(const Batch& batch, const std::vector<bool>& stitch) {
  const int64_t b = batch.images.size(0), h = batch.images.size(2), w = batch.images.size(3);
  const int64_t groups = b / 4, m = batch.targets.size(1);
  if (groups < 1) fail("--quad: a batch needs at least 4 images (got ", b, "); use a batch size that is a multiple of 4");
  if (static_cast<int64_t>(stitch.size()) != groups) fail("quad_collate: ", stitch.size(), " choices for ", groups, " groups");
  const bool pinned = batch.images.is_pinned();
  Batch out;
  out.images = at::empty({groups, 3, 2 * h, 2 * w}, batch.images.options().pinned_memory(pinned));
  out.targets = at::zeros({groups, 4 * m, 5}, batch.targets.options().pinned_memory(pinned));
  out.target_mask = at::zeros({groups, 4 * m}, batch.target_mask.options().pinned_memory(pinned));
  out.meta = batch.meta;
  out.index = batch.index;
  out.dropped_boxes = batch.dropped_boxes;
  const auto mask = batch.target_mask.accessor<bool, 2>();
  auto out_mask = out.target_mask.accessor<bool, 2>();
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t i = 4 * g;
    int64_t rows = 0;
    // Copies image k's real rows to the group's next rows, moved by (dx, dy) and scaled by s.
    auto place = [&](int64_t k, float dx, float dy, float s) {
      for (int64_t r = 0; r < m; ++r) {
        if (!mask[k][r]) continue;
        const at::Tensor src = batch.targets[k][r];
        at::Tensor dst = out.targets[g][rows];
        dst[0] = src[0];
        dst[1] = (src[1] + dx) * s;
        dst[2] = (src[2] + dy) * s;
        dst[3] = src[3] * s;
        dst[4] = src[4] * s;
        out_mask[g][rows++] = true;
      }
    };
    if (stitch[static_cast<size_t>(g)]) {
      // [3, 2H, 2W]: columns (i over i+1) and (i+2 over i+3).
      const at::Tensor left = at::cat({batch.images[i], batch.images[i + 1]}, 1);
      const at::Tensor right = at::cat({batch.images[i + 2], batch.images[i + 3]}, 1);
      out.images[g].copy_(at::cat({left, right}, 2));
      place(i, 0, 0, 0.5f);
      place(i + 1, 0, 1, 0.5f);
      place(i + 2, 1, 0, 0.5f);
      place(i + 3, 1, 1, 0.5f);
    } else {
      // Upstream interpolates in float and casts back with .type(uint8): truncation, not rounding.
      const at::Tensor up = at::upsample_bilinear2d(batch.images[i].unsqueeze(0).to(at::kFloat), {2 * h, 2 * w}, false);
      out.images[g].copy_(up[0].to(at::kByte));
      place(i, 0, 0, 1.0f);
    }
    out.boxes += rows;
  }
  return out;
}

}  // namespace kestrel::data
