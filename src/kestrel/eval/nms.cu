// Launches the kernels of nms_kernels.cuh for nms_indices (see nms.h): the host side of greedy_keep_cuda.
#include "kestrel/eval/nms.h"

#include <cstdint>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kestrel/core/error.h"
#include "kestrel/eval/nms_kernels.cuh"

namespace kestrel::eval::detail {

at::Tensor greedy_keep_cuda(const at::Tensor& sorted_boxes, float threshold) {
  if (sorted_boxes.scalar_type() != at::kFloat || !sorted_boxes.is_contiguous() || sorted_boxes.dim() != 2 ||
      sorted_boxes.size(1) != 4)
    fail("nms: the CUDA kernel takes contiguous float32 boxes [N, 4], got ", sorted_boxes.scalar_type(), " ",
         sorted_boxes.sizes());
  const c10::cuda::CUDAGuard guard(sorted_boxes.device());
  const int64_t n = sorted_boxes.size(0);
  const int64_t words = (n + kBlockBoxes - 1) / kBlockBoxes;
  if (words > kMaxWords)
    fail("nms: ", n, " boxes is more than the CUDA kernel takes (", kMaxWords * kBlockBoxes,
         "); lower max_nms or the number of candidates");
  at::Tensor keep = at::empty({n}, sorted_boxes.options().dtype(at::kBool));
  if (n == 0) return keep;
  // int64 storage for uint64 words: ATen has no unsigned 64-bit tensors worth relying on here.
  at::Tensor mask = at::empty({n, words}, sorted_boxes.options().dtype(at::kLong));
  auto* mask_words = reinterpret_cast<uint64_t*>(mask.data_ptr<int64_t>());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const dim3 grid(static_cast<unsigned>(words), static_cast<unsigned>(words));
  overlap_mask_kernel<<<grid, kBlockBoxes, 0, stream>>>(sorted_boxes.data_ptr<float>(), n, words, threshold,
                                                        mask_words);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const size_t shared_bytes = static_cast<size_t>(words) * sizeof(uint64_t);
  greedy_scan_kernel<<<1, kScanThreads, shared_bytes, stream>>>(mask_words, n, words, keep.data_ptr<bool>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return keep;
}

}  // namespace kestrel::eval::detail
