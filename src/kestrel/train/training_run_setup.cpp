// TrainingRun's set-up phases, in the order trainer.cpp calls them: options, ranks, recipe, model,
// data, autoanchor, optimiser, resume state, run folder, step, run files (training_run.h).
#include "kestrel/train/training_run.h"

#include <unistd.h>

#include <cstdio>
#include <exception>
#include <iostream>
#include <map>
#include <regex>

#include <torch/csrc/autograd/grad_mode.h>
#include <torch/cuda.h>

#include "kestrel/core/atomic_file.h"
#include "kestrel/core/device.h"
#include "kestrel/core/error.h"
#include "kestrel/core/python_repr.h"
#include "kestrel/data/image_files.h"
#include "kestrel/dist/sync_batch_norm.h"
#include "kestrel/eval/label_plots.h"
#include "kestrel/eval/validator.h"
#include "kestrel/models/common.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/model_family.h"
#include "kestrel/train/autoanchor.h"
#include "kestrel/train/autobatch.h"
#include "kestrel/train/freeze.h"
#include "kestrel/train/param_groups.h"
#include "kestrel/train/train_options.h"

namespace kestrel::train {
namespace fs = std::filesystem;

namespace {
// --amp: auto is fp16 on CUDA and off (fp32) on the CPU.
std::string resolve_amp(const std::string& amp, const c10::Device& device) {
  const std::string resolved = amp == "auto" ? (device.is_cuda() ? "fp16" : "off") : amp;
  if (resolved != "fp16" && resolved != "bf16" && resolved != "off") fail("--amp ", amp, ": expected auto, fp16, bf16 or off");
  return resolved;
}
}  // namespace

// --resume: the saved options replace the command line's (but for the few that only steer this
// process), and the run folder is reused.
void TrainingRun::read_options(const TrainOptions& requested) {
  o = requested;
  if (!requested.resume.empty()) {
    const std::string path = training_state_path(requested.resume);
    resume_state = read_training_state(path);
    o = resume_state.options;
    o.resume = path;
    o.quiet = requested.quiet;
    o.interrupt_after = requested.interrupt_after;
    if (!requested.device.empty()) o.device = requested.device;
    // A --cuda-graph run resumed on the CPU (--device cpu) trains on without graphs.
    if (o.cuda_graph && !requested.device.empty() && parse_device(requested.device).is_cpu()) {
      std::cerr << "WARNING: " << path << " was trained with --cuda-graph; resuming on the CPU without it\n";
      o.cuda_graph = false;
    }
    // The run folder is the one whose weights/ holds the file (absolute: a relative file name would have
    // no folder above it); a state file elsewhere does not say where its run is.
    const fs::path weights_dir = fs::absolute(path).lexically_normal().parent_path();
    if (weights_dir.filename() != "weights")
      fail(path, ": a state file outside a run's weights/ folder; resume with the run folder or its weights/last.state.safetensors");
    save_dir = weights_dir.parent_path().string();
  }
  if (o.epochs < 1) fail("--epochs must be >= 1");
  if (o.batch_size < 1 && o.batch_size != -1) fail("--batch-size must be >= 1 (or -1: AutoBatch)");
  if (o.cfg.empty() && o.weights.empty()) fail("give --cfg (a model YAML or name such as yolov5s) or --weights");
  if (!o.cache.empty() && o.cache != "ram" && o.cache != "disk" && o.cache != "val")
    fail("--cache ", o.cache, ": expected ram, disk or val");
}

// Data parallel (torchrun or --nproc-per-node): one process per device, gradients averaged over ranks.
void TrainingRun::join_ranks() {
  const dist::DistEnv dist_env = dist::read_env();
  // Upstream's data-parallel command names the devices, --device 0,1 (or none): rank r takes entry
  // LOCAL_RANK of the list (one named GPU: a list of one), and without a GPU named cuda:LOCAL_RANK.
  const std::string rank_device = dist_env.world_size > 1 ? device_of_rank(o.device, dist_env.local_rank) : o.device;
  const bool listed = o.device.find(',') != std::string::npos;  // every entry of a list names its device
  const bool gpu_named = listed || names_one_gpu(rank_device);
  device = parse_device(rank_device);
  make_current(device);
  if (dist_env.world_size > 1 && device.is_cuda() && !gpu_named) {
    const int count = static_cast<int>(torch::cuda::device_count());
    if (dist_env.local_rank >= count)
      fail("distributed: local rank ", dist_env.local_rank, " would train on cuda:", dist_env.local_rank, ", but this machine "
           "shows ", count, " CUDA device(s): start at most ", count, " processes per node (one GPU each), or name the "
           "devices with --device");
    device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(dist_env.local_rank));
  }
  // cuDNN autotuning: the training shapes repeat (YOLOv7's train.py turns it on too; YOLOv5 v7.0 leaves it off).
  if (device.is_cuda()) set_cudnn_benchmark(true);
  if (dist_env.world_size > 1 && o.batch_size == -1) fail(kAutoBatchNotDataParallel);
  dist_ctx = dist::init(dist_env, device, std::chrono::seconds(3600));
  if (dist_ctx.enabled && o.batch_size % dist_ctx.world_size != 0)
    fail("--batch-size ", o.batch_size, " must be a multiple of WORLD_SIZE ", dist_ctx.world_size);
  // Only rank 0 prints, validates and writes the run folder; the others write to a scratch folder.
  cout_buffer = std::cout.rdbuf();
  if (!dist_ctx.is_main()) {
    o.quiet = true;
    std::cout.rdbuf(nullptr);
  }
}

