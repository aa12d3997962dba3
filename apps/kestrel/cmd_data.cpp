// kestrel data check DATA.yaml: verify every split (images decoded, labels parsed with the reference
// rules), print counts, the class histogram and the skipped files with their reasons (the first 1,000).
#include <filesystem>
#include <iostream>

#include "commands.h"
#include "kestrel/core/ascii_lower.h"
#include "kestrel/core/error.h"
#include "kestrel/core/path_below.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/data/dataset_index.h"
#include "kestrel/data/batch_image.h"
#include "kestrel/data/image_files.h"
#include "kestrel/data/image_io.h"
#include "kestrel/data/loader.h"
#include "kestrel/eval/label_plots.h"
#include "kestrel/eval/yolo_to_coco.h"
#include "kestrel/train/hyperparameters.h"

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
    // Upstream's "No labels found": labels not in the labels/ folder beside images/ (training stops on it).
    if (!index.records.empty() && index.counts.labelled + index.counts.empty == 0)
      std::printf("  WARNING: no labels found in %s: no image has a label file (e.g. %s); labels go in a labels/ folder "
                  "beside images/\n", split, data::label_path_for(index.records[0].image).c_str());
    if (index.records.empty()) {
      std::printf("  %s has no usable sample\n", split);
      any_unusable = true;
    }
    print_histogram(index, cfg);
  }
  if (any_unusable) fail(cfg.source, ": a split has no usable sample");
}

struct DataShowOptions {
  std::string data, hyp, out = "runs/data/train_batch0.jpg";
  int img = 640, batch = 16, workers = 4;
  uint64_t seed = 0;
  bool yolov7 = false;
};

// --out's folder, made when missing; an error names the flag.
void make_out_folder(const std::string& out) {
  const std::filesystem::path folder = std::filesystem::path(out).parent_path();
  if (folder.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) fail("--out ", out, ": cannot create its folder ", folder.string(), " (", ec.message(), ")");
}

// `out`'s folder, or a folder above it, is `folder` (both resolved, symlinks followed).
bool inside(const std::filesystem::path& out, const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(fs::absolute(out).parent_path(), ec), root = fs::weakly_canonical(folder, ec);
  return !ec && !root.empty() && path_is_below(dir, root);
}

void run_show(const DataShowOptions& o) {
  const data::DatasetConfig cfg = data::load_dataset_config(o.data);
  // The batch image and labels.jpg written into a split's folder would join the split (images without labels),
  // or replace one of its images.
  for (const char* split : {"train", "val", "test"})
    for (const std::string& entry : cfg.split(split))
      if (std::filesystem::is_directory(entry) && inside(o.out, entry))
        fail("--out ", o.out, ": inside the dataset's ", split, " images (", entry,
             "), where it and labels.jpg would join the split; write it elsewhere");
  auto index = data::index_split(data::list_images(cfg.train, cfg.source), data::IndexOptions{cfg.nc, o.workers, true});
  if (!index.skipped.empty()) std::cout << data::describe(index, "train", 20);
  data::require_usable(index, cfg.source, "train", cfg.train);
  data::DatasetOptions d;
  d.img_size = o.img;
  d.seed = o.seed;
  bool v7_hyp = false;
  if (!o.hyp.empty()) d.hyp = train::load_augmentations(o.hyp, std::cout, &v7_hyp);
  d.dialect = o.yolov7 || v7_hyp ? data::Dialect::yolov7 : data::Dialect::yolov5;
  if (o.yolov7 && o.hyp.empty()) d.hyp.mosaic9 = 0.2;
  auto dataset = std::make_shared<const data::YoloDataset>(std::move(index), d);
  data::LoaderOptions l;
  l.batch_size = o.batch;
  l.workers = o.workers;
  l.seed = o.seed;
  data::DataLoader loader(dataset, l);
  loader.start_epoch(0);
  auto batch = loader.next();
  const std::filesystem::path out(o.out);
  make_out_folder(o.out);
  data::BatchImageOptions b;
  for (const auto& meta : batch->meta) b.paths.push_back(dataset->records()[meta.index].image);
  data::write_jpeg(o.out, data::render_batch(*batch, cfg.names, b));
  std::printf("%s: %lld images, %lld boxes -> %s\n", cfg.source.c_str(), static_cast<long long>(batch->images.size(0)),
              static_cast<long long>(batch->boxes), o.out.c_str());
  // The whole split's label statistics next to it (labels.jpg, labels_correlogram.jpg), as training writes
  // them into its run folder.
  const std::string labels = (out.parent_path() / "labels.jpg").string();
  const at::Tensor rows = eval::label_rows(dataset->records());
  eval::plot_labels(rows, cfg.names, labels);
  std::printf("%s: %lld boxes in %zu training images -> %s, %s\n", cfg.source.c_str(), static_cast<long long>(rows.size(0)),
              dataset->records().size(), labels.c_str(), eval::correlogram_path(labels).c_str());
}

