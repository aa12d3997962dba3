// --image-weights' class and image weights against hand-computed values.
#include <gtest/gtest.h>

#include "kestrel/core/error.h"
#include "kestrel/train/image_weights.h"

namespace kestrel::train {
namespace {

data::ImageRecord image(std::vector<int> classes) {
  data::ImageRecord r;
  r.image = "img.jpg";
  for (int c : classes) r.rows.push_back(data::LabelRow{{static_cast<float>(c), 0.5f, 0.5f, 0.1f, 0.1f}, {}});
  return r;
}

TEST(ImageWeights, HandComputedCase) {
  // labels: class 0 twice, class 1 once, class 2 never; an unlabelled image.
  const std::vector<data::ImageRecord> records{image({0, 0}), image({1}), image({})};
  // inverse counts 1/2, 1, 1 (no labels counts as one) -> normalised by 2.5: 0.2, 0.4, 0.4
  const auto cw = class_frequency_weights(records, 3);
  ASSERT_EQ(cw.size(), 3u);
  EXPECT_NEAR(cw[0], 0.2, 1e-12);
  EXPECT_NEAR(cw[1], 0.4, 1e-12);
  EXPECT_NEAR(cw[2], 0.4, 1e-12);
  // Before any validation (maps 0): image weights 2 x 0.2, 0.4, 0.
  auto iw = image_sampling_weights(records, 3, {});
  EXPECT_NEAR(iw[0], 0.4, 1e-12);
  EXPECT_NEAR(iw[1], 0.4, 1e-12);
  EXPECT_EQ(iw[2], 0.0);
  // Class 0 detected at mAP 0.5, class 1 at 0.9: (1 - 0.5)^2 = 0.25, (1 - 0.9)^2 = 0.01.
  iw = image_sampling_weights(records, 3, {0.5, 0.9, 0.0});
  EXPECT_NEAR(iw[0], 2 * 0.2 * 0.25, 1e-12);
  EXPECT_NEAR(iw[1], 0.4 * 0.01, 1e-12);
  EXPECT_THROW(image_sampling_weights(records, 3, {0.5}), Error);
  EXPECT_THROW(class_frequency_weights({image({5})}, 3), Error);
}

}  // namespace
}  // namespace kestrel::train