void TrainingRun::load_recipe() {
  // A resumed run trains on with the hyperparameters it started with, its own hyp.yaml (upstream: the values
  // saved in opt.yaml), not with what the --hyp file holds now, if it still exists.
  if (resuming()) {
    const std::string own = (fs::path(save_dir) / "hyp.yaml").string();
    if (fs::exists(own)) o.hyp = own;
    else std::cout << "warning: " << own << " is missing: resuming with " << (o.hyp.empty() ? "the default hyperparameters" : o.hyp) << "\n";
  }
  hyp = o.hyp.empty() ? default_hyperparameters() : load_hyperparameters(o.hyp);
  // train.py's line (values as Python's str of the file's floats; an integer written without a point shows as
  // 3.0 where upstream shows 3), with the keys the file lacks after its own.
  std::string listed;
  for (const auto& [key, value] : hyp.values) listed += cat(listed.empty() ? "" : ", ", key, "=", python_float_repr(value));
  std::cout << "hyperparameters: " << listed << "\n";
  if (o.hyp_warnings) print_hyperparameter_warnings(hyp, o.hyp, std::cout);
  // torch's SGD refuses Nesterov without momentum when upstream builds it ("Nesterov momentum requires a
  // momentum and zero dampening"); the fused kernel would fail only once the warm-up reached it.
  if (hyp.momentum == 0 && parse_optimizer_kind(o.optimizer) == OptimizerKind::sgd)
    fail(o.hyp, ": 'momentum: 0': SGD's Nesterov momentum needs a momentum above 0 (upstream stops there too); give "
         "one, or --optimizer Adam");
  hyp.loss.label_smoothing = o.label_smoothing;
  data_cfg = data::load_dataset_config(o.data);
  // Upstream keeps a one-class dataset's own name.
  names = o.single_cls && data_cfg.names.size() != 1 ? std::vector<std::string>{"item"} : data_cfg.names;
  nc = static_cast<int>(names.size());
}

