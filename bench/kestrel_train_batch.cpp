// The first training batch of `kestrel train` and its loss, as raw files, for bench/train_vs_upstream.sh's
// batch-level check (BATCH_BIN): upstream's model and ComputeLoss then run on exactly these images and
// targets (bench/upstream_train_batch.py), which separates data-pipeline differences from model and loss
// ones. Manual helper, not part of the build: it links the engine library of an existing build.
//
//   kestrel_train_batch WEIGHTS DATA.yaml HYP.yaml IMG BATCH OUT_DIR
//
// Writes to OUT_DIR: images.u8 [B, 3, H, W] uint8 RGB (epoch 0's first batch, seed 0, as `kestrel train
// --workers 0` builds it), targets.f32 [B, M, 5] (class, cx, cy, w, h normalised), mask.u8 [B, M],
// level<i>.f32 (the model's raw training-mode outputs [B, na, ny, nx, no], float32), shape.txt (B H W M)
// and paths.txt (the images in batch order);
// prints the loss items (box, obj, cls) as the training loss computes them for that batch (YoloLoss, or OtaLoss
// for a YOLOv7 hyp with loss_ota: 1).
// Build: cmake --build build --target kestrel_train_batch (not part of the default build).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "kestrel/data/dataset_config.h"
#include "kestrel/loss/yolo_loss.h"
#include "kestrel/models/weights_file.h"
#include "kestrel/train/hyperparameters.h"
#include "kestrel/train/split_loader.h"
#include "kestrel/train/train_step.h"

namespace {

void write_raw(const std::filesystem::path& path, const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  if (!out) std::fprintf(stderr, "%s: write failed\n", path.c_str()), std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s WEIGHTS DATA.yaml HYP.yaml IMG BATCH OUT_DIR\n", argv[0]);
    return 2;
  }
  using namespace kestrel;
  const std::filesystem::path out_dir = argv[6];
  std::filesystem::create_directories(out_dir);
  models::LoadedModel loaded = models::load_model_weights(argv[1]);
  const data::DatasetConfig cfg = data::load_dataset_config(argv[2]);
  const train::Hyperparameters hyp = train::load_hyperparameters(argv[3]);
  train::TrainOptions o;
  o.img_size = std::atoi(argv[4]);
  o.batch_size = std::atoi(argv[5]);
  o.workers = 0;
  const int nc = static_cast<int>(cfg.names.size());
  train::SplitLoader split =
      train::make_train_loader(cfg, o, hyp, 32, nc, c10::Device(c10::kCPU));
  split.loader->start_epoch(0);
  const auto batch = split.loader->next();
  if (!batch) std::fprintf(stderr, "no batch\n"), std::exit(1);
  write_raw(out_dir / "images.u8", batch->images);
  write_raw(out_dir / "targets.f32", batch->targets.to(at::kFloat));
  write_raw(out_dir / "mask.u8", batch->target_mask.to(at::kByte));
  std::ofstream shape(out_dir / "shape.txt");
  shape << batch->images.size(0) << " " << batch->images.size(2) << " " << batch->images.size(3) << " "
        << batch->targets.size(1) << "\n";
  std::ofstream paths(out_dir / "paths.txt");  // each batch image's file, in batch order
  for (const data::SampleMeta& m : batch->meta) paths << split.dataset->records()[m.index].image << "\n";

  models::YoloModel& model = *loaded.model;
  model.train();
  const train::LossFn loss = train::make_loss_fn(model.head(), hyp.loss, o.img_size, hyp.loss_ota);
  const at::Tensor input = batch->images.to(at::kFloat) / 255;
  const std::vector<at::Tensor> levels = model.forward(input);
  for (size_t i = 0; i < levels.size(); ++i)
    write_raw(out_dir / ("level" + std::to_string(i) + ".f32"), levels[i].detach().to(at::kFloat));
  const loss::YoloLoss::Result r = loss(levels, batch->targets, batch->target_mask);
  const at::Tensor items = r.items.to(at::kDouble);
  std::printf("kestrel loss items (box, obj, cls): %.9g %.9g %.9g\n", items[0].item<double>(), items[1].item<double>(),
              items[2].item<double>());
  if (std::getenv("KESTREL_PER_IMAGE")) {  // each image's targets alone: where two losses differ
    for (int64_t i = 0; i < batch->images.size(0); ++i) {
      const at::Tensor m = batch->target_mask.clone();
      m.narrow(0, 0, i).zero_();
      m.narrow(0, i + 1, m.size(0) - i - 1).zero_();
      const at::Tensor it = loss(levels, batch->targets, m).items.to(at::kDouble);
      std::printf("image %ld alone: %.9g %.9g %.9g\n", static_cast<long>(i), it[0].item<double>(), it[1].item<double>(),
                  it[2].item<double>());
    }
  }
  return 0;
}
