// The loader of one dataset split as `kestrel train` builds it (training augmentations and shuffling,
// or validation's rectangular batches), shared by the trainer and `kestrel bench e2e` so that the
// benchmark measures exactly the training pipeline.
#pragma once
#include <memory>
#include <string>

#include "kestrel/data/dataset.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/data/loader.h"
#include "kestrel/train/hyperparameters.h"
#include "kestrel/train/trainer.h"

namespace kestrel::train {

struct SplitLoader {
  std::shared_ptr<const data::YoloDataset> dataset;
  std::unique_ptr<data::DataLoader> loader;
};

// Indexes and verifies `split` of `cfg` (skipped files are reported on stdout), then builds its
// dataset and loader from the training options: --img, --batch-size (divided over `world_size` ranks
// in training; doubled for validation, as upstream), --rect, --cache, --workers, --single-cls, --seed.
// Class ids must be < nc_for_check.
SplitLoader make_split_loader(const data::DatasetConfig& cfg, const std::string& split, const TrainOptions& o,
                              bool training, const Hyperparameters& hyp, int stride, int nc_for_check, int rank = 0,
                              int world_size = 1);

}  // namespace kestrel::train
