// Precompiled header of the engine, the app and the tests: the torch headers every layer uses.
// Keep it to what most translation units need; it is compiled once per target family.
#pragma once
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/pooling.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <memory>
#include <string>
#include <vector>
