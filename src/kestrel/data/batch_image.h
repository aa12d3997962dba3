// A training batch drawn as one image, like upstream's train_batch0.jpg: a grid of the batch's
// images with their boxes and class names.
#pragma once
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "kestrel/data/loader.h"

namespace kestrel::data {

// At most max_images images in a near-square grid, each scaled so the grid's long side is <= 1920.
cv::Mat render_batch(const Batch& batch, const std::vector<std::string>& names, int max_images = 16);

}  // namespace kestrel::data
