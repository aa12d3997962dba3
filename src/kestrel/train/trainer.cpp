#include "kestrel/train/trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <random>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "kestrel/core/device.h"
#include "kestrel/core/error.h"
#include "kestrel/core/safetensors.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/data/device_prefetcher.h"
#include "kestrel/data/image_files.h"
#include "kestrel/data/loader.h"
#include "kestrel/dist/process_group.h"
#include "kestrel/dist/sync_batch_norm.h"
#include "kestrel/eval/label_plots.h"
#include "kestrel/eval/plots.h"
#include "kestrel/eval/validator.h"
#include "kestrel/loss/yolo_loss.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/state_dict.h"
#include "kestrel/models/weights_file.h"
#include "kestrel/train/autoanchor.h"
#include "kestrel/train/ema.h"
#include "kestrel/train/grad_scaler.h"
#include "kestrel/train/image_weights.h"
#include "kestrel/train/hyperparameters.h"
#include "kestrel/train/optimizer.h"
#include "kestrel/train/param_groups.h"
#include "kestrel/train/run_files.h"
#include "kestrel/train/schedule.h"
#include "kestrel/train/split_loader.h"
#include "kestrel/train/train_options.h"
#include "kestrel/train/tensorboard.h"
#include "kestrel/train/train_step.h"

namespace kestrel::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kStateFormat = "kestrel-train-state-1";
using Clock = std::chrono::steady_clock;

// Ctrl-C: the first one asks the loop to stop at the next safe point and save; a second one kills.
std::atomic<bool> g_stop_requested{false};
extern "C" void on_interrupt(int) {
  if (g_stop_requested.exchange(true)) std::_Exit(130);
}

std::string json_text(const nlohmann::json& j) { return j.dump(); }

// Upstream --freeze's layer selection, also used by --checkpoint: [n] is layers 0..n-1, a longer list
// is exactly those layer indices.
std::vector<int> selected_layers(const std::vector<int>& spec) {
  std::vector<int> layers;
  if (spec.size() == 1) {
    for (int i = 0; i < spec[0]; ++i) layers.push_back(i);
  } else {
    layers = spec;
  }
  return layers;
}

int freeze_layers(models::YoloModel& model, const std::vector<int>& freeze) {
  const std::vector<int> layers = selected_layers(freeze);
  int frozen = 0;
  for (auto& p : model.named_parameters()) {
    bool hit = false;
    for (int l : layers) hit = hit || p.key().rfind(cat("model.", l, "."), 0) == 0;
    p.value().set_requires_grad(!hit);
    frozen += hit;
  }
  return frozen;
}

void set_batchnorm_eval(torch::nn::Module& model) {
  for (const auto& m : model.modules())
    if (dynamic_cast<torch::nn::BatchNorm2dImpl*>(m.get())) m->eval();
}

std::string first_non_finite_parameter(torch::nn::Module& model) {
  for (const auto& p : model.named_parameters()) {
    if (!at::isfinite(p.value()).all().item<bool>()) return "parameter " + p.key();
    if (p.value().grad().defined() && !at::isfinite(p.value().grad()).all().item<bool>()) return "gradient of " + p.key();
  }
  return "";
}

// The per-iteration line of upstream's progress bar, redrawn in place on a terminal.
class Progress {
 public:
  Progress(bool quiet, int epochs) : quiet_(quiet), tty_(::isatty(STDOUT_FILENO)), epochs_(epochs) {}
  void header() const {
    if (quiet_) return;
    std::printf("\n%11s%11s%11s%11s%11s%11s%11s\n", "Epoch", "GPU_mem", "box_loss", "obj_loss", "cls_loss", "Instances",
                "Size");
  }
  bool due(bool last) {
    if (quiet_ || (!last && !tty_)) return false;
    const auto now = Clock::now();
    if (!last && now - last_draw_ < std::chrono::milliseconds(250)) return false;
    last_draw_ = now;
    return true;
  }
  void draw(int epoch, double mem_gb, const std::array<double, 3>& mloss, int64_t instances, int64_t size, int64_t i,
            int64_t nb, double images_per_s, bool last) const {
    char rate[32] = "";
    if (images_per_s > 0) std::snprintf(rate, sizeof rate, " %.1f img/s", images_per_s);
    std::printf("%s%11s%11s%11.4g%11.4g%11.4g%11lld%11lld: %3d%% %lld/%lld%s%s", tty_ ? "\r" : "",
                cat(epoch, "/", epochs_ - 1).c_str(), cat(std::round(mem_gb * 1000) / 1000, "G").c_str(), mloss[0],
                mloss[1], mloss[2], static_cast<long long>(instances), static_cast<long long>(size),
                static_cast<int>(100 * (i + 1) / std::max<int64_t>(nb, 1)), static_cast<long long>(i + 1),
                static_cast<long long>(nb), rate, last ? "\n" : "");
    std::fflush(stdout);
  }