void TrainingRun::build_model() {
  models::LoadedModel pretrained;
  // A resumed run's weights and architecture come from its state file (states saved before it carried the
  // architecture: from the run's own last.safetensors, written beside it), not from --cfg or --weights, which
  // may have moved or changed since (upstream's resume clears opt.cfg and rebuilds from the checkpoint too):
  // only a fresh run reads its config file and transfers pretrained weights.
  const std::string last_weights = (fs::path(save_dir) / "weights" / "last.safetensors").string();
  if (resuming() && resume_state.model_yaml.empty()) pretrained = models::load_model_weights(last_weights);
  else if (!resuming() && !o.weights.empty()) pretrained = models::load_model_weights(o.weights);
  if (resuming() && !resume_state.model_yaml.empty()) {
    info.model_yaml = resume_state.model_yaml;
    info.model_name = resume_state.model_name;
    info.names = names;
  } else if (!o.cfg.empty() && !resuming()) {
    info = models::describe_config(o.cfg, names);
  } else {
    info = pretrained.info;
    info.names = names;
    info.extra.clear();
  }
  // Errors in the config name the file given with --cfg (the weights' own config: its name).
  const std::string config_source = o.cfg.empty() || resuming() ? info.model_name + ".yaml" : models::resolve_model_config_path(o.cfg);
  // The config a state or weights file carries: its errors name that file too (config_source is no file there).
  const std::string carrier = !resuming()                      ? (o.cfg.empty() ? o.weights : "")
                              : !resume_state.model_yaml.empty() ? o.resume
                                                                 : last_weights;
  auto build = [&] {
    try {
      return models::build_model(models::parse_model_config(info.model_yaml, config_source), nc);
    } catch (const Error& e) {
      if (carrier.empty()) throw;
      fail(carrier, ": the model config it carries: ", e.what());
    }
  };
  // Weight initialisation draws from the seeded generator: the model first, then the EMA's copy.
  torch::manual_seed(o.seed);
  model = build();
  if (model->head().reversed_anchor_order()) std::cout << "AutoAnchor: Reversing anchor order\n";  // as Model() says it
  if (model->in_channels() != 3)  // upstream fails at the first step, in the first convolution
    fail(config_source, ": 'ch: ", model->in_channels(), "': the images kestrel trains on have 3 channels (RGB)");
  if (o.v3_metric) (void)eval::metric_style_for(*model, o.v5_metric, o.v3_metric);  // refused now, not at epoch 1's end
  if (!resuming() && info.model_name.rfind("yolov3", 0) == 0 && !models::is_yolov7_family(*model) && !hyp.yolov7_recipe)
    std::cout << "note: " << info.model_name << " trains with YOLOv5 v7.0's recipe and metric, as YOLOv5 runs its "
              << "yolov3 configs; ultralytics/yolov3 v9.6.0's differ (its hyp.scratch.yaml, cosine schedule, 300 "
              << "epochs, no clipping: the first lines of configs/hyps/hyp.scratch.yaml give the flags; --v3-metric "
              << "validates as its val.py; docs/parity.md lists what still differs)\n";
  if (o.hyp.empty() && !resuming() && models::is_yolov7_family(*model))
    std::cout << "note: " << info.model_name << " trains with kestrel's default recipe, YOLOv5's hyp.scratch-low; YOLOv7's "
              << "train.py defaults to --hyp hyp.scratch.p5.yaml (OTA loss, cosine schedule, 300 epochs): give "
              << "--hyp configs/hyps/hyp.scratch.p5.yaml (or .tiny / .p6) for YOLOv7's recipe\n";
  if (pretrained.model && !resuming()) transfer_pretrained(pretrained);
  model->to(device);
  dist::broadcast_module(*model, dist_ctx);  // every rank starts from rank 0's weights
  if (o.sync_bn && dist_ctx.enabled)
    std::cout << "Using SyncBatchNorm() in " << dist::convert_sync_batch_norm(*model, dist_ctx) << " layers\n";
  else if (o.sync_bn)
    std::cout << "warning: --sync-bn has no effect in a single process\n";
  ema_model = build();
  ema_model->to(device);
  if (o.fused_bn_silu) {
    std::cout << "fused batch norm + SiLU in " << models::set_fused_batch_norm_silu(*model, true) << " Conv blocks\n";
    if (device.is_cuda() && !o.channels_last)
      std::cout << "warning: --fused-bn-silu runs only on channels-last activations on CUDA: add --channels-last\n";
  }
  if (o.channels_last) {  // after the broadcast (collectives take dense tensors); the EMA too, so that its
    to_channels_last(*model);  // multi-tensor update sees one layout and keeps its fast path
    to_channels_last(*ema_model);
  }
  for (const std::string& name : freeze_layers(*model, o.freeze))
    if (dist_ctx.is_main()) std::cout << "freezing " << name << "\n";  // train.py's line per frozen parameter
  if (!o.checkpoint.empty()) {
    std::vector<int> layers;
    try {
      layers = selected_layers(o.checkpoint);
    } catch (const Error& e) {
      fail("--checkpoint: ", e.what());
    }
    model->set_checkpointed_layers(layers);
    std::cout << "activation checkpointing of " << model->num_checkpointed_layers() << " layers\n";
  }
}

// Upstream's intersect_dicts: same key and shape; anchors come from the config when one is given.
void TrainingRun::transfer_pretrained(const models::LoadedModel& pretrained) {
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
  if (transfer.size() * 2 < target.size())  // upstream says no more than the count
    std::cout << "WARNING: most of the model starts untrained: " << o.weights << " is a " << pretrained.info.model_name
              << " model, matching " << transfer.size() << " of this model's " << target.size() << " tensors by name and shape\n";
}

