#include "kestrel/train/training_run.h"

#include <cmath>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <random>

#include "kestrel/core/async_host_copy.h"
#include "kestrel/core/device.h"
#include "kestrel/core/error.h"
#include "kestrel/core/stop_signal.h"
#include "kestrel/data/batch_image.h"
#include "kestrel/data/device_prefetcher.h"
#include "kestrel/data/image_files.h"
#include "kestrel/data/image_io.h"
#include "kestrel/dist/sync_batch_norm.h"
#include "kestrel/eval/label_plots.h"
#include "kestrel/eval/plots.h"
#include "kestrel/eval/yolo_to_coco.h"
#include "kestrel/models/model_config.h"
#include "kestrel/train/autoanchor.h"
#include "kestrel/train/freeze.h"
#include "kestrel/train/image_weights.h"
#include "kestrel/train/param_groups.h"
#include "kestrel/train/train_options.h"

namespace kestrel::train {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

std::string first_non_finite_parameter(torch::nn::Module& model) {
  for (const auto& p : model.named_parameters()) {
    if (!at::isfinite(p.value()).all().item<bool>()) return "parameter " + p.key();
    if (p.value().grad().defined() && !at::isfinite(p.value().grad()).all().item<bool>()) return "gradient of " + p.key();
  }
  return "";
}

// [3] loss items on the device -> host doubles.
std::array<double, 3> host_items(const at::Tensor& items) {
  const at::Tensor h = items.to(at::kCPU).to(at::kDouble);
  return {h[0].item<double>(), h[1].item<double>(), h[2].item<double>()};
}

// The progress line's running mean losses without draining the GPU. On CUDA each draw shows the values
// copied at an earlier draw (a pinned copy queued behind that step, long finished: the query does not
// wait) and queues the next copy; only the first draw reads at once. Elsewhere a plain read.
class LaggedLossRead {
 public:
  std::array<double, 3> read(const at::Tensor& items) {  // items [3] on the training device
    if (!items.is_cuda()) return host_items(items);
    if (copy_.started() && copy_.arrived()) shown_ = host_items(copy_.wait());
    else if (!copy_.started()) shown_ = host_items(items);
    if (!copy_.started() || copy_.arrived()) copy_.start(items);
    return shown_;
  }

 private:
  AsyncHostCopy copy_;
  std::array<double, 3> shown_{};
};

}  // namespace

// ---- set-up: the phases before start_epochs are in training_run_setup.cpp ------------------------

TrainingRun::ScratchDir::~ScratchDir() {
  std::error_code ignored;
  if (!path.empty()) fs::remove_all(path, ignored);
}

void TrainingRun::start_epochs() {
  std::cout << "kestrel train: " << info.model_name << " (" << nc << " classes) on " << device << ", "
            << optimizer_name(opt_options.kind)
            << (model->head().aux() ? ", auxiliary-head OTA loss" : hyp.loss_ota ? ", OTA loss" : "")
            << (resuming() ? ", resumed" : o.weights.empty() ? ", from scratch (no --weights)" : "") << ", " << nb
            << " batches of " << train_data.loader->batch_size() * std::max(1, dist_ctx.world_size)  // capped at the split's size
            << " per epoch, amp "
            << amp << ", results to " << save_dir << "\n";
  // Ctrl-C or SIGTERM: stop at the next optimiser step and save.
  stop_signal.emplace("\nStopping after the next optimiser step to save the run (again to stop at once)\n");
  progress = ProgressLine(o.quiet, o.epochs);
  result.save_dir = save_dir;
  if (dist_ctx.is_main())  // train.py's lines before the first epoch (YOLOv7's: "test" for "val")
    std::cout << "Image sizes " << o.img_size << " train, " << (o.img_size_test > 0 ? o.img_size_test : o.img_size)
              << (hyp.yolov7_recipe ? " test\n" : " val\n") << "Using "  // YOLOv7: a rank's workers; v7.0: all ranks'
              << train_data.loader->workers() * (hyp.yolov7_recipe ? 1 : dist_ctx.world_size)
              << " dataloader workers\nLogging results to " << save_dir << "\nStarting training for " << o.epochs << " epochs...\n";
  first_epoch = progression.epoch;
  training_start = std::chrono::steady_clock::now();
}

// ---- one epoch --------------------------------------------------------------------------------------

