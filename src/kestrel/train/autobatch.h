// YOLOv5's AutoBatch (train.py --batch-size -1): the training batch size that fills a fraction of a CUDA
// device's memory, from the memory of forward and backward passes measured at batch sizes 1, 2, 4, 8 and
// 16 and a straight line fitted through them. On the CPU it keeps the default batch size, as upstream.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace kestrel::models {
class YoloModel;
}

namespace kestrel::train {

// Upstream asserts it too: AutoBatch measures one device.
inline constexpr const char* kAutoBatchNotDataParallel =
    "AutoBatch with --batch-size -1 is not compatible with data-parallel training; pass the total --batch-size";

struct AutoBatchOptions {
  double fraction = 0.8;   // of the memory the process can have (upstream's default)
  int default_batch = 16;  // the CPU's batch size, and the fallback when the fit is unusable
  int max_batch = 1024;    // a fitted batch outside [1, max_batch] is not trusted (upstream's "CUDA anomaly")
  bool channels_last = false;
  std::optional<c10::ScalarType> autocast;  // the training's precision (kHalf, kBFloat16), none for fp32
};

// What the fit decided. `batch`: the batch size to train with; `note`: why it is the default or a
// measured size rather than the line's value ("" when the line's value is used).
struct BatchFit {
  int batch = 0;
  double bytes_per_image = 0, fixed_bytes = 0;  // the fitted line: memory = fixed + batch x per image
  std::string note;
};

// The decision alone, as upstream's autobatch: least squares through the sizes that ran (memory[i] is the
// peak bytes at batch_sizes[i], nullopt where that size failed), batch = trunc((budget - fixed) / per
// image); at or above the first size that failed, the size before it. Where the line is unusable (below 1
// or above max_batch, fewer than two sizes measured, memory not growing with the batch): the default, or,
// when a size failed, the largest that ran if smaller (upstream keeps the default 16 there). The first
// size failing is an error.
BatchFit fit_batch_size(const std::vector<int>& batch_sizes, const std::vector<std::optional<double>>& memory,
                        double budget_bytes, const AutoBatchOptions& options);

// Measures `model` (in training mode, on `device`) at batch sizes 1 to 16 of `img_size` square images and
// returns the fit for `options.fraction` of the device's memory (on the CPU: the default batch); prints
// upstream's "AutoBatch:" lines. The model's weights and batch-norm statistics are as before, the cuDNN
// autotuning setting too; its gradients are cleared.
BatchFit autobatch(models::YoloModel& model, const c10::Device& device, int img_size, const AutoBatchOptions& options = {});

}  // namespace kestrel::train