void TrainingRun::build_data() {
  stride = static_cast<int>(std::max<int64_t>(model->max_stride(), 32));
  // train.py's check_img_size: a size that is not a multiple of the stride is rounded up to one, with a
  // warning (YOLOv5's training size at least two strides; YOLOv7 rounds both of its sizes, no floor).
  const bool yolov7 = models::is_yolov7_family(*model);
  auto check_img_size = [&](int& size, int floor) {
    if (size < 1) fail("--img ", size, ": must be positive");
    const int rounded = std::max((size + stride - 1) / stride * stride, floor);
    if (rounded != size)
      std::cout << "WARNING: --img-size " << size << " must be multiple of max stride " << stride << ", updating to "
                << rounded << "\n";
    size = rounded;
  };
  check_img_size(o.img_size, yolov7 ? 0 : 2 * stride);
  // --multi-scale's sizes start at int(img / 2), rounded down to a stride multiple: 0 below one stride (a
  // YOLOv7 model at --img 32, whose train.py fails there at the first resize; YOLOv5's floor avoids it).
  if (o.multi_scale && static_cast<int>(o.img_size * 0.5) < stride)
    fail("--multi-scale at --img ", o.img_size, ": its smallest sizes (", static_cast<int>(o.img_size * 0.5),
         " px) round down to 0 at the model's stride ", stride, "; use --img ", 2 * stride, " or more");
  if (o.img_size_test > 0) check_img_size(o.img_size_test, 0);
  const int val_img_size = o.img_size_test > 0 ? o.img_size_test : o.img_size;
  if (o.batch_size == -1) {  // AutoBatch (one process: join_ranks refuses it for several); saved resolved
    AutoBatchOptions autobatch_options;
    autobatch_options.channels_last = o.channels_last;
    autobatch_options.autocast = autocast_type(resolve_amp(o.amp, device), "--amp");
    o.batch_size = autobatch(*model, device, o.img_size, autobatch_options).batch;
  }
  const int nc = static_cast<int>(data_cfg.names.size());
  // torch_distributed_zero_first: local rank 0 of each node scans the split and writes its label cache while
  // the node's other ranks wait; they then read the cache instead of every label file again. Its failure
  // (no labels, ...) reaches them in the same exchange, rather than leaving them in a barrier for an hour.
  const auto build_train_loader = [&] {
    train_data = make_train_loader(data_cfg, o, hyp, stride, nc, device, dist_ctx.rank, dist_ctx.world_size);
  };
  const bool first = dist_ctx.local_rank == 0;
  std::exception_ptr first_error;
  if (first) {
    try {
      build_train_loader();
    } catch (...) {
      first_error = std::current_exception();  // (one process: any_rank passes the flag through, rethrown below)
    }
  }
  const bool some_failed = dist::any_rank(first_error != nullptr, dist_ctx);
  if (first_error) std::rethrow_exception(first_error);
  if (some_failed) fail("distributed: rank ", dist_ctx.rank, ": a node's first rank could not index the training split (its error says why)");
  if (!first) build_train_loader();
  nb = static_cast<int64_t>(train_data.loader->num_batches());
  if (!dist_ctx.is_main()) return;  // only rank 0 validates (train.py builds no val loader on the others)
  ValLoaderOptions v;  // upstream train.py: validation batches of twice the training batch size
  v.img_size = val_img_size;
  v.batch_size = std::max(1, o.batch_size / dist_ctx.world_size) * 2;  // the rank's batch, as upstream (one rank validates)
  v.stride = stride;
  v.workers = o.workers;
  v.single_cls = o.single_cls;
  v.nc_for_check = nc;
  v.max_boxes = o.max_boxes;
  // YOLOv5 v7.0: `--cache val` caches the validation images only (in RAM), and --noval caches none of them.
  v.cache = o.noval ? "" : o.cache == "val" ? "ram" : o.cache;
  // Every rank of this machine caches the whole training split in its own memory.
  v.other_ram_cache_bytes = train_data.ram_cache_bytes * static_cast<uint64_t>(std::max(1, dist::read_env().local_world_size));
  v.other_disk_cache_bytes = train_data.disk_cache_bytes;
  v.pin_memory = device.is_cuda();
  val_data = make_val_loader(data_cfg, "val", v);
}

