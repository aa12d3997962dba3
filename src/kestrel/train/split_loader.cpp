#include "kestrel/train/split_loader.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>
#include <thread>

#include "kestrel/core/device.h"
#include "kestrel/core/error.h"
#include "kestrel/data/dataset_index.h"
#include "kestrel/data/disk_cache.h"
#include "kestrel/data/image_files.h"
#include "kestrel/dist/launcher.h"
#include "kestrel/dist/process_group.h"

namespace kestrel::train {
namespace {

namespace fs = std::filesystem;

// The split's images, verified: their counts, skipped files and warnings reported on stdout (upstream's
// "Scanning ..." line and messages); --single-cls makes every class 0, so no class is above the dataset's
// nc then (upstream merges every class, whatever the YAML's nc; negative or fractional ones stay errors).
data::DatasetIndex verified_split(const data::DatasetConfig& cfg, const std::string& split, int workers,
                                  int nc_for_check, bool single_cls) {
  const auto images = data::list_images(cfg.existing_split(split), cfg.source);
  data::DatasetIndex index = data::index_split(images, data::IndexOptions{single_cls ? 0 : nc_for_check, workers, true});
  std::cout << data::describe(index, split, 20);
  data::require_usable(index, cfg.source, split, cfg.split(split));
  if (single_cls)
    for (auto& r : index.records)
      for (auto& row : r.rows) row.box[0] = 0;
  return index;
}

// This process's share of the cores it may use: under kestrel's launcher the mask is already this rank's
// slice (split again, 96 CPUs and 8 ranks would leave each rank 1 core of its 12); under torchrun or mpirun
// it is the machine's, split among the local ranks. Empty when the mask cannot be read.
std::vector<int> this_rank_cores() {
  const dist::DistEnv env = dist::read_env();
  return dist::cpus_bound_by_launcher() ? data::allowed_cpu_cores()
                                        : data::rank_cpu_cores(data::allowed_cpu_cores(), env.local_rank, env.local_world_size);
}

// Loader threads as create_dataloader's nw = min(cpu_count // devices, batch_size, workers): threads beyond
// this process's cores only compete for them. At least one.
int loader_threads(int workers, int batch_size) {
  const size_t cores = this_rank_cores().size();
  const int limit = cores > 0 ? static_cast<int>(cores) : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, std::min({workers, limit, batch_size}));
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

// --cache disk's check (upstream's check_cache_disk): the files not yet written (each once, however often
// the split lists its image), plus `other` bytes that another split will write, must fit on the disk of
// the first image's folder; prints why not when they may not. *pending: this split's bytes to write.
bool disk_cache_allowed(const std::string& split, const data::DatasetIndex& index, int img_size, bool augment, uint64_t other,
                        uint64_t* pending) {
  *pending = 0;
  if (index.records.empty()) return true;
  std::set<std::string> counted;
  for (const data::ImageRecord& r : index.records) {
    const std::string file = data::disk_cache_path(r.image, data::ResizeKey{img_size, augment});
    std::error_code ec;
    if (!counted.insert(file).second || fs::exists(file, ec)) continue;
    const cv::Size s = data::long_side_size({r.width, r.height}, img_size);
    *pending += 3ull * static_cast<uint64_t>(s.width) * static_cast<uint64_t>(s.height) + 176;  // + header, trailer
  }
  if (*pending == 0) return true;
  const fs::path folder = fs::path(index.records.front().image).parent_path();
  const std::string dir = folder.empty() ? "." : folder.string();
  struct statvfs fs_info {};
  if (::statvfs(dir.c_str(), &fs_info) != 0) return true;  // unknown: try, as asked (a failed write is a warning)
  const uint64_t block = fs_info.f_frsize;
  const std::string refusal = disk_cache_refusal(split, *pending + other, fs_info.f_bavail * block, fs_info.f_blocks * block,
                                                 ::access(dir.c_str(), W_OK) == 0);
  if (refusal.empty()) return true;
  std::cout << refusal << "\n";
  *pending = 0;
  return false;
}

// Bytes in upstream's f"{bytes / gb:.1f}" (GiB), for the cache checks' messages.
std::string gb(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", bytes / (1 << 30));
  return text;
}

}  // namespace

std::string disk_cache_refusal(const std::string& split, uint64_t required, uint64_t free_bytes, uint64_t total_bytes,
                               bool writable) {
  if (!writable) return cat(split, ": skipping caching images to disk, directory not writable (--cache disk)");
  if (static_cast<double>(required) * 1.5 <= static_cast<double>(free_bytes)) return "";
  return cat(split, ": ", gb(required), "GB disk space required, with 50% safety margin but only ", gb(free_bytes), "/",
             gb(total_bytes), "GB free, not caching images to disk (--cache disk)");
}

std::string ram_cache_refusal(const std::string& split, uint64_t required, uint64_t other, const core::HostMemory& memory,
                              int processes) {
  if (memory.total == 0) return "";  // unknown: cache, as asked
  const double need = (static_cast<double>(required) + static_cast<double>(other)) * std::max(1, processes);
  if (need * 1.1 < static_cast<double>(memory.available)) return "";
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
  // --rect: the shapes of the total batch. Rank r takes every WORLD_SIZE-th image of the epoch's order
  // (not shuffled with --rect), so the ranks' batch i together are the images of total batch i, and each
  // rank's batch has one shape. (Upstream groups by the rank's batch, which its sampler's stride mixes.)
  d.batch_size = o.batch_size;
  d.stride = stride;
  d.pad = 0.0;
  d.hyp = hyp.augment;
  d.dialect = hyp.yolov7_recipe ? data::Dialect::yolov7 : data::Dialect::yolov5;
  d.cache_ram = o.cache == "ram";
  d.cache_disk = o.cache == "disk";
  d.seed = o.seed;
  data::DatasetIndex index = verified_split(cfg, "train", o.workers, nc_for_check, o.single_cls);
  // Upstream's dataset asserts that some label file was found before training: images beside no labels/
  // folder (labels put in the wrong place) would otherwise train on backgrounds only, without a word.
  if (index.counts.labelled + index.counts.empty == 0)
    fail("train: no labels found, can not start training (", index.counts.missing, " images without a label file, e.g. ",
         data::label_path_for(index.records.at(0).image), ")");
  if (index.counts.boxes == 0)  // upstream v7.0's `nl > 0` (YOLOv7 fails on the empty array)
    fail("train: all labels empty (", index.counts.empty, " empty label files, no other labelled image), can not start training");
  if (repeat > 1) {
    const auto records = index.records;
    for (int r = 1; r < repeat; ++r) index.records.insert(index.records.end(), records.begin(), records.end());
  }
  SplitLoader out;
  // Each process of this machine caches the whole split (its share changes every epoch), as upstream.
  if (d.cache_ram)
    d.cache_ram = ram_cache_allowed("train", index, d.img_size, 0, dist::read_env().local_world_size, &out.ram_cache_bytes);
  if (d.cache_disk) d.cache_disk = disk_cache_allowed("train", index, d.img_size, d.augment, 0, &out.disk_cache_bytes);
  out.dataset = std::make_shared<const data::YoloDataset>(std::move(index), d);
  data::LoaderOptions l;
  // Each rank's share of the total (upstream train.py), at most the whole split (create_dataloader's
  // min(batch_size, len(dataset)): with --quad, a batch larger than the split would make no batch at all).
  l.batch_size = static_cast<int>(std::clamp<int64_t>(o.batch_size / world_size, 1, std::max<int64_t>(1, static_cast<int64_t>(out.dataset->size()))));
  const bool capped = l.batch_size < o.batch_size / world_size;
  const std::string capped_note = capped ? cat(" (the batch is capped at the split's ", l.batch_size, " images)") : "";
  if (capped && rank == 0)
    std::cout << "train: --batch-size " << o.batch_size << (world_size > 1 ? cat(" (", o.batch_size / world_size, " per rank)") : "")
              << " is more than the split's " << out.dataset->size() << " images: batches of " << l.batch_size << "\n";
  l.workers = loader_threads(o.workers, l.batch_size);
  l.max_boxes = o.max_boxes;
  l.shuffle = !o.rect;
  l.seed = o.seed;
  l.pin_memory = device.is_cuda();  // page-locked batches: asynchronous host-to-device copies
  l.rank = rank;
  l.world_size = world_size;
  if (o.bind_cores) l.cpu_cores = this_rank_cores();  // one worker per core in turn
  if (o.quad) {
    // Groups of four (a short last batch gives its whole groups; one of fewer than 4 images is left out).
    if (l.batch_size < 4)
      fail("--quad needs at least 4 images per batch", world_size > 1 ? " and rank" : "", " (got ", l.batch_size, capped_note, ")");
    l.quad = true;
    if (l.batch_size % 4 != 0 && rank == 0)  // as upstream's collate_fn4, which takes batch // 4 groups
      std::cout << "WARNING: --quad takes groups of 4 images: " << l.batch_size % 4 << " of every batch of "
                << l.batch_size << " are left out; use a batch size that is a multiple of 4\n";
  }
  out.loader = std::make_unique<data::DataLoader>(out.dataset, l);
  if (out.loader->num_batches() == 0)  // --quad with fewer than 4 images for a rank
    fail("--quad: ", out.dataset->size(), " training images", world_size > 1 ? " over the ranks" : "",
         " make no group of 4 images per rank");
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
  if (d.cache_disk) d.cache_disk = disk_cache_allowed(split, index, d.img_size, d.augment, o.other_disk_cache_bytes, &out.disk_cache_bytes);
  out.dataset = std::make_shared<const data::YoloDataset>(std::move(index), d);
  data::LoaderOptions l;
  l.batch_size = o.batch_size;
  l.workers = loader_threads(o.workers, l.batch_size);
  // Validation images are not augmented: room for every label of the fullest one, so that no ground
  // truth is lost from the metrics whatever --max-boxes is.
  l.max_boxes = o.max_boxes;
  for (const auto& r : out.dataset->records()) l.max_boxes = std::max(l.max_boxes, static_cast<int>(r.rows.size()));
  l.shuffle = false;
  l.pin_memory = o.pin_memory;
  out.loader = std::make_unique<data::DataLoader>(out.dataset, l);
  return out;
}

}  // namespace kestrel::train