 private:
  bool quiet_, tty_;
  int epochs_;
  Clock::time_point last_draw_{};
};

// Per-epoch values of a run that a resume must restore.
struct Progression {
  int epoch = 0;            // epoch in progress (or to start)
  int64_t next_batch = 0;   // first batch of `epoch` still to run
  int64_t last_opt_step = -1;
  double best_fitness = 0;
  int best_epoch = 0;
  std::array<double, 3> loss_sum{0, 0, 0};  // this epoch's summed loss items so far
  int64_t loss_count = 0;
  std::vector<double> maps;  // per-class mAP50-95 of the last validation (--image-weights); empty: none yet
};

// Upstream's maps: each class's mAP50-95, and the overall mAP50-95 for classes without labels in val.
std::vector<double> class_maps(const eval::ValidationResult& v, int nc) {
  std::vector<double> maps(static_cast<size_t>(nc), v.metrics.map);
  if (!v.metrics.classes.defined() || v.metrics.classes.numel() == 0) return maps;
  const at::Tensor classes = v.metrics.classes.to(at::kCPU), ap = v.metrics.ap.to(at::kCPU).mean(1);
  for (int64_t i = 0; i < classes.numel(); ++i) {
    const int64_t c = classes[i].item<int64_t>();
    if (c >= 0 && c < nc) maps[static_cast<size_t>(c)] = ap[i].item<double>();
  }
  return maps;
}

}  // namespace

double fitness(double map50, double map) { return 0.1 * map50 + 0.9 * map; }