// A resumed run keeps its saved anchors and weights.
void TrainingRun::run_autoanchor() {
  if (resuming()) return;
  if (!o.noautoanchor) {
    if (dist_ctx.is_main()) {
      AutoAnchorOptions aa;
      aa.anchor_t = hyp.loss.anchor_t;
      aa.yolov7 = hyp.yolov7_recipe;
      aa.seed = o.seed;
      std::cout << check_anchors(model->head(), train_data.dataset->records(), o.img_size, aa).report;
    }
    std::vector<at::Tensor> head_buffers;
    for (const auto& b : model->head().named_buffers()) head_buffers.push_back(b.value());
    dist::broadcast_tensors(head_buffers, dist_ctx);
  }
  // train.py then rounds the whole model to float16 precision ("pre-reduce anchor precision",
  // model.half().float(), YOLOv5 and YOLOv7): a new run trains from those weights, so kestrel does too, and
  // the same initial weights give upstream's first losses to the last digit (docs/parity.md). Values beyond
  // float16's range keep their float32 value where upstream's would become inf. Every rank rounds alike.
  torch::NoGradGuard no_grad;
  auto round_to_half = [](at::Tensor t) {
    if (!t.is_floating_point()) return;
    const at::Tensor rounded = t.to(at::kHalf).to(t.scalar_type());
    t.copy_(at::where(rounded.isinf() & t.isfinite(), t, rounded));
  };
  for (const auto& p : model->parameters()) round_to_half(p);
  for (const auto& b : model->buffers()) round_to_half(b);
}

void TrainingRun::build_optimiser() {
  sched.lr0 = hyp.lr0;
  sched.lrf = hyp.lrf;
  sched.momentum = hyp.momentum;
  sched.warmup_epochs = hyp.warmup_epochs;
  sched.warmup_momentum = hyp.warmup_momentum;
  sched.warmup_bias_lr = hyp.warmup_bias_lr;
  // YOLOv5: linear unless --cos-lr; YOLOv7's train.py: cosine (one_cycle) unless --linear-lr.
  if (o.linear_lr && !hyp.yolov7_recipe && !resuming())
    std::cout << "note: --linear-lr is YOLOv7's flag; a YOLOv5 recipe schedules linearly anyway (1 - x/epochs, where "
                 "YOLOv7's --linear-lr is 1 - x/(epochs - 1))\n";
  sched.cos_lr = o.cos_lr || (hyp.yolov7_recipe && !o.linear_lr);
  sched.yolov7 = hyp.yolov7_recipe;
  sched.epochs = o.epochs;
  sched.batch_size = o.batch_size;
  sched.min_warmup_iterations = o.min_warmup_iterations >= 0 ? o.min_warmup_iterations : (hyp.yolov7_recipe ? 1000 : 100);
  opt_options.kind = parse_optimizer_kind(o.optimizer);
  sched.ramp_momentum = opt_options.kind == OptimizerKind::sgd;  // Adam's beta1 is not warmed up
  opt_options.weight_decay = scaled_weight_decay(sched, hyp.weight_decay);
  const ParamGroups groups = split_parameters(*model);
  optimizer.emplace(groups, opt_options);
  if (dist_ctx.is_main()) {  // upstream's lines (smart_optimizer's, or YOLOv7 train.py's)
    if (hyp.yolov7_recipe)
      std::cout << "Scaled weight_decay = " << python_float_repr(opt_options.weight_decay) << "\n"
                << "Optimizer groups: " << groups.biases.size() << " .bias, " << groups.weights.size() << " conv.weight, "
                << groups.norm_weights.size() << " other\n";
    else
      std::cout << "optimizer: " << optimizer_name(opt_options.kind) << "(lr=" << python_float_repr(hyp.lr0)
                << ") with parameter groups " << groups.norm_weights.size() << " weight(decay=0.0), " << groups.weights.size()
                << " weight(decay=" << python_float_repr(opt_options.weight_decay) << "), " << groups.biases.size() << " bias\n";
  }

  amp = resolve_amp(o.amp, device);
  GradScalerOptions scaler_options;
  scaler_options.enabled = amp == "fp16";
  scaler_options.init_scale = o.loss_scale;
  scaler.emplace(scaler_options, device);
}

