// Upstream's --image-weights: each epoch samples the training images with replacement, with weights
// that favour images holding rare or poorly detected classes. class weight = inverse label frequency
// (normalised) x (1 - that class's mAP50-95 from the last validation)^2; image weight = sum of its
// labels' class weights (an image without labels is never drawn, as upstream).
#pragma once
#include <vector>

#include "kestrel/data/dataset_index.h"
#include "kestrel/eval/ap_metrics.h"

namespace kestrel::train {

// [nc]: 1 / (labels of class c), a class without labels counting as one, normalised to sum 1
// (upstream labels_to_class_weights).
std::vector<double> class_frequency_weights(const std::vector<data::ImageRecord>& records, int nc);

// [images]: per image, the sum over its labels of class_frequency_weights x (1 - maps)^2, with maps
// [nc] the per-class mAP50-95 (zeros before the first validation).
std::vector<double> image_sampling_weights(const std::vector<data::ImageRecord>& records, int nc,
                                           const std::vector<double>& maps);

// [nc]: upstream's maps from a validation: each class's mAP50-95, and the overall mAP50-95 for the
// classes without labels in the validation split.
std::vector<double> class_maps(const eval::ApPerClass& metrics, int nc);

}  // namespace kestrel::train
