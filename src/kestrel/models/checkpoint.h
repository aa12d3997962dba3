// Activation checkpointing (the guides' "checkpointing", torch.utils.checkpoint): a layer's forward
// runs without recording its intermediate activations; backward runs the layer again from its saved
// input, with gradients, and back-propagates through that recomputation. Trades one extra forward of
// the chosen layers for their activation memory (the high-resolution backbone layers hold most of it).
#pragma once
#include <ATen/core/Tensor.h>

#include "kestrel/models/layer.h"

namespace kestrel::models {

// y = layer(x), differentiable w.r.t. x and the layer's parameters, keeping only x. The autocast state
// of the call is restored for the recomputation (backward may run on another thread).
at::Tensor checkpointed(Layer& layer, const at::Tensor& x);

// True on this thread while a checkpointed layer is being recomputed: BatchNorm then normalises with
// the batch statistics as in the first pass but leaves its running statistics alone, so that a batch
// counts once.
bool recomputing();

}  // namespace kestrel::models
