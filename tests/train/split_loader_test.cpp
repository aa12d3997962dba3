// The validation loader's two batch layouts: val.py's rectangular batches (pad 0.5 strides) and the square,
// unpadded letterboxes of its --task speed. Expected shapes by hand for the demo val split (16 images, all
// wider than tall or square, at 64 px with stride 32).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kestrel/data/dataset_config.h"
#include "kestrel/train/split_loader.h"

namespace kestrel::train {
namespace {

std::vector<int64_t> first_batch_shape(bool rect) {
  ValLoaderOptions o;
  o.img_size = 64;
  o.batch_size = 16;
  o.workers = 1;
  o.rect = rect;
  o.pad = rect ? 0.5 : 0.0;
  const SplitLoader split = make_val_loader(data::load_dataset_config("data/demo/demo.yaml"), "val", o);
  split.loader->start_epoch(0);
  auto batch = split.loader->next();
  EXPECT_TRUE(batch.has_value());
  EXPECT_FALSE(split.loader->next().has_value()) << "16 images are one batch of 16";
  return batch ? batch->images.sizes().vec() : std::vector<int64_t>{};
}

TEST(ValLoader, RectangularBatchesPadHalfAStride) {
  const std::vector<int64_t> shape = first_batch_shape(true);
  ASSERT_EQ(shape.size(), 4u);
  EXPECT_EQ(shape[0], 16);
  // the long side: ceil(64 / 32 + 0.5) x 32 = 96; the short side a multiple of 32, at most 96
  EXPECT_EQ(std::max(shape[2], shape[3]), 96);
  EXPECT_EQ(std::min(shape[2], shape[3]) % 32, 0);
}

TEST(ValLoader, SpeedTaskLetterboxesSquareWithoutPadding) {
  const std::vector<int64_t> shape = first_batch_shape(false);
  EXPECT_EQ(shape, (std::vector<int64_t>{16, 3, 64, 64}));
}

}  // namespace
}  // namespace kestrel::train