void TrainingRun::restore_resume_state() {
  try {
    models::load_state_dict(*model, resume_state.model, true, o.resume);
  } catch (const Error& e) {  // most often the dataset's classes changed since the save
    fail(e.what(), "\n(the dataset ", o.data, " now has ", nc, " classes; a run whose dataset or model changed since it was "
         "saved cannot be resumed: start a new run with --weights ",
         shell_word((fs::path(o.resume).parent_path() / "last.safetensors").string()), ")");
  }
  optimizer->load_state(resume_state.optimizer, o.resume);
  if (scaler->enabled() && !resume_state.scaler.empty()) scaler->load_state(resume_state.scaler, o.resume);
  progression = resume_state.progression;
  // A batch past the epoch's end (a dataset that shrank since a Ctrl-C save, or an edited file): the epoch
  // is over, and the run resumes at its end (what follows it: the validation, the next epoch).
  if (progression.next_batch > nb) {
    std::cout << "WARNING: " << o.resume << " was saved at batch " << progression.next_batch << " of epoch " << progression.epoch
              << ", past the " << nb << " batches per epoch the dataset now gives (it changed?); resuming at that epoch's end\n";
    progression.next_batch = nb;
  }
  // Another number of ranks: rank r takes every W-th sample of the epoch order, so global batch i
  // (the total --batch-size, unchanged) holds the same samples for any W, and next_batch keeps its
  // meaning, as do the iteration numbers: the batches per epoch, ceil(ceil(N/W) / (B/W)) = ceil(N/B),
  // do not depend on W. Except with --quad (whole groups of 4 per rank's batch): there the count can
  // change, and the last optimiser step is taken as the batch before next_batch (exact for a Ctrl-C
  // save, which comes right after a step; an end-of-epoch save may have stepped a few batches earlier).
  if (resume_state.world_size != dist_ctx.world_size) {
    if (o.quad) progression.last_opt_step = nb * progression.epoch + progression.next_batch - 1;
    std::cout << "Resuming with WORLD_SIZE " << dist_ctx.world_size << " a run saved with WORLD_SIZE "
              << resume_state.world_size << "\n";
  }
  // A dataset that shrank since the save (fewer batches per epoch) puts the saved last optimiser step
  // ahead of the iteration the run resumes at: no step would be due for epochs. Count from here.
  const int64_t resume_iteration = nb * progression.epoch + progression.next_batch;
  if (progression.last_opt_step >= resume_iteration) {
    progression.last_opt_step = resume_iteration - 1;
    std::cout << "WARNING: " << o.resume << " was saved with more batches per epoch than the dataset now gives "
              << "(it changed?); optimiser steps are counted from here\n";
  }
  if (progression.epoch >= o.epochs) {
    const std::string best = (fs::path(o.resume).parent_path() / "best.safetensors").string();
    fail(o.resume, ": this run already finished (its ", o.epochs, " epochs, or stopped early by --patience); nothing to resume",
         fs::exists(best) ? cat(" (`", final_validation_command(o, best, final_validation_iou_thres(hyp.yolov7_recipe, data_cfg, nc),
                                                                dist_ctx.world_size),
                                "` validates its best weights)")
                          : std::string());
  }
  // Copied into the live tensors (the EMA's in build_step): the file's copies need not stay in memory.
  resume_state.model.clear();
  resume_state.optimizer.clear();
  resume_state.scaler.clear();
  std::cout << "Resuming " << save_dir << " from epoch " << progression.epoch << ", batch " << progression.next_batch << "\n";
}

void TrainingRun::choose_run_dir() {
  if (o.resume.empty() && dist_ctx.is_main()) save_dir = make_run_dir(o.project, o.name, o.exist_ok, o.save_weights);
  run_dir = save_dir;
  if (!dist_ctx.is_main()) {
    save_dir = (fs::temp_directory_path() / cat("kestrel-rank", dist_ctx.rank, "-", ::getpid())).string();
    fs::create_directories(save_dir);
    scratch_dir.path = save_dir;  // removed however the run ends (short of a kill)
  }
}

