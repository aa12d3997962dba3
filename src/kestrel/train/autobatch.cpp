#include "kestrel/train/autobatch.h"

#include <cmath>
#include <algorithm>
#include <cstdio>
#include <iostream>

#include <ATen/ATen.h>
#include <ATen/DeviceAccelerator.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd.h>

#include "kestrel/core/cuda_runtime_info.h"
#include "kestrel/core/error.h"
#include "kestrel/core/device.h"
#include "kestrel/models/yolo_model.h"

namespace kestrel::train {
namespace {

constexpr double kGiB = 1 << 30;  // upstream prints memory in GiB with a "G"
constexpr size_t kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

// Peak bytes allocated by one forward and backward pass of a batch of `batch` images; nullopt when the
// pass fails: out of memory, or a library that could not get its workspace (cuDNN's "unable to find an
// engine", cuBLAS's allocation failures raise plain errors), said once in `failure`. Upstream's profile()
// backpropagates the sum of the outputs, as here, and counts any exception as a failed size.
std::optional<double> pass_memory(models::YoloModel& model, const c10::Device& device, int batch, int img_size,
                                  const AutoBatchOptions& options, std::string& failure) {
  std::optional<double> peak;
  try {
    at::accelerator::resetPeakStats(device.index());
    at::Tensor images = at::zeros({batch, 3, img_size, img_size}, at::TensorOptions().device(device));
    if (options.channels_last) images = images.contiguous(at::MemoryFormat::ChannelsLast);
    at::Tensor total;
    {
      AutocastGuard autocast(device.type(), options.autocast.value_or(at::kHalf), options.autocast.has_value());
      for (const at::Tensor& level : model.forward(images)) total = total.defined() ? total + level.sum() : level.sum();
    }
    torch::autograd::backward({total.to(at::kFloat)});
    synchronize(device);
    peak = static_cast<double>(at::accelerator::getDeviceStats(device.index()).allocated_bytes[kAll].peak);
  } catch (const c10::Error& e) {
    peak.reset();
    if (failure.empty()) failure = "batch size " + std::to_string(batch) + " failed: " + e.what_without_backtrace();
  }
  for (auto& p : model.parameters()) p.mutable_grad() = at::Tensor();
  at::accelerator::emptyCache();
  return peak;
}

}  // namespace

BatchFit fit_batch_size(const std::vector<int>& batch_sizes, const std::vector<std::optional<double>>& memory,
                        double budget_bytes, const AutoBatchOptions& options) {
  BatchFit fit;
  // Without a usable line: the default, unless a size ran out of memory, then the largest size that ran
  // below it (upstream's default 16 would be known not to fit). Batch 1 not running is an error.
  size_t first_failed = batch_sizes.size();
  for (size_t i = 0; i < batch_sizes.size() && i < memory.size(); ++i)
    if (!memory[i]) {
      first_failed = i;
      break;
    }
  if (first_failed == 0)
    fail("AutoBatch: a batch of ", batch_sizes[0], " does not fit in the device's memory: free memory or lower --img");
  fit.batch = first_failed < batch_sizes.size() ? std::min(options.default_batch, batch_sizes[first_failed - 1])
                                                : options.default_batch;
  std::vector<double> x, y;
  for (size_t i = 0; i < batch_sizes.size() && i < memory.size(); ++i)
    if (memory[i]) x.push_back(batch_sizes[i]), y.push_back(*memory[i]);
  if (x.size() < 2) {
    fit.note = "fewer than two batch sizes could be measured";
    return fit;
  }
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) mx += x[i], my += y[i];
  mx /= static_cast<double>(x.size());
  my /= static_cast<double>(x.size());
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < x.size(); ++i) sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx);
  fit.bytes_per_image = sxy / sxx;
  fit.fixed_bytes = my - fit.bytes_per_image * mx;
  if (!(fit.bytes_per_image > 0)) {
    fit.note = "memory did not grow with the batch size";
    return fit;
  }
  double batch = std::trunc((budget_bytes - fit.fixed_bytes) / fit.bytes_per_image);  // Python's int()
  if (first_failed < batch_sizes.size() && batch >= batch_sizes[first_failed]) {  // bounded by the first failure
    batch = batch_sizes[first_failed - 1];
    fit.note = "batch size " + std::to_string(batch_sizes[first_failed]) + " ran out of memory";
  }
  if (!(batch >= 1 && batch <= options.max_batch)) {
    char value[32];
    std::snprintf(value, sizeof value, "%.0f", batch);
    fit.note = std::string("the fitted batch size ") + value + " is outside 1.." + std::to_string(options.max_batch);
    return fit;
  }
  fit.batch = static_cast<int>(batch);
  return fit;
}