void TrainingRun::begin_epoch() {
  model->train();
  if (o.freeze_bn) set_batchnorm_eval(*model);
  step->zero_grad();  // in place under --cuda-graph: the captured graphs write into these gradients
  if (o.image_weights) {
    // Rank 0 validated: every rank samples with its per-class mAPs (one list: the ranks share it).
    at::Tensor maps = at::zeros({nc}, at::TensorOptions().dtype(at::kDouble).device(device));  // [nc]
    if (progression.maps.size() == static_cast<size_t>(nc)) maps.copy_(at::tensor(progression.maps, at::kDouble));
    dist::broadcast_tensors({maps}, dist_ctx);
    const at::Tensor m = maps.to(at::kCPU);
    progression.maps.assign(m.data_ptr<double>(), m.data_ptr<double>() + nc);
    train_data.loader->set_sample_weights(train::image_sampling_weights(train_data.dataset->records(), nc, progression.maps));
  }
  train_data.loader->start_epoch(progression.epoch, progression.next_batch);
  progress.header();
}

namespace {

// images/s of the step: from the third batch on (the first ones warm up caches and kernels), in device
// time: the host, which queues work ahead of a GPU, waits for it at both ends (twice an epoch).
class StepThroughput {
 public:
  StepThroughput(const at::Device& device, int64_t first_batch) : device_(device), first_batch_(first_batch) {}
  void after_batch(int64_t i, int64_t images) {
    if (i - first_batch_ == 2) {
      synchronize(device_);
      start_ = Clock::now();
    }
    if (i - first_batch_ > 2) images_ += images;
  }
  double so_far() const {  // for the progress line: no synchronisation, the host's clock
    const double secs = std::chrono::duration<double>(Clock::now() - start_).count();
    return images_ > 0 && secs > 0 ? images_ / secs : 0.0;
  }
  double at_end() const {
    synchronize(device_);
    return images_ > 0 ? images_ / std::chrono::duration<double>(Clock::now() - start_).count() : 0.0;
  }

 private:
  at::Device device_;
  int64_t first_batch_;
  int64_t images_ = 0;
  Clock::time_point start_{};
};

}  // namespace

// Upstream's train_batch0..2.jpg (YOLOv7: 0..9): the run's first batches as trained on, drawn from the host
// copy (uint8, before the transfer; with --multi-scale resized here as on the device, and back to bytes as
// plot_images truncates x 255): no device synchronisation, a few JPEG encodes per run on this thread. A file
// that cannot be written is a warning.
void TrainingRun::plot_first_batches(data::DevicePrefetcher& prefetcher) {
  const int epoch = progression.epoch;
  const int64_t plotted_batches = hyp.yolov7_recipe ? 10 : 3;
  if (o.noplots || !dist_ctx.is_main() || nb * epoch + progression.next_batch >= plotted_batches) return;
  prefetcher.set_host_batch_hook([this, epoch, plotted_batches](const data::Batch& b) {
    const int64_t ni = b.index + nb * epoch;
    if (ni >= plotted_batches) return;
    data::BatchImageOptions options;
    for (const auto& meta : b.meta) options.paths.push_back(train_data.dataset->records()[meta.index].image);
    data::Batch shown = b;  // tensors shared; the images replaced when resized
    if (o.multi_scale)
      shown.images = (multi_scale_resize(b.images.to(at::kFloat) / 255, multi_scale_size_of(epoch, b.index), stride) * 255)
                         .to(at::kByte);
    try {
      data::write_jpeg((fs::path(save_dir) / cat("train_batch", ni, ".jpg")).string(), data::render_batch(shown, names, options));
    } catch (const Error& e) {
      std::cerr << "WARNING: " << e.what() << "\n";
    }
  });
}

