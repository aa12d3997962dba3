// The CUDA kernels of nms_indices (see nms.h), in a header of their own so that the CPU tests can run this
// very source under tests/core/cuda_emulator.h (nms.cu launches them on a GPU). Boxes arrive sorted by
// descending score, so box i can only suppress boxes j > i. Two steps, both on the device:
//  1. overlap_mask_kernel: one 64-thread block per (row block, column block) of 64 boxes, upper triangle
//     only; thread r sets bit c of mask[row, column block] when IoU(row, column c) > threshold.
//     mask is [N, W] uint64 with W = ceil(N / 64): 112 MB for upstream's max_nms of 30000.
//  2. greedy_scan_kernel: one thread block walks the row blocks in order, keeping a `removed` bitmap of
//     W words in shared memory: the greedy decisions inside a block of 64 are sequential (one thread,
//     64 bit tests), then all threads OR the kept rows' masks into the later words in parallel.
// Only the kept flags [N] leave the kernels; the mask is never copied to the host.
// Nothing here may include CUDA or ATen-CUDA headers: the emulation compiles it with the host compiler.
#pragma once
#include <cstdint>

#include "kestrel/eval/nms.h"

#ifdef __CUDACC__
#define KESTREL_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif

namespace kestrel::eval::detail {
namespace {

constexpr int kBlockBoxes = 64;     // boxes per mask word
constexpr int kScanThreads = 256;   // threads of the single scan block
// The removed bitmap plus the kernel's static shared memory (520 bytes) must fit the 48 KiB a launch gets
// without opting in: 6000 words, 384000 boxes.
constexpr int64_t kMaxWords = 6000;

// mask [n, words]: bit c of mask[row][col_block] = IoU(row, col_block * 64 + c) > threshold, set only for
// columns after the row; words of blocks left of the diagonal are not written (the scan never reads them).
__global__ void overlap_mask_kernel(const float* __restrict__ boxes, int64_t n, int64_t words, float threshold,
                                    uint64_t* __restrict__ mask) {
  const int64_t row_block = blockIdx.y, col_block = blockIdx.x;
  if (row_block > col_block) return;  // the whole block leaves: no __syncthreads is skipped by half of it
  const int64_t col0 = col_block * kBlockBoxes;
  const int cols = static_cast<int>(min(n - col0, static_cast<int64_t>(kBlockBoxes)));
  __shared__ float tile[kBlockBoxes * 4];  // the column block's boxes [64, 4]
  if (threadIdx.x < cols)
    for (int k = 0; k < 4; ++k) tile[threadIdx.x * 4 + k] = boxes[(col0 + threadIdx.x) * 4 + k];
  __syncthreads();
  const int64_t row = row_block * kBlockBoxes + threadIdx.x;
  if (row >= n) return;
  float box[4];
  for (int k = 0; k < 4; ++k) box[k] = boxes[row * 4 + k];
  uint64_t bits = 0;
  const int first = row_block == col_block ? static_cast<int>(threadIdx.x) + 1 : 0;
  for (int c = first; c < cols; ++c)
    if (iou_above(box, tile + c * 4, threshold)) bits |= uint64_t{1} << c;
  mask[row * words + col_block] = bits;
}

// keep [n]: the greedy decisions. removed[w] (shared) collects the rows of block w suppressed by kept
// rows of earlier blocks; it is complete when the walk reaches block w.
// Needs at least kBlockBoxes threads (one per row of a block); any more, up to 1024, share the OR loop.
__global__ void greedy_scan_kernel(const uint64_t* __restrict__ mask, int64_t n, int64_t words, bool* __restrict__ keep) {
  KESTREL_DYNAMIC_SHARED(uint64_t, removed);  // [words]
  __shared__ uint64_t diagonal[kBlockBoxes];  // this block's rows against their own block
  __shared__ uint64_t kept_bits;
  for (int64_t w = threadIdx.x; w < words; w += blockDim.x) removed[w] = 0;
  for (int64_t b = 0; b < words; ++b) {
    const int64_t row0 = b * kBlockBoxes;
    const int rows = static_cast<int>(min(n - row0, static_cast<int64_t>(kBlockBoxes)));
    if (threadIdx.x < rows) diagonal[threadIdx.x] = mask[(row0 + threadIdx.x) * words + b];
    __syncthreads();  // also publishes removed[b] from the previous iteration
    if (threadIdx.x == 0) {
      uint64_t gone = removed[b], kept = 0;
      for (int r = 0; r < rows; ++r) {
        if ((gone >> r) & 1) continue;
        kept |= uint64_t{1} << r;
        gone |= diagonal[r];  // only bits above r are set: later rows of this block
      }
      kept_bits = kept;
    }
    __syncthreads();
    const uint64_t kept = kept_bits;
    if (threadIdx.x < rows) keep[row0 + threadIdx.x] = (kept >> threadIdx.x) & 1;
    // Consecutive threads read consecutive words of a mask row: coalesced.
    for (int64_t w = b + 1 + threadIdx.x; w < words; w += blockDim.x) {
      uint64_t acc = removed[w];
      for (uint64_t k = kept; k != 0; k &= k - 1) acc |= mask[(row0 + __ffsll(static_cast<long long>(k)) - 1) * words + w];
      removed[w] = acc;
    }
    __syncthreads();  // kept_bits and diagonal are rewritten in the next iteration
  }
}

}  // namespace
}  // namespace kestrel::eval::detail
