// Upstream's --quad collate (collate_fn4): every group of four training images becomes one image of
// twice the size, either the first image upsampled 2x (bilinear, its labels unchanged) or the four
// stitched 2 x 2 (i top-left, i+1 below it, i+2 right of i, i+3 bottom-right; labels moved into their
// quadrant and halved). A batch of B images gives B / 4 (the remainder is dropped, as upstream); the
// loss is then multiplied by 4.
#pragma once
#include <vector>

#include "kestrel/data/loader.h"

namespace kestrel::data {

// `batch`: images [B, 3, H, W] uint8, targets [B, M, 5] (class, cx, cy, w, h normalised), mask [B, M]
// with real rows first. stitch[g] chooses the 2 x 2 stitch for group g (else the upsample); size B / 4.
// Result: images [B/4, 3, 2H, 2W], targets [B/4, 4M, 5] with real rows first; pinned like the input.
Batch quad_collate(const Batch& batch, const std::vector<bool>& stitch);

}  // namespace kestrel::data