// Batches progression.next_batch .. nb-1 of the epoch: forward and backward every batch, an optimiser
// step every `accumulate` batches. Stops early (totals.interrupted) only right after an optimiser step.
EpochTotals TrainingRun::run_batches() {
  const int epoch = progression.epoch;
  EpochTotals totals;
  totals.loss_sum = at::tensor(std::vector<double>(progression.loss_sum.begin(), progression.loss_sum.end()), at::kFloat).to(device);
  // Logged per epoch: the rates of its last iteration (also when a resumed epoch has no batch left).
  totals.lr = step_settings(sched, epoch, nb * (epoch + 1) - 1, nb).lr;
  StepThroughput throughput(device, progression.next_batch);
  LaggedLossRead progress_losses;
  // The next batch's copy to the device (a side stream on CUDA) overlaps this batch's step.
  data::DevicePrefetcher prefetcher(*train_data.loader, device, o.channels_last, /*trim_multiple=*/32);
  plot_first_batches(prefetcher);
  for (int64_t i = progression.next_batch; i < nb; ++i) {
    std::optional<data::DeviceBatch> batch = prefetcher.next();
    if (!batch) break;
    const int64_t ni = i + nb * epoch;  // iterations since the start of training
    const StepSettings s = step_settings(sched, epoch, ni, nb);
    totals.lr = s.lr;
    // images [B, 3, H, W] float 0..1; targets [B, M, 5] (class, cx, cy, w, h), target_mask [B, M].
    const at::Tensor images = o.multi_scale ? multi_scale(batch->images, epoch, i) : batch->images;

    // Optimiser step every `accumulate` batches (schedule.h: YOLOv5's or YOLOv7's rule); only the
    // backward before it communicates.
    const bool step_due = optimizer_step_due(sched, ni, progression.last_opt_step, s.accumulate);
    reducer->prepare_backward(step_due);
    // With --cuda-graph the update is part of the replay (one process: nothing to reduce before it).
    const loss::YoloLoss::Result step_loss =
        graph ? graph->run(images, batch->targets, batch->target_mask, s, step_due)
              : step->forward_backward(images, batch->targets, batch->target_mask);
    if (o.check_nans) check_finite_loss(step_loss, *batch, epoch, i, ni);
    if (step_due) totals.interrupted = optimiser_step(s, ni);
    totals.loss_sum.add_(step_loss.items.to(at::kFloat));
    totals.dropped_boxes += batch->dropped_boxes;
    ++progression.loss_count;
    ++batches_run;

    throughput.after_batch(i, images.size(0));
    const bool last = i + 1 == nb || totals.interrupted;
    if (progress.due(last)) {
      const at::Tensor mean = totals.loss_sum / static_cast<double>(progression.loss_count);
      // The epoch's last line reads the final values (one read per epoch); the others lag a draw behind.
      const std::array<double, 3> losses = last ? host_items(mean) : progress_losses.read(mean);
      progress.draw(epoch, reserved_memory_gb(device), losses, batch->boxes, images.size(3), i, nb, throughput.so_far(), last);
    }
    if (totals.interrupted) {
      progression.loss_sum = host_items(totals.loss_sum);
      progression.next_batch = i + 1;
      break;
    }
  }
  totals.images_per_second = throughput.at_end();
  return totals;
}

// Upstream --multi-scale: a random size in [0.5, 1.5] x img, a multiple of the stride, per batch (seeded
// here by batch). images [B, 3, H, W] -> [B, 3, H', W'], the longer side near that size.
at::Tensor TrainingRun::multi_scale(const at::Tensor& images, int epoch, int64_t i) const {
  return multi_scale_resize(images, multi_scale_size_of(epoch, i), stride);
}

int TrainingRun::multi_scale_size_of(int epoch, int64_t i) const {
  std::mt19937 rng(static_cast<uint32_t>(data::sample_seed(o.seed, epoch, static_cast<uint64_t>(i) + (1ull << 40))));
  return multi_scale_size(o.img_size, stride, rng);
}

int multi_scale_size(int img_size, int stride, std::mt19937& rng) {
  const int lo = static_cast<int>(img_size * 0.5), hi = static_cast<int>(img_size * 1.5) + stride;
  return (lo + data::random_below(rng, hi - lo)) / stride * stride;
}

at::Tensor multi_scale_resize(const at::Tensor& images, int size, int stride) {
  const double sf = static_cast<double>(size) / std::max(images.size(2), images.size(3));
  if (sf == 1) return images;
  const int64_t h = static_cast<int64_t>(std::ceil(images.size(2) * sf / stride) * stride);
  const int64_t w = static_cast<int64_t>(std::ceil(images.size(3) * sf / stride) * stride);
  return at::upsample_bilinear2d(images, {h, w}, false);
}

