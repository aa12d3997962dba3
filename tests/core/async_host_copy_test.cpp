// AsyncHostCopy: a snapshot of a tensor's values, taken behind the work queued before start() and
// unaffected by work queued after it.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "kestrel/core/async_host_copy.h"

namespace kestrel {
namespace {

TEST(AsyncHostCopy, CpuCopyIsAFloatSnapshot) {
  AsyncHostCopy copy;
  EXPECT_FALSE(copy.started());
  EXPECT_THROW(copy.wait(), c10::Error);  // nothing to wait for

  at::Tensor src = at::arange(3, at::kInt);  // [0, 1, 2]
  copy.start(src);
  EXPECT_TRUE(copy.started());
  EXPECT_TRUE(copy.arrived());
  src.add_(10);  // after start: not in the copy
  const at::Tensor& got = copy.wait();
  EXPECT_EQ(got.scalar_type(), at::kFloat);
  EXPECT_TRUE(got.is_cpu());
  EXPECT_TRUE(at::equal(got, at::tensor({0.f, 1.f, 2.f})));

  // Restarted with another shape, the copy follows the new source.
  copy.start(at::full({2, 2}, 7.5, at::kDouble));
  EXPECT_TRUE(at::equal(copy.wait(), at::full({2, 2}, 7.5f)));
}

TEST(AsyncHostCopy, CudaCopyIsASnapshotBehindQueuedWork) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  // A large product queued first, so that the copy is still in flight when start() returns.
  const at::Tensor a = at::randn({4096, 4096}, cuda);
  at::Tensor src = at::zeros({3}, cuda);
  at::Tensor busy = at::matmul(a, a);
  src.add_(busy.sum().mul(0).add(1));  // src = 1 once the product is done (queued, no host read)
  AsyncHostCopy copy;
  copy.start(src);       // behind the product and the add
  src.fill_(5);          // after start: not in the copy
  const at::Tensor& got = copy.wait();
  EXPECT_TRUE(copy.arrived());
  EXPECT_TRUE(got.is_pinned());
  EXPECT_TRUE(at::equal(got, at::ones({3})));
  // The second vote's copy sees the value queued before it.
  copy.start(src);
  EXPECT_TRUE(at::equal(copy.wait(), at::full({3}, 5.f)));
}

}  // namespace
}  // namespace kestrel