TrainResult train(const TrainOptions& requested) {
  // ---- resume: the saved options replace the command line's, the run folder is reused ----------
  TrainOptions o = requested;
  SafetensorsContents resume_state;
  std::string save_dir;
  if (!requested.resume.empty()) {
    std::string state_path = requested.resume;
    if (fs::is_directory(state_path)) state_path = (fs::path(state_path) / "weights" / "last.state.safetensors").string();
    resume_state = load_safetensors(state_path);
    const auto& m = resume_state.metadata;
    if (!m.count("format") || m.at("format") != kStateFormat)
      fail(state_path, ": not a kestrel training state (pass a run's weights/last.state.safetensors)");
    o = options_from_json(nlohmann::json::parse(m.at("options")), state_path);
    o.resume = state_path;
    o.quiet = requested.quiet;
    o.interrupt_after = requested.interrupt_after;
    if (!requested.device.empty()) o.device = requested.device;
    save_dir = fs::path(state_path).parent_path().parent_path().string();
  }
  if (o.epochs < 1) fail("--epochs must be >= 1");
  if (o.batch_size < 1) fail("--batch-size must be >= 1");
  if (o.cfg.empty() && o.weights.empty()) fail("give --cfg (a model YAML or name such as yolov5s) or --weights");
  if (!o.cache.empty() && o.cache != "ram" && o.cache != "disk") fail("--cache ", o.cache, ": expected ram or disk");
  c10::Device device = parse_device(o.device);
  // Data parallel (torchrun or --nproc-per-node): one process per device, gradients averaged over ranks.
  const dist::DistEnv dist_env = dist::read_env();
  if (dist_env.world_size > 1 && device.is_cuda()) device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(dist_env.local_rank));
  const dist::DistContext dist_ctx = dist::init(dist_env, device, std::chrono::seconds(3600));
  if (dist_ctx.enabled && o.batch_size % dist_ctx.world_size != 0)
    fail("--batch-size ", o.batch_size, " must be a multiple of WORLD_SIZE ", dist_ctx.world_size);
  // Only rank 0 prints, validates and writes the run folder; the others write to a scratch folder.
  std::streambuf* const cout_buffer = std::cout.rdbuf();
  if (!dist_ctx.is_main()) {
    o.quiet = true;
    std::cout.rdbuf(nullptr);
  }

  // ---- hyperparameters, data, model --------------------------------------------------------------
  Hyperparameters hyp = o.hyp.empty() ? default_hyperparameters() : load_hyperparameters(o.hyp);
  if (!hyp.unknown_keys.empty()) {
    std::string keys;
    for (const auto& k : hyp.unknown_keys) keys += " " + k;
    std::cout << "warning: " << o.hyp << ": keys kestrel does not use:" << keys << "\n";
  }
  hyp.loss.label_smoothing = o.label_smoothing;
  const data::DatasetConfig data_cfg = data::load_dataset_config(o.data);
  std::vector<std::string> names = o.single_cls ? std::vector<std::string>{"item"} : data_cfg.names;
  const int nc = static_cast<int>(names.size());

  models::WeightsInfo info;
  std::shared_ptr<models::YoloModel> model;
  std::shared_ptr<models::YoloModel> ema_model;
  models::LoadedModel pretrained;
  if (!o.weights.empty()) pretrained = models::load_model_weights(o.weights);
  if (!o.cfg.empty()) {
    info = models::describe_config(o.cfg, names);
  } else {
    info = pretrained.info;
    info.names = names;
    info.extra.clear();
  }
  auto build = [&] {
    return models::build_model(models::parse_model_config(info.model_yaml, info.model_name + ".yaml"), nc);
  };
  torch::manual_seed(o.seed);  // weight initialisation
  model = build();
  if (pretrained.model) {
    // Upstream's intersect_dicts: same key and shape; anchors come from the config when one is given.
    models::NamedTensors transfer;
    const auto target = models::state_dict(*model);
    std::map<std::string, at::Tensor> shapes(target.begin(), target.end());
    for (auto& [key, t] : models::state_dict(*pretrained.model)) {
      const auto it = shapes.find(key);
      if (it == shapes.end() || it->second.sizes() != t.sizes()) continue;
      if (!o.cfg.empty() && key.find("anchor") != std::string::npos) continue;
      transfer.emplace_back(key, t);
    }
    models::load_state_dict(*model, transfer, /*strict=*/false, o.weights);
    std::cout << "Transferred " << transfer.size() << "/" << target.size() << " items from " << o.weights << "\n";
  }
  model->to(device);
  dist::broadcast_module(*model, dist_ctx);  // every rank starts from rank 0's weights
  if (o.sync_bn && dist_ctx.enabled)
    std::cout << "Using SyncBatchNorm() in " << dist::convert_sync_batch_norm(*model, dist_ctx) << " layers\n";
  else if (o.sync_bn)
    std::cout << "warning: --sync-bn has no effect in a single process\n";
  ema_model = build();
  ema_model->to(device);
  const int frozen = freeze_layers(*model, o.freeze);
  if (frozen) std::cout << "freezing " << frozen << " parameter tensors\n";
  if (!o.checkpoint.empty()) {
    model->set_checkpointed_layers(selected_layers(o.checkpoint));
    std::cout << "activation checkpointing of " << model->num_checkpointed_layers() << " layers\n";
  }

  const int stride = static_cast<int>(std::max<int64_t>(model->max_stride(), 32));
  if (o.img_size % stride != 0) fail("--img ", o.img_size, " must be a multiple of the model's stride ", stride);
  SplitLoader train_data = make_split_loader(data_cfg, "train", o, true, hyp, stride, static_cast<int>(data_cfg.names.size()),
                                       dist_ctx.rank, dist_ctx.world_size);
  SplitLoader val_data = make_split_loader(data_cfg, "val", o, false, hyp, stride, static_cast<int>(data_cfg.names.size()));
  const int64_t nb = static_cast<int64_t>(train_data.loader->num_batches());
  if (hyp.augment.paste_in > 0) {
    // YOLOv7's paste-in acts only on polygon labels (with boxes only it does nothing upstream either).
    bool polygons = false;
    for (const auto& r : train_data.dataset->records())
      for (const auto& row : r.rows) polygons = polygons || !row.polygon.empty();
    if (polygons)
      std::cout << "warning: paste_in " << hyp.augment.paste_in << ": YOLOv7's paste-in augmentation is not implemented "
                   "by kestrel yet and is skipped (these labels have polygons, so upstream would use it)\n";
  }

  if (!o.noautoanchor && o.resume.empty()) {
    // AutoAnchor (a resumed run keeps its saved anchors): rank 0 searches, every rank receives the result.
    if (dist_ctx.is_main()) {
      AutoAnchorOptions aa;
      aa.anchor_t = hyp.loss.anchor_t;
      aa.seed = o.seed;
      std::cout << check_anchors(model->head(), train_data.dataset->records(), o.img_size, aa).report;
    }
    std::vector<at::Tensor> head_buffers;
    for (const auto& b : model->head().named_buffers()) head_buffers.push_back(b.value());
    dist::broadcast_tensors(head_buffers, dist_ctx);
  }

  // ---- optimiser, schedule, EMA, scaler, loss ----------------------------------------------------------
  ScheduleOptions sched;
  sched.lr0 = hyp.lr0;
  sched.lrf = hyp.lrf;
  sched.momentum = hyp.momentum;
  sched.warmup_epochs = hyp.warmup_epochs;
  sched.warmup_momentum = hyp.warmup_momentum;
  sched.warmup_bias_lr = hyp.warmup_bias_lr;
  // YOLOv5: linear unless --cos-lr; YOLOv7's train.py: cosine (one_cycle) unless --linear-lr.
  sched.cos_lr = o.cos_lr || (hyp.yolov7_recipe && !o.linear_lr);
  sched.epochs = o.epochs;
  sched.batch_size = o.batch_size;
  sched.min_warmup_iterations = o.min_warmup_iterations >= 0 ? o.min_warmup_iterations : (hyp.yolov7_recipe ? 1000 : 100);
  OptimizerOptions opt_options;
  opt_options.kind = parse_optimizer_kind(o.optimizer);
  opt_options.weight_decay = scaled_weight_decay(sched, hyp.weight_decay);
  const ParamGroups groups = split_parameters(*model);
  Optimizer optimizer(groups, opt_options);

  std::string amp = o.amp;
  if (amp == "auto") amp = device.is_cuda() ? "fp16" : "off";
  if (amp != "fp16" && amp != "bf16" && amp != "off") fail("--amp ", o.amp, ": expected auto, fp16, bf16 or off");
  const bool autocast_on = amp != "off";
  const at::ScalarType amp_dtype = amp == "bf16" ? at::kBFloat16 : at::kHalf;
  GradScalerOptions scaler_options;
  scaler_options.enabled = amp == "fp16";
  scaler_options.init_scale = o.loss_scale;
  GradScaler scaler(scaler_options, device);

  Progression run;
  int64_t ema_updates = 0;
  models::NamedTensors ema_t;  // the saved average, loaded once the EMA exists
  if (!o.resume.empty()) {
    const auto& m = resume_state.metadata;
    models::NamedTensors model_t, opt_t, scaler_t;
    for (auto& [key, t] : resume_state.tensors) {
      if (key.rfind("model/", 0) == 0) model_t.emplace_back(key.substr(6), t);
      else if (key.rfind("ema/", 0) == 0) ema_t.emplace_back(key.substr(4), t);
      else if (key.rfind("optimizer/", 0) == 0) opt_t.emplace_back(key.substr(10), t);
      else if (key.rfind("scaler/", 0) == 0) scaler_t.emplace_back(key.substr(7), t);
    }
    models::load_state_dict(*model, model_t, true, o.resume);
    optimizer.load_state(opt_t, o.resume);
    if (scaler.enabled() && !scaler_t.empty()) scaler.load_state(scaler_t, o.resume);
    try {
      const nlohmann::json p = nlohmann::json::parse(m.at("progress"));
      run.epoch = p.at("epoch");
      run.next_batch = p.at("next_batch");
      run.last_opt_step = p.at("last_opt_step");
      run.best_fitness = p.at("best_fitness");
      run.best_epoch = p.at("best_epoch");
      run.loss_sum = p.at("loss_sum").get<std::array<double, 3>>();
      run.loss_count = p.at("loss_count");
      ema_updates = p.at("ema_updates");
      run.maps = p.value("maps", std::vector<double>{});
      // Another number of ranks: rank r takes every W-th sample of the epoch order, so global batch i
      // (the total --batch-size, unchanged) holds the same samples for any W, and next_batch keeps
      // its meaning. Iteration numbers follow the new batches per epoch; a run stops only right
      // after an optimiser step, so the last one was the batch before next_batch.
      const int saved_world_size = p.value("world_size", 1);
      if (saved_world_size != dist_ctx.world_size) {
        run.last_opt_step = nb * run.epoch + run.next_batch - 1;
        std::cout << "Resuming with WORLD_SIZE " << dist_ctx.world_size << " a run saved with WORLD_SIZE "
                  << saved_world_size << "\n";
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      fail(o.resume, ": malformed training progress (", e.what(), ")");
    }
    if (run.epoch >= o.epochs) fail(o.resume, ": this run already finished its ", o.epochs, " epochs; nothing to resume");
    std::cout << "Resuming " << save_dir << " from epoch " << run.epoch << ", batch " << run.next_batch << "\n";
  } else if (dist_ctx.is_main()) {
    save_dir = make_run_dir(o.project, o.name, o.exist_ok);
  }
  const std::string run_dir = save_dir;
  if (!dist_ctx.is_main()) {
    save_dir = (fs::temp_directory_path() / cat("kestrel-rank", dist_ctx.rank, "-", ::getpid())).string();
    fs::create_directories(save_dir);
  }
  // Training loss: YOLOv7's OTA assignment when the recipe asks for it (loss_ota: 1), else YOLOv5's.
  // Validation always reports the plain loss, as upstream's test.py/val.py. Built after AutoAnchor and
  // the resume: the losses copy the head's anchors.
  const loss::YoloLoss compute_loss(model->head(), hyp.loss, o.img_size);
  LossFn train_loss_fn = make_loss_fn(model->head(), hyp.loss, o.img_size, hyp.loss_ota);
  // Upstream: the loss x WORLD_SIZE under DDP (gradients are averaged), and x 4 with --quad.
  const double loss_factor = static_cast<double>(dist_ctx.world_size) * (o.quad ? 4.0 : 1.0);
  if (loss_factor != 1.0) {
    train_loss_fn = [inner = train_loss_fn, loss_factor](const std::vector<at::Tensor>& l, const at::Tensor& t,
                                                         const at::Tensor& m) {
      loss::YoloLoss::Result r = inner(l, t, m);
      r.total = r.total * loss_factor;
      return r;
    };
  }
  ModelEma ema(ema_model, *model, EmaOptions{}, ema_updates);
  if (!o.resume.empty()) models::load_state_dict(ema.model(), ema_t, true, o.resume);
  StepOptions step_options;
  step_options.autocast = autocast_on;
  step_options.autocast_dtype = amp_dtype;
  step_options.max_grad_norm = o.max_grad_norm;
  TrainStep step(*model, train_loss_fn, optimizer, scaler, &ema, step_options);
  std::vector<at::Tensor> trainable;
  for (const auto& p : model->parameters())
    if (p.requires_grad()) trainable.push_back(p);
  dist::GradientReducer reducer(trainable, dist_ctx);  // all-reduces gradient buckets during backward

  const fs::path weights_dir = fs::path(save_dir) / "weights";
  fs::create_directories(weights_dir);
  write_text_atomic((fs::path(save_dir) / "hyp.yaml").string(), hyperparameters_yaml(hyp));
  write_text_atomic((fs::path(save_dir) / "opt.yaml").string(), options_yaml(o));
  // Upstream's labels.jpg: the training split's labels, once per run (a resumed run has it already).
  if (o.resume.empty() && dist_ctx.is_main())
    eval::plot_labels(eval::label_rows(train_data.dataset->records()), names, (fs::path(save_dir) / "labels.jpg").string());
  const ResultsCsv results((fs::path(save_dir) / "results.csv").string());
  TensorBoardWriter tensorboard(save_dir);  // `tensorboard --logdir runs/train` (upstream logs there too)
  const std::string last_path = (weights_dir / "last.safetensors").string();
  const std::string best_path = (weights_dir / "best.safetensors").string();
  const std::string state_path = (weights_dir / "last.state.safetensors").string();

  auto save_checkpoint = [&](const Progression& p, bool best, int epoch_done) {
    models::WeightsInfo w = info;
    w.extra = {{"epoch", std::to_string(epoch_done)}, {"best_fitness", cat(p.best_fitness)}};
    models::save_model_weights(last_path, ema.model(), w);
    if (best) models::save_model_weights(best_path, ema.model(), w);
    if (o.save_period > 0 && epoch_done >= 0 && (epoch_done + 1) % o.save_period == 0)
      models::save_model_weights((weights_dir / cat("epoch", epoch_done, ".safetensors")).string(), ema.model(), w);
    models::NamedTensors state;
    for (auto& [k, t] : models::state_dict(*model)) state.emplace_back("model/" + k, t);
    for (auto& [k, t] : models::state_dict(ema.model())) state.emplace_back("ema/" + k, t);
    for (auto& [k, t] : optimizer.state()) state.emplace_back("optimizer/" + k, t);
    if (scaler.enabled())
      for (auto& [k, t] : scaler.state()) state.emplace_back("scaler/" + k, t);
    const nlohmann::json progress = {{"epoch", p.epoch},          {"next_batch", p.next_batch},
                                     {"last_opt_step", p.last_opt_step}, {"best_fitness", p.best_fitness},
                                     {"best_epoch", p.best_epoch}, {"loss_sum", p.loss_sum},
                                     {"loss_count", p.loss_count}, {"ema_updates", ema.updates()}, {"maps", p.maps},
                                     {"world_size", dist_ctx.world_size}};
    save_safetensors(state_path, state,
                     {{"format", kStateFormat}, {"options", json_text(options_json(o))}, {"progress", progress.dump()}});
  };

  // ---- the loop -------------------------------------------------------------------------------------
  std::cout << "kestrel train: " << info.model_name << " (" << nc << " classes) on " << device << ", "
            << optimizer_name(opt_options.kind) << (hyp.loss_ota ? ", OTA loss" : "") << ", " << nb << " batches of " << o.batch_size << " per epoch, amp "
            << amp << ", results to " << save_dir << "\n";
  g_stop_requested = false;
  const auto previous_handler = std::signal(SIGINT, on_interrupt);
  Progress progress(o.quiet, o.epochs);
  TrainResult result;
  result.save_dir = save_dir;
  int64_t batches_run = 0;
  int64_t dist_stop_checks = 0;  // optimiser steps of this process (ranks agree on Ctrl-C every 8th)
  eval::ValidationResult last_val;
  bool stop = false;
  const auto val_loss = [&](const std::vector<at::Tensor>& levels, const at::Tensor& t, const at::Tensor& m) {
    return compute_loss(levels, t, m).items;
  };

  for (; run.epoch < o.epochs && !stop; ++run.epoch, run.next_batch = 0) {
    const int epoch = run.epoch;
    model->train();
    if (o.freeze_bn) set_batchnorm_eval(*model);
    optimizer.zero_grad();
    at::Tensor loss_sum = at::tensor(std::vector<double>(run.loss_sum.begin(), run.loss_sum.end()), at::kFloat).to(device);
    if (o.image_weights) {
      // Rank 0 validated: every rank samples with its per-class mAPs (one list: the ranks share it).
      at::Tensor maps = at::zeros({nc}, at::TensorOptions().dtype(at::kDouble).device(device));
      if (run.maps.size() == static_cast<size_t>(nc)) maps.copy_(at::tensor(run.maps, at::kDouble));
      dist::broadcast_tensors({maps}, dist_ctx);
      const at::Tensor m = maps.to(at::kCPU);
      run.maps.assign(m.data_ptr<double>(), m.data_ptr<double>() + nc);
      train_data.loader->set_sample_weights(train::image_sampling_weights(train_data.dataset->records(), nc, run.maps));
    }
    train_data.loader->start_epoch(epoch, run.next_batch);
    progress.header();
    // Logged per epoch: the rates of its last iteration (also when a resumed epoch has no batch left).
    std::array<double, 3> lr = step_settings(sched, epoch, nb * (epoch + 1) - 1, nb).lr;
    int64_t timed_images = 0;
    Clock::time_point timing_start{};
    bool interrupted = false;
    // The next batch's copy to the device (a side stream on CUDA) overlaps this batch's step.
    data::DevicePrefetcher prefetcher(*train_data.loader, device, /*channels_last=*/false, /*trim_multiple=*/32);
    for (int64_t i = run.next_batch; i < nb; ++i) {
      std::optional<data::DeviceBatch> batch = prefetcher.next();
      if (!batch) break;
      const int64_t ni = i + nb * epoch;  // iterations since the start of training
      const StepSettings s = step_settings(sched, epoch, ni, nb);
      lr = s.lr;
      const data::DeviceBatch& in = *batch;
      at::Tensor images = in.images;
      if (o.multi_scale) {
        // Upstream: a random size in [0.5, 1.5] x img, a multiple of the stride, per batch (seeded here by batch).
        std::mt19937 rng(static_cast<uint32_t>(data::sample_seed(o.seed, epoch, static_cast<uint64_t>(i) + (1ull << 40))));
        const int lo = static_cast<int>(o.img_size * 0.5), hi = static_cast<int>(o.img_size * 1.5) + stride;
        const int size = std::uniform_int_distribution<int>(lo, hi - 1)(rng) / stride * stride;
        const double sf = static_cast<double>(size) / std::max(images.size(2), images.size(3));
        if (sf != 1) {
          const int64_t h = static_cast<int64_t>(std::ceil(images.size(2) * sf / stride) * stride);
          const int64_t w = static_cast<int64_t>(std::ceil(images.size(3) * sf / stride) * stride);
          images = at::upsample_bilinear2d(images, {h, w}, false);
        }
      }

      // Optimiser step every `accumulate` batches (upstream: ni - last_opt_step >= accumulate); only
      // the backward before it communicates.
      const bool optimizer_step_due = ni - run.last_opt_step >= s.accumulate;
      reducer.prepare_backward(optimizer_step_due);
      const loss::YoloLoss::Result step_loss = step.forward_backward(images, in.targets, in.target_mask);
      if (o.check_nans && !at::isfinite(step_loss.total).item<bool>()) {
        const at::Tensor items = step_loss.items.to(at::kCPU);
        std::string files;
        for (size_t k = 0; k < batch->meta.size() && k < 4; ++k)
          files += "\n  " + train_data.dataset->records()[batch->meta[k].index].image;
        fail("--check-nans: non-finite loss at epoch ", epoch, ", batch ", i, " (iteration ", ni, "): box ",
             items[0].item<double>(), ", obj ", items[1].item<double>(), ", cls ", items[2].item<double>(),
             "; first non-finite model value: ", first_non_finite_parameter(*model), "; batch images:", files);
      }
      if (optimizer_step_due) {
        reducer.reduce();  // waits for the buckets started in backward; no-op in one process
        step.optimizer_step(s);
        run.last_opt_step = ni;
        // Ctrl-C is honoured here, where no gradient is half accumulated. Several ranks agree on it
        // every 8 optimiser steps (a collective: all ranks stop at the same step).
        bool stop_now = g_stop_requested;
        if (dist_ctx.enabled) stop_now = ++dist_stop_checks % 8 == 0 && dist::any_rank(stop_now, dist_ctx);
        interrupted = stop_now || (o.interrupt_after >= 0 && batches_run + 1 >= o.interrupt_after);
      }
      loss_sum.add_(step_loss.items.to(at::kFloat));
      ++run.loss_count;
      ++batches_run;
      if (i - run.next_batch == 2) timing_start = Clock::now();  // images/s excludes the first steps
      if (i - run.next_batch > 2) timed_images += images.size(0);
      const bool last = i + 1 == nb || interrupted;
      if (progress.due(last)) {
        const at::Tensor mean = (loss_sum / static_cast<double>(run.loss_count)).to(at::kCPU);
        const double secs = std::chrono::duration<double>(Clock::now() - timing_start).count();
        progress.draw(epoch, reserved_memory_gb(device), {mean[0].item<double>(), mean[1].item<double>(), mean[2].item<double>()},
                      batch->boxes, images.size(3), i, nb, timed_images > 0 && secs > 0 ? timed_images / secs : 0, last);
      }
      if (interrupted) {
        const at::Tensor sums = loss_sum.to(at::kCPU).to(at::kDouble);
        for (int k = 0; k < 3; ++k) run.loss_sum[k] = sums[k].item<double>();
        run.next_batch = i + 1;
        break;
      }
    }
    const double timed_seconds = std::chrono::duration<double>(Clock::now() - timing_start).count();
    const double epoch_images_per_second = timed_images > 0 ? timed_images / timed_seconds : 0.0;
    if (interrupted) {
      save_checkpoint(run, false, epoch - 1);
      result.interrupted = true;
      std::cout << "\nInterrupted: saved " << state_path << "; continue with kestrel train --resume " << save_dir << "\n";
      break;
    }
    if (scaler.enabled() && scaler.skipped_steps() > 0)
      std::cout << "  loss scale " << scaler.current_scale() << ", " << scaler.skipped_steps()
                << " optimiser steps skipped so far (inf/NaN gradients)\n";

    // ---- end of epoch: validate the EMA, log, save --------------------------------------------------
    const at::Tensor mloss = (loss_sum / static_cast<double>(std::max<int64_t>(run.loss_count, 1))).to(at::kCPU).to(at::kDouble);
    const std::array<double, 3> train_loss{mloss[0].item<double>(), mloss[1].item<double>(), mloss[2].item<double>()};
    result.epoch_losses.push_back(train_loss[0] + train_loss[1] + train_loss[2]);
    const bool final_epoch = epoch + 1 == o.epochs;
    if ((!o.noval || final_epoch) && dist_ctx.is_main()) {
      eval::ValidationOptions v;
      v.single_cls = o.single_cls;
      v.half = amp == "fp16";
      last_val = eval::validate(ema.model(), *val_data.loader, *val_data.dataset, device, nc, v, val_loss);
      if (!o.quiet) std::cout << eval::format_validation_table(last_val, names, false);
      run.maps = class_maps(last_val, nc);
    }
    const double fi = fitness(last_val.metrics.map50, last_val.metrics.map);
    const bool best = fi >= run.best_fitness;  // upstream EarlyStopping: >= moves the best epoch
    if (best) run.best_fitness = fi, run.best_epoch = epoch;
    stop = o.patience > 0 && epoch - run.best_epoch >= o.patience;
    stop = dist::any_rank(stop, dist_ctx);  // rank 0 decides (only it validates); all ranks stop together
    if (stop) std::cout << "Stopping early: no improvement in the last " << o.patience << " epochs (best epoch " << run.best_epoch << ")\n";
    const std::vector<double> row = {train_loss[0], train_loss[1], train_loss[2], last_val.metrics.mp,
                                     last_val.metrics.mr, last_val.metrics.map50, last_val.metrics.map, last_val.loss[0],
                                     last_val.loss[1], last_val.loss[2], lr[0], lr[1], lr[2]};
    results.append(epoch, row);
    for (size_t k = 0; k < row.size(); ++k) tensorboard.add_scalar(ResultsCsv::columns()[k + 1], row[k], epoch);
    if (epoch_images_per_second > 0) tensorboard.add_scalar("x/images_per_second", epoch_images_per_second, epoch);
    tensorboard.flush();
    Progression done = run;
    done.epoch = epoch + 1;
    done.next_batch = 0;
    done.loss_sum = {0, 0, 0};
    done.loss_count = 0;
    if (!o.nosave || final_epoch || stop) save_checkpoint(done, best, epoch);
    run.loss_sum = {0, 0, 0};
    run.loss_count = 0;
    result.epochs_completed = epoch + 1;
  }
  std::signal(SIGINT, previous_handler);

  result.best_fitness = run.best_fitness;
  result.final_map50 = last_val.metrics.map50;
  result.final_map = last_val.metrics.map;
  if (fs::exists(last_path)) result.last = last_path;
  if (fs::exists(best_path)) result.best = best_path;
  if (!result.interrupted && !result.best.empty() && dist_ctx.is_main()) {
    // Upstream ends by validating best.pt with the per-class table.
    models::LoadedModel best = models::load_model_weights(result.best);
    best.model->to(device);
    eval::ValidationOptions v;
    v.single_cls = o.single_cls;
    eval::ConfusionMatrix confusion(nc);
    v.confusion = &confusion;
    v.plot_batches = 3;  // val.py's val_batch0..2_labels.jpg / _pred.jpg
    v.plot_dir = save_dir;
    v.names = names;
    const eval::ValidationResult r = eval::validate(*best.model, *val_data.loader, *val_data.dataset, device, nc, v);
    std::cout << "\nValidating " << result.best << "...\n" << eval::format_validation_table(r, names, true);
    // Upstream's end-of-training charts (val.py with plots=True on best.pt, and plot_results).
    const fs::path dir(save_dir);
    eval::plot_confusion_matrix(confusion, names, (dir / "confusion_matrix.png").string());
    eval::plot_pr_curve(r.metrics, names, (dir / "PR_curve.png").string());
    eval::plot_confidence_curve(r.metrics, eval::CurveKind::f1, names, (dir / "F1_curve.png").string());
    eval::plot_confidence_curve(r.metrics, eval::CurveKind::precision, names, (dir / "P_curve.png").string());
    eval::plot_confidence_curve(r.metrics, eval::CurveKind::recall, names, (dir / "R_curve.png").string());
  }
  if (!result.interrupted && fs::exists(results.path()) && dist_ctx.is_main())
    eval::plot_results(results.path(), (fs::path(save_dir) / "results.png").string());
  std::cout << "\n" << result.epochs_completed << " epochs completed. Results saved to " << save_dir << "\n";
  if (!dist_ctx.is_main()) {
    std::cout.rdbuf(cout_buffer);
    std::error_code ignored;
    fs::remove_all(save_dir, ignored);
    result.save_dir = run_dir;  // the real run folder (empty for a new run: rank 0 named it)
    result.last.clear();
    result.best.clear();
  }
  dist::barrier(dist_ctx);
  return result;
}

}  // namespace kestrel::train