// --check-nans: one host read of the loss per step, and a report of where it went wrong.
void TrainingRun::check_finite_loss(const loss::YoloLoss::Result& step_loss, const data::DeviceBatch& batch, int epoch,
                                    int64_t i, int64_t ni) {
  if (at::isfinite(step_loss.total).item<bool>()) return;
  const at::Tensor items = step_loss.items.to(at::kCPU);
  std::string files;
  for (size_t k = 0; k < batch.meta.size() && k < 4; ++k)
    files += "\n  " + train_data.dataset->records()[batch.meta[k].index].image;
  fail("--check-nans: non-finite loss at epoch ", epoch, ", batch ", i, " (iteration ", ni, "): box ",
       items[0].item<double>(), ", obj ", items[1].item<double>(), ", cls ", items[2].item<double>(),
       "; first non-finite model value: ", first_non_finite_parameter(*model), "; batch images:", files);
}

bool TrainingRun::optimiser_step(const StepSettings& s, int64_t ni) {
  if (!graph) {
    reducer->reduce();  // waits for the buckets started in backward; no-op in one process
    step->optimizer_step(s);
  }
  progression.last_opt_step = ni;
  // Ctrl-C is honoured here, where no gradient is half accumulated. Several ranks vote on it every 8
  // optimiser steps and act on the previous vote's result (a collective read without draining the GPU):
  // all ranks stop at the same step, 8 to 16 steps after the signal.
  bool stop_now = StopSignal::requested();
  if (dist_ctx.enabled) {
    if (!stop_vote) stop_vote.emplace(dist_ctx);
    stop_now = ++dist_stop_checks % 8 == 0 && stop_vote->vote(stop_now);
  }
  return stop_now || (o.interrupt_after >= 0 && batches_run + 1 >= o.interrupt_after);
}

void TrainingRun::save_interrupted() {
  result.interrupted = true;
  if (!o.save_weights) {
    std::cout << "\nInterrupted\n";
    return;
  }
  save_checkpoint(progression, false, progression.epoch - 1, /*periodic=*/false);  // epoch<n> files: whole epochs only
  std::cout << "\nInterrupted: saved " << state_path << "; continue with kestrel train --resume " << shell_word(save_dir) << "\n";
}

// The EMA is validated (on rank 0; every epoch unless --noval), logged and saved.
bool TrainingRun::end_epoch(const EpochTotals& totals) {
  if (scaler->enabled() && scaler->skipped_steps() > 0)
    std::cout << "  loss scale " << scaler->current_scale() << ", " << scaler->skipped_steps()
              << " optimiser steps skipped so far (inf/NaN gradients)\n";
  if (totals.dropped_boxes > 0)  // fixed-capacity targets (static shapes): say what did not fit
    std::cout << "WARNING: " << totals.dropped_boxes << " boxes of this epoch's augmented images were beyond --max-boxes "
              << o.max_boxes << " per image and were left out of the loss; raise --max-boxes\n";
  const int epoch = progression.epoch;
  const std::array<double, 3> train_loss =
      host_items(totals.loss_sum / static_cast<double>(std::max<int64_t>(progression.loss_count, 1)));
  result.epoch_losses.push_back(train_loss[0] + train_loss[1] + train_loss[2]);
  if (!std::isfinite(result.epoch_losses.back()))  // without --check-nans the run goes on: say so once an epoch
    std::cout << "WARNING: the epoch's mean training loss is not finite (box " << train_loss[0] << ", obj " << train_loss[1]
              << ", cls " << train_loss[2] << "): an fp16 overflow the loss scaler skipped, or training has diverged; --check-nans stops at the first such step\n";
  // train.py's final_epoch also holds where EarlyStopping's possible_stop did after the previous epoch (the
  // next epoch may stop): such an epoch is validated under --noval and saved under --nosave.
  const bool possible_stop = o.patience > 0 && epoch > 0 && epoch - 1 - progression.best_epoch >= o.patience - 1;
  const bool final_epoch = epoch + 1 == o.epochs || possible_stop;
  if ((!o.noval || final_epoch) && dist_ctx.is_main()) validate_epoch(final_epoch);
  const double fi = fitness(last_val.metrics.map50, last_val.metrics.map);
  bool best = fi >= progression.best_fitness;  // upstream EarlyStopping: >= moves the best epoch
  if (best && !ema_is_finite()) {  // a diverged run's fitness 0 ties the best: keep the best weights there are
    best = false;
    std::cout << "WARNING: the EMA weights hold NaN or infinite values after epoch " << epoch
              << " (training diverged): best.safetensors is not replaced\n";
  }
  if (best) progression.best_fitness = fi, progression.best_epoch = epoch;
  // Rank 0 decides: only it validates. The other ranks' fitness is 0, and after --resume their best
  // epoch is the saved one, so their own count would stop a run that rank 0 sees improving.
  bool stop = dist_ctx.is_main() && o.patience > 0 && epoch - progression.best_epoch >= o.patience;
  stop = dist::any_rank(stop, dist_ctx);  // all ranks stop together
  if (stop)  // EarlyStopping's words
    std::cout << "Stopping training early as no improvement observed in last " << o.patience
              << " epochs. Best results observed at epoch " << progression.best_epoch
              << ", best model saved as best.safetensors.\nTo update EarlyStopping(patience=" << o.patience
              << ") pass a new patience value, i.e. `kestrel train --patience 300` or use `--patience 0` to disable EarlyStopping.\n";
  log_epoch(epoch, train_loss, totals);
  Progression done = progression;
  done.epoch = stop ? o.epochs : epoch + 1;  // an early stop ends the run: --resume has nothing left to do
  done.next_batch = 0;
  done.loss_sum = {0, 0, 0};
  done.loss_count = 0;
  if (o.save_weights && (!o.nosave || final_epoch || stop)) save_checkpoint(done, best, epoch, /*periodic=*/true);
  progression.loss_sum = {0, 0, 0};
  progression.loss_count = 0;
  result.epochs_completed = epoch + 1;
  return stop;
}