void TrainingRun::build_step() {
  // Training loss: YOLOv7's OTA assignment when the recipe asks for it (loss_ota: 1) or the head is an
  // IAuxDetect (its auxiliary variant, as train_aux.py), else YOLOv5's.
  // Validation always reports the plain loss, as upstream's test.py/val.py. Built after AutoAnchor and
  // the resume: the losses copy the head's anchors.
  compute_loss.emplace(model->head(), hyp.loss, o.img_size);
  train_loss_fn = make_loss_fn(model->head(), hyp.loss, o.img_size, hyp.loss_ota);
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
  ema.emplace(ema_model, *model, EmaOptions{}, resume_state.ema_updates);
  if (!o.resume.empty()) models::load_state_dict(ema->model(), resume_state.ema, true, o.resume);
  resume_state.ema.clear();
  StepOptions step_options;
  step_options.set_precision(autocast_type(amp, "--amp"));
  step_options.max_grad_norm = o.max_grad_norm;
  step_options.channels_last = o.channels_last;
  step.emplace(*model, train_loss_fn, *optimizer, *scaler, &*ema, step_options);
  if (o.cuda_graph) {
    if (dist_ctx.enabled)
      fail("--cuda-graph: data-parallel training is not captured (its all-reduce starts from host-side hooks); "
           "run one process or drop --cuda-graph");
    GraphStepOptions graph_options;
    graph_options.capture = o.cuda_graph_capture;
    graph = std::make_unique<CudaGraphStep>(*step, device, graph_options);  // capturing: a clear error on the CPU
  }
  reducer.emplace(step->trainable(), dist_ctx);  // all-reduces gradient buckets during backward
}

void TrainingRun::open_run_files() {
  weights_dir = fs::path(save_dir) / "weights";
  if (o.save_weights) fs::create_directories(weights_dir);
  if (!o.resume.empty() && dist_ctx.is_main()) {
    // Partial files of a process killed while it wrote (a second Ctrl-C): <file>.tmp<pid>-<thread> of
    // write_file_atomic (.tmp<pid>-<thread> for names near the length limit), <file>.tmp<pid> and
    // <file>.tmp.<pid> of older versions.
    const std::regex partial(R"(.*\.tmp\.?[0-9]+(-[0-9]+)?)");
    std::error_code ec;
    for (const fs::path& folder : {fs::path(save_dir), weights_dir})
      for (const auto& entry : fs::directory_iterator(folder, ec))
        if (entry.is_regular_file() && std::regex_match(entry.path().filename().string(), partial)) fs::remove(entry.path(), ec);
  }
  write_file_atomic((fs::path(save_dir) / "hyp.yaml").string(), {hyperparameters_yaml(hyp)}, Durability::kFlushed);
  // opt.yaml says how the run was started; a resumed run keeps it (its options here have absolute paths and
  // the run's own hyp.yaml as --hyp), and writes one only where it is gone.
  const fs::path opt_yaml = fs::path(save_dir) / "opt.yaml";
  if (o.resume.empty() || !fs::exists(opt_yaml))
    write_file_atomic(opt_yaml.string(), {options_yaml(o, save_dir)}, Durability::kFlushed);
  // Upstream's labels.jpg: the training split's labels, once per run (a resumed run has it already).
  if (o.resume.empty() && dist_ctx.is_main() && !o.noplots) {
    std::cout << "Plotting labels to " << (fs::path(save_dir) / "labels.jpg").string() << "... \n";
    eval::plot_labels(eval::label_rows(train_data.dataset->records()), names, (fs::path(save_dir) / "labels.jpg").string());
  }
  results.emplace((fs::path(save_dir) / "results.csv").string());
  if (!o.resume.empty() && dist_ctx.is_main()) {
    const int dropped = results->drop_rows_from(progression.epoch);
    if (dropped > 0)
      std::cout << "results.csv: dropped " << dropped << " row(s) of epochs from " << progression.epoch
                << " on, logged before the run stopped without saving them\n";
  }
  if (o.tensorboard) {
    tensorboard.emplace(save_dir);  // `tensorboard --logdir runs/train` (upstream logs there too)
    if (dist_ctx.is_main())
      std::cout << "TensorBoard: Start with 'tensorboard --logdir "
                << (fs::path(save_dir).has_parent_path() ? fs::path(save_dir).parent_path().string() : std::string("."))
                << "', view at http://localhost:6006/\n";
    // A resumed run's earlier event files may hold epochs from progression.epoch on that were logged but
    // never saved (as results.csv's dropped rows): a session start at that step makes TensorBoard's readers
    // discard them (their out-of-order purge) instead of showing both.
    if (resuming()) tensorboard->add_restart(progression.epoch);
  }
  last_path = (weights_dir / "last.safetensors").string();
  best_path = (weights_dir / "best.safetensors").string();
  state_path = (weights_dir / "last.state.safetensors").string();
}

}  // namespace kestrel::train