BatchFit autobatch(models::YoloModel& model, const c10::Device& device, int img_size, const AutoBatchOptions& options) {
  const std::string prefix = "AutoBatch: ";
  std::cout << prefix << "Computing optimal batch size for --imgsz " << img_size << "\n";
  if (!device.is_cuda()) {
    std::cout << prefix << "CUDA not detected, using default CPU batch-size " << options.default_batch << "\n";
    BatchFit fit;
    fit.batch = options.default_batch;
    return fit;
  }
  // The budget: what this process can hold (free on the device plus what its allocator has cached),
  // measured with the cache emptied. Upstream uses total - (reserved + allocated).
  at::accelerator::emptyCache();
  const auto [free_bytes, total_bytes] = at::accelerator::getMemoryInfo(device.index());
  const auto stats = at::accelerator::getDeviceStats(device.index());
  const double reserved = static_cast<double>(stats.reserved_bytes[kAll].current);
  const double allocated = static_cast<double>(stats.allocated_bytes[kAll].current);
  const double available = static_cast<double>(free_bytes) + reserved;
  std::string name = cuda::device_description(device.index());
  name = name.substr(0, name.find(" ("));
  char line[256];
  std::snprintf(line, sizeof line, "CUDA:%d (%s) %.2fG total, %.2fG reserved, %.2fG allocated, %.2fG free", device.index(),
                name.c_str(), static_cast<double>(total_bytes) / kGiB, reserved / kGiB, allocated / kGiB,
                static_cast<double>(free_bytes) / kGiB);
  std::cout << prefix << line << "\n";

  const std::vector<int> batch_sizes = {1, 2, 4, 8, 16};
  std::vector<std::optional<double>> memory;
  std::string failure;
  {
    // cuDNN's autotuning would time (and allocate workspaces for) each new shape: off while measuring.
    // The batch-norm running statistics the passes move are put back, also when one throws.
    const bool benchmark = cudnn_benchmark();
    std::vector<at::Tensor> statistics;
    for (const auto& b : model.buffers()) statistics.push_back(b.clone());
    const auto restore = [&] {
      at::NoGradGuard no_grad;
      size_t i = 0;
      for (const auto& b : model.buffers()) b.copy_(statistics[i++]);
      set_cudnn_benchmark(benchmark);
    };
    set_cudnn_benchmark(false);
    try {
      for (int b : batch_sizes) memory.push_back(pass_memory(model, device, b, img_size, options, failure));
    } catch (...) {
      restore();
      throw;
    }
    restore();
  }
  if (!failure.empty()) std::cout << prefix << "WARNING: " << failure.substr(0, failure.find('\n')) << "\n";

  const BatchFit fit = fit_batch_size(batch_sizes, memory, options.fraction * available, options);
  if (!fit.note.empty()) std::cout << prefix << "WARNING: " << fit.note << "\n";
  if (fit.bytes_per_image > 0 && fit.note.empty()) {
    const double predicted = fit.fixed_bytes + fit.bytes_per_image * fit.batch;
    std::snprintf(line, sizeof line, "Using batch-size %d for CUDA:%d %.2fG/%.2fG (%.0f%%)", fit.batch, device.index(),
                  predicted / kGiB, static_cast<double>(total_bytes) / kGiB, 100 * predicted / static_cast<double>(total_bytes));
  } else {
    std::snprintf(line, sizeof line, "Using batch-size %d for CUDA:%d (not from the fitted line)", fit.batch, device.index());
  }
  std::cout << prefix << line << "\n";
  return fit;
}

}  // namespace kestrel::train