bool TrainingRun::ema_is_finite() {
  std::vector<at::Tensor> checks;
  for (const auto& t : models::state_dict(ema->model()))
    if (t.second.is_floating_point()) checks.push_back(at::isfinite(t.second).all());
  return checks.empty() || at::stack(checks).all().item<bool>();  // one read-back, at the epoch's end
}

void TrainingRun::validate_epoch(bool final_epoch) {
  eval::ValidationOptions v;
  v.metric = eval::metric_style_for(ema->model(), o.v5_metric, o.v3_metric);
  v.single_cls = o.single_cls;
  v.half = amp == "fp16";
  v.channels_last = o.channels_last;  // the EMA model's layout (training_run_setup.cpp)
  const auto val_loss = [&](const std::vector<at::Tensor>& levels, const at::Tensor& t, const at::Tensor& m) {
    return (*compute_loss)(levels, t, m).items;
  };
  last_val = eval::validate(ema->model(), *val_data.loader, *val_data.dataset, device, nc, v, val_loss);
  // Per-class rows: YOLOv7's train.py asks test.py for them at the final epoch when nc < 50 (YOLOv5: never).
  if (!o.quiet) std::cout << eval::format_validation_table(last_val, names, hyp.yolov7_recipe && final_epoch && nc < 50);
  progression.maps = class_maps(last_val.metrics, nc);
}

// results.csv and TensorBoard: the row of upstream's columns (train losses, P, R, mAPs, val losses, lrs).
// x/lr0..2 are the optimiser's parameter groups in upstream's order: YOLOv5's biases, weights, norm
// weights; YOLOv7's train.py builds them as norm weights, weights, biases (its warm-up ramps group 2 from
// warmup_bias_lr), so its recipes log that order.
void TrainingRun::log_epoch(int epoch, const std::array<double, 3>& train_loss, const EpochTotals& totals) {
  const std::array<double, 3>& lr = totals.lr;  // biases, weights, norm weights (schedule.h)
  const std::array<double, 3> logged_lr = hyp.yolov7_recipe ? std::array<double, 3>{lr[2], lr[1], lr[0]} : lr;
  const std::vector<double> row = {train_loss[0], train_loss[1], train_loss[2], last_val.metrics.mp,
                                   last_val.metrics.mr, last_val.metrics.map50, last_val.metrics.map, last_val.loss[0],
                                   last_val.loss[1], last_val.loss[2], logged_lr[0], logged_lr[1], logged_lr[2]};
  results->append(epoch, row);
  if (!tensorboard) return;
  for (size_t k = 0; k < row.size(); ++k) tensorboard->add_scalar(ResultsCsv::columns()[k + 1], row[k], epoch);
  if (totals.images_per_second > 0) tensorboard->add_scalar("x/images_per_second", totals.images_per_second, epoch);
  tensorboard->flush();
}