struct DataCocoOptions {
  std::string data, split = "val", out;
};

// The converter takes one folder of images (eval/yolo_to_coco.h); a split given as a .txt list or as
// several entries has no single images root for file_name, so it is refused rather than guessed.
void run_coco(const DataCocoOptions& o) {
  const data::DatasetConfig cfg = data::load_dataset_config(o.data);
  const std::vector<std::string>& entries = cfg.split(o.split);
  if (entries.empty()) fail(cfg.source, ": no '", o.split, "' split");
  if (entries.size() != 1 || !std::filesystem::is_directory(entries[0]))
    fail(cfg.source, ": the '", o.split, "' split must be a single folder of images to convert to COCO");
  const std::filesystem::path out(o.out);
  std::error_code ec;
  if (std::filesystem::equivalent(out, o.data, ec)) fail("--out ", o.out, ": is the dataset YAML ", o.data, "; not replaced");
  // a typo naming a label file or an image would replace it with JSON
  if (ascii_lower(out.extension().string()) != ".json") fail("--out ", o.out, ": kestrel writes COCO JSON: name it .json");
  make_out_folder(o.out);
  eval::write_yolo_as_coco(entries[0], cfg.names, o.out);
  std::printf("%s: '%s' split (%s) -> %s\n", cfg.source.c_str(), o.split.c_str(), entries[0].c_str(), o.out.c_str());
}

}  // namespace

void add_data_command(CLI::App& app) {
  auto* data = app.add_subcommand("data", "check datasets and look at augmented batches");
  data->require_subcommand(1);
  auto check = std::make_shared<DataCheckOptions>();
  auto* cmd = data->add_subcommand("check", "per-split image/label/box counts, class histogram, skipped files with reasons");
  cmd->add_option("data", check->data, "dataset YAML")->required();
  cmd->add_option("--workers", check->workers, "verification threads")->capture_default_str()->check(CLI::Range(1, 256));
  cmd->add_flag("--no-cache", check->no_cache, "verify again and do not write the label cache");
  cmd->callback([check] { run_check(*check); });

  auto show = std::make_shared<DataShowOptions>();
  auto* shw = data->add_subcommand("show", "write an augmented training batch (boxes, class names) and labels.jpg, labels_correlogram.jpg (the split's label statistics) as images");
  shw->add_option("data", show->data, "dataset YAML")->required();
  shw->add_option("--hyp", show->hyp, "hyperparameter YAML (augmentation keys)");
  shw->add_option("--img,--img-size,--imgsz", show->img, "image size")->capture_default_str()->check(CLI::Range(32, 8192));
  shw->add_option("--batch-size", show->batch, "images in the batch")->capture_default_str()->check(CLI::Range(1, 1024));
  shw->add_option("--workers", show->workers, "loader threads")->capture_default_str()->check(CLI::Range(1, 256));
  shw->add_option("--seed", show->seed, "augmentation seed")->capture_default_str();
  shw->add_flag("--yolov7", show->yolov7, "YOLOv7 augmentation semantics (also implied by a YOLOv7 hyp file)");
  shw->add_option("--out", show->out, "output image (JPEG: .jpg or .jpeg)")->check(CLI::Validator(
      [](std::string& v) {
        std::string ext = std::filesystem::path(v).extension().string();
        for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return ext == ".jpg" || ext == ".jpeg" ? std::string() : "kestrel writes a JPEG: name it .jpg, not " + v;
      },
      "JPEG"));
  shw->callback([show] { run_show(*show); });

  auto coco = std::make_shared<DataCocoOptions>();
  auto* cc = data->add_subcommand("coco", "write a split's YOLO labels as a COCO annotation JSON (for kestrel val --save-json scoring)");
  cc->add_option("data", coco->data, "dataset YAML")->required();
  cc->add_option("--split", coco->split, "split to convert")->capture_default_str()->check(CLI::IsMember({"train", "val", "test"}));
  cc->add_option("--out", coco->out, "output JSON")->required();
  cc->callback([coco] { run_coco(*coco); });
}

}  // namespace kestrel::app
