// SyncBatchNorm (upstream's --sync-bn): in training mode every BatchNorm2d normalises with the mean
// and variance of the global batch, over all ranks, instead of its own shard. With it, W ranks x
// batch b compute the same forward and backward as one process with batch W x b.
//
// How: each rank computes its per-channel mean and (biased) variance, these are all-gathered by one
// all-reduce per layer ([W, 2C + 1] floats, this rank's row filled, the others zero), and combined
// with the counts (the parallel-variance formula: no E[x^2] - E[x]^2 cancellation). The backward is
// torch.nn.SyncBatchNorm's: per channel Σ dy and Σ dy·x̂ of each rank, all-reduced, give the exact input
// gradient of the global batch statistics; x is kept in its own dtype. No host sync: counts stay on the device.
#pragma once
#include <memory>

#include <ATen/core/Tensor.h>

#include "kestrel/dist/process_group.h"
#include "kestrel/models/batch_norm.h"

namespace torch::nn {
class Module;
}

namespace kestrel::dist {

// Sets a sync over ctx's group on every kestrel BatchNorm2d in `module` (no-op when ctx is disabled);
// returns the number of layers converted.
int convert_sync_batch_norm(torch::nn::Module& module, const DistContext& ctx);

std::shared_ptr<const models::BatchNormSync> make_batch_norm_sync(const DistContext& ctx);


}  // namespace kestrel::dist
