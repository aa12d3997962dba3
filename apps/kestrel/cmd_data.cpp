// kestrel data check DATA.yaml: verify every split (images decoded, labels parsed with the reference
// rules), print counts, the class histogram and every skipped file with its reason.
#include <iostream>

#include "commands.h"
#include "kestrel/core/error.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/data/dataset_index.h"
#include "kestrel/data/image_files.h"

namespace kestrel::app {
namespace {

struct DataCheckOptions {
  std::string data;
  int workers = 8;
  bool no_cache = false;
};

void print_histogram(const data::DatasetIndex& index, const data::DatasetConfig& cfg) {
  std::vector<int> per_class(cfg.names.size(), 0), images_with(cfg.names.size(), 0);
  for (const auto& r : index.records) {
    std::vector<bool> seen(cfg.names.size(), false);
    for (const auto& row : r.rows) {
      const auto c = static_cast<size_t>(row.box[0]);
      if (c >= per_class.size()) continue;
      ++per_class[c];
      if (!seen[c]) ++images_with[c];
      seen[c] = true;
    }
  }
  std::printf("  %-20s %8s %8s\n", "class", "images", "boxes");
  for (size_t c = 0; c < per_class.size(); ++c)
    if (per_class[c]) std::printf("  %-20s %8d %8d\n", cfg.names[c].c_str(), images_with[c], per_class[c]);
}

void run_check(const DataCheckOptions& o) {
  const data::DatasetConfig cfg = data::load_dataset_config(o.data);
  std::printf("%s: %d classes, root %s\n", cfg.source.c_str(), cfg.nc, cfg.root.c_str());
  bool any_unusable = false;
  for (const char* split : {"train", "val", "test"}) {
    if (cfg.split(split).empty()) continue;
    const auto images = data::list_images(cfg.split(split), cfg.source);
    const auto index = data::index_split(images, data::IndexOptions{cfg.nc, o.workers, !o.no_cache});
    std::cout << data::describe(index, split, 1000);
    if (index.records.empty()) {
      std::printf("  %s has no usable sample\n", split);
      any_unusable = true;
    }
    print_histogram(index, cfg);
  }
  if (any_unusable) fail(cfg.source, ": a split has no usable sample");
}

}  // namespace

void add_data_command(CLI::App& app) {
  auto* data = app.add_subcommand("data", "check datasets and look at augmented batches");
  data->require_subcommand(1);
  auto check = std::make_shared<DataCheckOptions>();
  auto* cmd = data->add_subcommand("check", "per-split image/label/box counts, class histogram, skipped files with reasons");
  cmd->add_option("data", check->data, "dataset YAML")->required();
  cmd->add_option("--workers", check->workers, "verification threads")->check(CLI::Range(1, 256));
  cmd->add_flag("--no-cache", check->no_cache, "verify again and do not write the label cache");
  cmd->callback([check] { run_check(*check); });
}

}  // namespace kestrel::app
