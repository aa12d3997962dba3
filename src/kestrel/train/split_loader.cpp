#include "kestrel/train/split_loader.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "kestrel/core/device.h"
#include "kestrel/core/error.h"
#include "kestrel/data/dataset_index.h"
#include "kestrel/data/image_files.h"
#include "kestrel/dist/process_group.h"

namespace kestrel::train {
namespace {

// The split's images, verified (skipped files reported on stdout); --single-cls makes every class 0.
data::DatasetIndex verified_split(const data::DatasetConfig& cfg, const std::string& split, int workers,
                                  int nc_for_check, bool single_cls) {
  const auto images = data::list_images(cfg.split(split), cfg.source);
  data::DatasetIndex index = data::index_split(images, data::IndexOptions{nc_for_check, workers, true});
  if (!index.skipped.empty()) std::cout << data::describe(index, split, 20);
  if (single_cls)
    for (auto& r : index.records)
      for (auto& row : r.rows) row.box[0] = 0;
  return index;
}

// --cache ram's check (upstream's check_cache_ram): whether the split's resized images may be kept in
// memory; prints why not when they may not.
bool ram_cache_allowed(const std::string& split, const data::DatasetIndex& index, int img_size, uint64_t other, int processes,
                       uint64_t* bytes) {
  *bytes = data::ram_cache_bytes(index.records, img_size);
  const std::string refusal = ram_cache_refusal(split, *bytes, other, core::host_memory(), processes);
  if (refusal.empty()) return true;
  std::cout << refusal << "\n";
  *bytes = 0;
  return false;
}

}  // namespace

std::string ram_cache_refusal(const std::string& split, uint64_t required, uint64_t other, const core::HostMemory& memory,
                              int processes) {
  if (memory.total == 0) return "";  // unknown: cache, as asked
  const double need = (static_cast<double>(required) + static_cast<double>(other)) * std::max(1, processes);
  if (need * 1.1 < static_cast<double>(memory.available)) return "";
  const auto gb = [](double bytes) {  // upstream's f"{bytes / gb:.1f}GB"
    char text[32];
    std::snprintf(text, sizeof text, "%.1f", bytes / (1 << 30));
    return std::string(text);
  };
  std::string line = cat(split, ": ", gb(required), "GB RAM required");
  if (other > 0) line += cat(" (+", gb(other), "GB for the other split)");
  if (processes > 1) line += cat(" x ", processes, " processes on this machine");
  return line + cat(", ", gb(memory.available), "/", gb(memory.total), "GB available, not caching images (--cache ram)");
}

SplitLoader make_train_loader(const data::DatasetConfig& cfg, const TrainOptions& o, const Hyperparameters& hyp,
                              int stride, int nc_for_check, const c10::Device& device, int rank, int world_size,
                              int repeat) {
  data::DatasetOptions d;
  d.img_size = o.img_size;
  d.augment = true;
  d.rect = o.rect;
  // Data parallel: each rank loads batch_size / WORLD_SIZE images of its share (upstream train.py).
  d.batch_size = std::max(1, o.batch_size / world_size);
  d.stride = stride;
  d.pad = 0.0;
  d.hyp = hyp.augment;
  d.dialect = hyp.yolov7_recipe ? data::Dialect::yolov7 : data::Dialect::yolov5;
  d.cache_ram = o.cache == "ram";
  d.cache_disk = o.cache == "disk";
  d.seed = o.seed;
  data::DatasetIndex index = verified_split(cfg, "train", o.workers, nc_for_check, o.single_cls);
  const auto records = index.records;
  for (int r = 1; r < repeat; ++r) index.records.insert(index.records.end(), records.begin(), records.end());
  SplitLoader out;
  // Each process of this machine caches the whole split (its share changes every epoch), as upstream.
  if (d.cache_ram)
    d.cache_ram = ram_cache_allowed("train", index, d.img_size, 0, dist::read_env().local_world_size, &out.ram_cache_bytes);
  out.dataset = std::make_shared<const data::YoloDataset>(std::move(index), d);
  data::LoaderOptions l;
  l.batch_size = d.batch_size;
  l.workers = std::max(1, o.workers);
  l.max_boxes = o.max_boxes;
  l.shuffle = !o.rect;
  l.seed = o.seed;
  l.pin_memory = device.is_cuda();  // page-locked batches: asynchronous host-to-device copies
  l.rank = rank;
  l.world_size = world_size;
  if (o.bind_cores) {  // this process's slice of the cores it may use, one worker per core in turn
    const dist::DistEnv env = dist::read_env();
    l.cpu_cores = data::rank_cpu_cores(data::allowed_cpu_cores(), env.local_rank, env.local_world_size);
  }
  if (o.quad) {
    // Groups of four: an incomplete last batch could leave a group short, so it is dropped.
    if (d.batch_size < 4) fail("--quad needs at least 4 images per batch", world_size > 1 ? " and rank" : "", " (got ", d.batch_size, ")");
    l.quad = true;
    l.drop_last = true;
  }
  out.loader = std::make_unique<data::DataLoader>(out.dataset, l);
  return out;
}

SplitLoader make_val_loader(const data::DatasetConfig& cfg, const std::string& split, const ValLoaderOptions& o) {
  data::DatasetOptions d;
  d.img_size = o.img_size;
  d.augment = false;
  d.rect = o.rect;
  d.batch_size = o.batch_size;
  d.stride = o.stride;
  d.pad = o.pad;
  d.cache_ram = o.cache == "ram";
  d.cache_disk = o.cache == "disk";
  SplitLoader out;
  data::DatasetIndex index = verified_split(cfg, split, o.workers, o.nc_for_check, o.single_cls);
  if (d.cache_ram) d.cache_ram = ram_cache_allowed(split, index, d.img_size, o.other_ram_cache_bytes, 1, &out.ram_cache_bytes);
  out.dataset = std::make_shared<const data::YoloDataset>(std::move(index), d);
  data::LoaderOptions l;
  l.batch_size = o.batch_size;
  l.workers = std::max(1, o.workers);
  l.max_boxes = o.max_boxes;
  l.shuffle = false;
  l.pin_memory = o.pin_memory;
  out.loader = std::make_unique<data::DataLoader>(out.dataset, l);
  return out;
}

}  // namespace kestrel::train