// last (and best, and every --save-period) weights of the EMA; and the state a resume needs: both
// models, the optimiser and scaler state, and the progression.
void TrainingRun::save_checkpoint(const Progression& p, bool best, int epoch_done, bool periodic) {
  // Rank 0 alone writes, as upstream (RANK in {-1, 0}): the others' copies would only fill their scratch
  // folders every epoch.
  if (!dist_ctx.is_main()) return;
  models::WeightsInfo w = info;
  w.extra = {{"epoch", std::to_string(epoch_done)}, {"best_fitness", cat(p.best_fitness)}};
  models::save_model_weights(last_path, ema->model(), w);
  if (best) models::save_model_weights(best_path, ema->model(), w);
  // YOLOv5 v7.0: epoch{N} when N % save_period == 0 (N from 0: epoch0, epoch10, ... for 10).
  if (periodic && o.save_period > 0 && epoch_done >= 0 && epoch_done % o.save_period == 0)
    models::save_model_weights((weights_dir / cat("epoch", epoch_done, ".safetensors")).string(), ema->model(), w);
  TrainingState state;
  state.options = o;
  // Files named relative to where training started are saved absolute, so that --resume works from any
  // folder (opt.yaml keeps them as given, as upstream). --cfg may be a shipped name rather than a file.
  for (std::string* file : {&state.options.data, &state.options.cfg, &state.options.hyp, &state.options.weights})
    if (!file->empty() && fs::exists(*file)) *file = fs::absolute(*file).lexically_normal().string();
  state.progression = p;
  state.ema_updates = ema->updates();
  state.world_size = dist_ctx.world_size;
  state.model_yaml = info.model_yaml;
  state.model_name = info.model_name;
  state.model = models::state_dict(*model);
  state.ema = models::state_dict(ema->model());
  state.optimizer = optimizer->state();
  if (scaler->enabled()) state.scaler = scaler->state();
  write_training_state(state_path, state);
}

// ---- the end ----------------------------------------------------------------------------------------

void TrainingRun::end_epochs() {
  // A stop requested after the last optimiser step finds the run complete and saved: what is left, the
  // final validation of best weights and the plots, is skipped rather than the request ignored.
  if (!result.interrupted && StopSignal::requested()) {
    result.stopped_after_training = true;
    // Nothing is left to resume: say how to run the validation that was skipped.
    if (o.save_weights && fs::exists(best_path))
      std::cout << "\nStopped after the last epoch (saved): the final validation of best weights is skipped; run it with "
                << final_validation_command(o, best_path, final_validation_iou_thres(hyp.yolov7_recipe, data_cfg, nc), dist_ctx.world_size) << "\n";
    else
      std::cout << "\nStopped after the last epoch" << (o.save_weights ? " (saved)" : "") << ": its final validation is skipped\n";
  }
  // Every rank keeps its handler until finish's barrier. Ranks above 0: a signal for the whole job (the
  // launcher's forward, a scheduler's) killing one of them there made the launcher kill rank 0 in the middle
  // of writing its last checkpoint. Rank 0: the same signal during the final validation would kill it and the
  // job end as failed; it ends the run after the validation's table instead, without the charts.
  if (dist_ctx.is_main() && !result.interrupted && !result.stopped_after_training)
    final_stop.emplace("\nStopping after the final validation's table, without its charts (again to stop at once)\n");
}

TrainResult TrainingRun::finish() {
  result.best_fitness = progression.best_fitness;
  result.final_map50 = last_val.metrics.map50;
  result.final_map = last_val.metrics.map;
  if (fs::exists(last_path)) result.last = last_path;
  if (fs::exists(best_path)) result.best = best_path;
  bool stopped = result.interrupted || result.stopped_after_training;
  // train.py's count: the epochs of this session (a resumed run's earlier ones not included), and its hours
  const double hours = std::chrono::duration<double>(std::chrono::steady_clock::now() - training_start).count() / 3600;
  if (dist_ctx.is_main() && !result.interrupted)  // upstream's KeyboardInterrupt skips it
    std::printf("\n%d epochs completed in %.3f hours.\n", std::max(result.epochs_completed - first_epoch, 0), hours);
  std::fflush(stdout);
  if (!stopped && !result.best.empty() && dist_ctx.is_main()) validate_best();
  if (!stopped && StopSignal::requested()) {  // during the final validation (on rank 0), or while waiting for it
    result.stopped_after_training = stopped = true;
    std::cout << "\nStopped during the final validation: its charts and results.png are skipped\n";
  }
  if (!stopped && fs::exists(results->path()) && dist_ctx.is_main() && !o.noplots)
    eval::plot_results(results->path(), (fs::path(save_dir) / "results.png").string());
  std::cout << "Results saved to " << save_dir << "\n";
  if (!dist_ctx.is_main()) {  // its scratch folder goes with the run (ScratchDir), as after an error
    std::cout.rdbuf(cout_buffer);
    result.save_dir = run_dir;  // the real run folder (empty for a new run: rank 0 named it)
    result.last.clear();
    result.best.clear();
  }
  dist::barrier(dist_ctx);
  final_stop.reset();  // nested: the inner first
  stop_signal.reset();
  dist::shutdown(dist_ctx);
  return result;
}

// A path as one shell word: as it is where it holds only characters no shell reads specially, else quoted.
std::string shell_word(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_@%+=:,./-", c) != nullptr;
  });
  if (plain) return s;
  std::string quoted = "'";
  for (char c : s) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string final_validation_command(const TrainOptions& o, const std::string& best, double iou_thres, int world_size) {
  return cat("kestrel val --data ", shell_word(o.data), " --weights ", shell_word(best), " --img ", o.img_size_test > 0 ? o.img_size_test : o.img_size,
             " --batch-size ", std::max(1, o.batch_size / std::max(1, world_size)) * 2, " --iou-thres ", iou_thres, o.single_cls ? " --single-cls" : "",
             o.v3_metric ? " --v3-metric" : "", o.v5_metric ? " --v5-metric" : "");
}

double final_validation_iou_thres(bool yolov7_recipe, const data::DatasetConfig& data, int64_t nc) {
  if (yolov7_recipe) return eval::has_coco_yaml_name(data) && nc == 80 ? 0.7 : eval::ValidationOptions{}.nms.iou_thres;
  return eval::has_coco_val_path(data) ? 0.65 : eval::ValidationOptions{}.nms.iou_thres;
}

// Upstream ends by validating best.pt with the per-class table, and its end-of-training charts (val.py
// with plots=True on best.pt, and plot_results) unless --noplots.
void TrainingRun::validate_best() {
  models::LoadedModel best;
  try {
    best = models::load_model_weights(result.best);
  } catch (const Error& e) {  // unreadable best weights (a damaged file): the run still ends, and says so
    std::cout << "\nWARNING: the final validation of best weights is skipped: " << e.what() << "\n";
    return;
  }
  // Conv + BN fused, as upstream validates best.pt (attempt_load fuses), and as `kestrel val` runs it.
  best.model->eval();
  best.model->fuse();
  best.model->to(device);
  eval::ValidationOptions v;
  v.metric = eval::metric_style_for(*best.model, o.v5_metric, o.v3_metric);
  v.single_cls = o.single_cls;
  v.half = true;  // upstream validates attempt_load(best).half() (fp16 autocast here; CUDA only)
  v.nms.iou_thres = final_validation_iou_thres(hyp.yolov7_recipe, data_cfg, nc);
  if (o.channels_last) {
    to_channels_last(*best.model);
    v.channels_last = true;
  }
  eval::ConfusionMatrix confusion(nc);
  if (!o.noplots) {
    v.confusion = &confusion;
    v.plot_batches = 3;  // val.py's val_batch0..2_labels.jpg / _pred.jpg
    v.plot_dir = save_dir;
    v.names = names;
  }
  const eval::ValidationResult r = eval::validate(*best.model, *val_data.loader, *val_data.dataset, device, nc, v);
  std::cout << "\nValidating " << result.best << "...\n" << eval::format_validation_table(r, names, true);
  if (o.noplots || StopSignal::requested()) return;
  const fs::path dir(save_dir);
  eval::plot_confusion_matrix(confusion, names, (dir / "confusion_matrix.png").string());
  if (!r.metrics.scored) return;  // as val.py: the curves only where some prediction was correct
  eval::plot_pr_curve(r.metrics, names, (dir / "PR_curve.png").string());
  eval::plot_confidence_curve(r.metrics, eval::CurveKind::f1, names, (dir / "F1_curve.png").string());
  eval::plot_confidence_curve(r.metrics, eval::CurveKind::precision, names, (dir / "P_curve.png").string());
  eval::plot_confidence_curve(r.metrics, eval::CurveKind::recall, names, (dir / "R_curve.png").string());
}

}  // namespace kestrel::train
