// kestrel train: YOLOv5/YOLOv7 train.py's flags (same names and defaults where kestrel has them).
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <utility>
#include <vector>

#include "commands.h"
#include "kestrel/core/error.h"
#include "kestrel/dist/launcher.h"
#include "kestrel/dist/process_group.h"
#include "kestrel/train/autobatch.h"
#include "kestrel/train/evolve.h"
#include "kestrel/train/evolve_population.h"
#include "kestrel/train/grad_scaler.h"
#include "kestrel/train/hyperparameters.h"
#include "kestrel/train/optimizer.h"
#include "kestrel/train/trainer.h"
#include "kestrel/train/training_state.h"

namespace kestrel::app {

// A bare --resume: the newest run (upstream: --resume with no path).
constexpr const char* kLatestRun = "latest";

namespace {

// What a bare W&B / Google Cloud flag holds (no value can be this).
constexpr const char* kNoValue = "\x1f(no value)";

// Where the command line's warnings go: kestrel's launcher says them once for all its ranks, and of another
// launcher's ranks (torchrun, srun, mpirun) rank 0 says them, as upstream logs on rank 0 only.
std::ostream& command_line_warnings() {
  static std::ostream nowhere(nullptr);
  if (dist::started_by_launcher()) return nowhere;
  try {
    if (dist::read_env().rank != 0) return nowhere;
  } catch (const Error&) {
    // the variables are wrong: training names them; the warning is said here meanwhile
  }
  return std::cerr;
}

// --resume trains on with the run's saved options (upstream reads them from opt.yaml); only --device,
// --quiet, --nproc-per-node and --interrupt-after still steer the resumed process (read_options). A bare
// --resume becomes the newest run under --project. Says which given flags are ignored. True: it was bare.
bool resolve_resume(const CLI::App& cmd, train::TrainOptions& o) {
  const bool latest = o.resume == kLatestRun && !std::filesystem::exists(kLatestRun);
  if (latest) {
    o.resume = train::latest_training_state(o.project);
    std::cout << "Resuming training from " << o.resume << "\n";
  }
  if (o.resume.empty()) return false;
  std::string ignored;
  for (const CLI::Option* option : cmd.get_options()) {
    bool steers = false;
    for (const char* name : {"--resume", "--device", "--quiet", "--nproc-per-node", "--interrupt-after", "--local_rank"})
      steers = steers || option->check_name(name);
    steers = steers || (latest && option->check_name("--project"));  // where the newest run was looked for
    if (option->count() > 0 && !steers) ignored += " " + option->get_name();
  }
  if (!ignored.empty()) command_line_warnings() << "WARNING: --resume continues with the run's saved options; ignored:" << ignored << "\n";
  return latest;
}

// Three defaults follow the recipe: YOLOv7's train.py trains 300 epochs, without early stopping or
// gradient clipping (a YOLOv7 hyp file, one with paste_in or loss_ota, says which recipe it is). Flags
// given keep their values.
void apply_recipe_defaults(const CLI::App& cmd, train::TrainOptions& o) {
  if (o.hyp.empty() || !train::load_hyperparameters(o.hyp).yolov7_recipe) return;
  if (cmd.get_option("--epochs")->count() == 0) o.epochs = 300;
  if (cmd.get_option("--patience")->count() == 0) o.patience = 0;
  if (cmd.get_option("--max-grad-norm")->count() == 0) o.max_grad_norm = 0;
}

// The command line the launcher runs for each rank: this one, with a bare --resume replaced by the run it
// was resolved to (`resolved_run`, when not empty), so that the ranks do not look for their own newest run.
// Abbreviations come expanded (--resu is --resume).
std::vector<std::string> rank_command_line(const std::string& resolved_run) {
  std::vector<std::string> argv = parsed_command_line();
  for (size_t i = 0; !resolved_run.empty() && i < argv.size(); ++i) {
    if (argv[i] == std::string("--resume=") + kLatestRun) argv[i] = "--resume=" + resolved_run;
    if (argv[i] != "--resume") continue;
    if (i + 1 < argv.size() && argv[i + 1] == kLatestRun) argv[i + 1] = resolved_run;
    else argv[i] = "--resume=" + resolved_run;
  }
  return argv;
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto o = std::make_shared<train::TrainOptions>();
  auto* cmd = app.add_subcommand("train", "train a detector (YOLOv5/YOLOv7 recipes)");
  cmd->add_option("--weights", o->weights, "initial weights (.safetensors); empty: from scratch");
  cmd->add_option("--cfg", o->cfg, "model YAML, or a shipped name such as yolov5s");
  cmd->add_option("--data", o->data, "dataset YAML")->capture_default_str();
  cmd->add_option("--hyp", o->hyp, "hyperparameter YAML (default: hyp.scratch-low values)");
  // --epochs, --patience and --max-grad-norm default by recipe (apply_recipe_defaults).
  cmd->add_option("--epochs", o->epochs, "total epochs (YOLOv7 recipes: 300)")->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_option("--batch-size,--batch", o->batch_size, "total batch size for all processes; -1: AutoBatch (the batch for 80 % "
                  "of the CUDA device's memory; 16 on the CPU)")->capture_default_str()
      ->check(integer_where([](long long v) { return v == -1 || (v >= 1 && v <= 65536); }, "-1 (AutoBatch) or 1 to 65536"));
  // YOLOv7 writes --img-size TRAIN TEST (its README: --img 640 640); YOLOv5 one size for both.
  auto img_sizes = std::make_shared<std::vector<int>>(1, o->img_size);
  cmd->add_option("--img,--img-size,--imgsz", *img_sizes, "train and val image size (pixels); two values: train, val (YOLOv7)")
      ->expected(1, 2)
      ->capture_default_str()->check(CLI::Range(32, 8192));
  cmd->add_flag("--rect", o->rect, "rectangular training: no mosaic, no shuffling, each batch letterboxed to its aspect ratio");
  cmd->add_option("--resume", o->resume,
                  "continue a run: its folder or weights/last.state.safetensors; a bare --resume: the newest run under --project")
      ->expected(0, 1)->default_str(kLatestRun)->option_text("[RUN]");  // help: off unless given
  cmd->add_flag("--nosave", o->nosave, "only save the final checkpoint");
  cmd->add_flag("--noval,--notest", o->noval, "only validate after the final epoch");
  cmd->add_flag("--noplots", o->noplots, "save no plot files");
  auto* v5_metric = cmd->add_flag("--v5-metric", o->v5_metric, "YOLOv7 models: validate with AP recall sentinel 1.0 (YOLOv7 test.py --v5-metric)");
  cmd->add_flag("--v3-metric", o->v3_metric, "validate as ultralytics/yolov3 v9.6.0's val.py: labels matched once at IoU 0.5 and that IoU reused at every threshold, P and R at the unsmoothed F1 peak, NMS class offset 4096 (docs/parity.md)")->excludes(v5_metric);
  cmd->add_flag("--noautoanchor", o->noautoanchor, "keep the model's anchors (no AutoAnchor check before training)");
  auto* cache = cmd->add_option("--cache", o->cache,
                                "cache resized images (default: none; a bare --cache: ram): ram, disk (.npy next to each image), or val "
                                "(the validation images only, in RAM)")
      ->expected(0, 1)->default_str("ram")->check(CLI::IsMember({"ram", "disk", "val"}))->option_text("[ram|disk|val]");
  cmd->add_option("--device", o->device, "cuda device (0, cuda:0) or cpu; default: the first GPU if any");
  cmd->add_flag("--multi-scale", o->multi_scale, "vary image size +/- 50% per batch");
  cmd->add_flag("--single-cls", o->single_cls, "train as a single-class dataset");
  cmd->add_flag("--quad", o->quad, "quad dataloader: groups of 4 images become one image of twice the size (loss x 4)");
  cmd->add_flag("--image-weights", o->image_weights, "each epoch, sample images favouring rare and poorly detected classes");
  cmd->add_flag("--sync-bn", o->sync_bn, "SyncBatchNorm: batch statistics over all ranks (data parallel only)");
  auto* optimizer = cmd->add_option("--optimizer", o->optimizer, "SGD, Adam or AdamW")->capture_default_str();
  // YOLOv7's spellings of two of these: --adam (= --optimizer Adam), --cache-images (= --cache ram).
  auto yolov7_flags = std::make_shared<std::pair<bool, bool>>(false, false);
  cmd->add_flag("--adam", yolov7_flags->first, "YOLOv7's flag: --optimizer Adam");
  cmd->add_flag("--cache-images", yolov7_flags->second, "YOLOv7's flag: --cache ram");
  cmd->add_option("--workers", o->workers, "loader threads (0: one, as upstream's 0 loads in the main process)")
      ->capture_default_str()->check(CLI::Range(0, 1024));
  cmd->add_flag("--bind-cores", o->bind_cores,
                "pin loader workers to CPU cores (with several processes per node, each its own slice)");
  cmd->add_option("--project", o->project, "runs folder")->capture_default_str();
  cmd->add_option("--name", o->name, "run name (project/name, name2, ...)")->capture_default_str();
  cmd->add_flag("--exist-ok", o->exist_ok, "reuse project/name if it exists");
  cmd->add_flag("--cos-lr", o->cos_lr, "cosine learning-rate schedule");
  cmd->add_flag("--linear-lr", o->linear_lr, "linear schedule for YOLOv7 recipes (which default to cosine, as its train.py)");
  cmd->add_option("--label-smoothing", o->label_smoothing, "class label smoothing epsilon")->capture_default_str()
      ->check(CLI::Validator(  // CLI::Range lets nan through
          [](std::string& s) -> std::string {
            double x = 0;
            return CLI::detail::lexical_cast(s, x) && x >= 0 && x <= 1 ? std::string() : "expected a number in [0, 1], got " + s;
          },
          "[0, 1]"));
  cmd->add_option("--patience", o->patience, "early stopping: epochs without improvement (0: off; YOLOv7 recipes: off)")
      ->capture_default_str()  // upstream takes a negative one as "stop after the first epoch": never meant
      ->check(integer_where([](long long v) { return v >= 0; }, "0 (off) or a number of epochs"));
  cmd->add_option("--freeze", o->freeze, "freeze the first N layers, or several layer indices")->capture_default_str();
  cmd->add_option("--save-period,--save_period", o->save_period, "also save weights every N epochs")->capture_default_str();
  cmd->add_option("--seed", o->seed, "global seed")->capture_default_str()  // numpy's seeds are >= 0 too
      ->check(integer_where([](long long v) { return v >= 0; }, "a seed >= 0"));
  cmd->add_option("--amp", o->amp, "mixed precision: auto (fp16 on CUDA, off on CPU), fp16, bf16, off")
      ->capture_default_str()->check(CLI::IsMember({"auto", "fp16", "bf16", "off"}));
  cmd->add_option("--loss-scale", o->loss_scale, "initial dynamic loss scale for fp16")->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(s.c_str(), &end);
            return !s.empty() && *end == '\0' && train::is_valid_loss_scale(v)
                       ? std::string()
                       : "expected a positive number a float32 holds (about 1.2e-38 to 3.4e38), got " + s;
          },
          "POSITIVE"));
  cmd->add_flag("--check-nans", o->check_nans, "stop at the first non-finite loss and say where (reads the loss back every step: the GPU is drained each time)");
  cmd->add_flag("--freeze-bn", o->freeze_bn, "keep BatchNorm statistics fixed");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "activation checkpointing (recompute in backward, less memory): the first N layers, or several layer indices");
  cmd->add_flag("--channels-last", o->channels_last, "channels-last weights and activations (faster fp16 convolutions on GPUs)");
  cmd->add_flag("--fused-bn-silu", o->fused_bn_silu,
                "batch norm + SiLU as one operation (CUDA kernels, channels-last; with --channels-last)");
  cmd->add_flag("--cuda-graph", o->cuda_graph,
                "capture the training step as CUDA graphs once the warm-up ends and replay them (one process, CUDA; "
                "--check-nans then sees a loss after its update)");
  cmd->add_option("--max-grad-norm", o->max_grad_norm, "gradient-norm clipping (<= 0: off; YOLOv7 recipes: off)")
      ->capture_default_str()->check(CLI::Validator(
          [](std::string& v) {  // nan would switch clipping off without a word
            double x = 0;
            return CLI::detail::lexical_cast(v, x) && std::isfinite(x) ? std::string() : "must be a finite number, got " + v;
          },
          "FINITE"));
  cmd->add_option("--max-boxes", o->max_boxes, "target capacity per image")->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--min-warmup-iters", o->min_warmup_iterations,
                  "warm-up lasts at least this many iterations (-1: 100, or 1000 for YOLOv7 recipes)")->capture_default_str();
  cmd->add_flag("--quiet", o->quiet, "no per-iteration progress line");
  // Tests stop a (multi-process) run at a known batch, as Ctrl-C would; not shown in --help.
  cmd->add_option("--interrupt-after", o->interrupt_after, "")->group("");
  // train.py's --local_rank (torch.distributed.launch's argument; upstream reads LOCAL_RANK from the
  // environment and ignores it): accepted, and checked against the environment kestrel does use.
  auto local_rank = std::make_shared<int>(-1);
  auto* local_rank_flag = cmd->add_option("--local_rank,--local-rank", *local_rank, "")->group("");
  // train.py's Weights & Biases and Google Cloud flags: refused with the reason rather than CLI11's
  // "not expected" (kestrel logs to TensorBoard event files and results.csv in the run folder).
  auto unsupported = std::make_shared<std::vector<std::pair<std::string, CLI::Option*>>>();
  for (const std::string name : {"--entity", "--bbox_interval", "--artifact_alias", "--bucket", "--upload_dataset"})
    // (A bare flag gets default_str as its value under expected(0, 1): a marker that no value can be.)
    unsupported->emplace_back(name, cmd->add_option(name)->expected(0, 1)->default_str(kNoValue)->group(""));
  auto nproc = std::make_shared<int>(1);
  cmd->add_option("--nproc-per-node,--nproc_per_node", *nproc,
                  "data-parallel processes on this node (runs this command N times with RANK, WORLD_SIZE, "
                  "MASTER_ADDR/PORT set, as torchrun --nproc-per-node; --batch-size stays the total batch)")
      ->capture_default_str()->check(CLI::Range(1, 1024));
  auto generations = std::make_shared<int>(0);
  cmd->add_option("--evolve", *generations, "evolve the hyperparameters for N generations (default 300) into runs/evolve")
      ->expected(0, 1)->default_str("300")->check(CLI::Range(1, 100000))->option_text("[N]");
  // YOLOv5 HEAD's genetic algorithm instead of v7.0's mutation of the fittest rows (evolve_population.h).
  auto population = std::make_shared<train::PopulationOptions>();
  auto* seed_dir = cmd->add_option("--evolve_population,--evolve-population", population->seed_dir,
                                   "with --evolve: YOLOv5 HEAD's genetic algorithm over the augmentation keys, a "
                                   "population of 50 seeded by this folder's *.yaml files (e.g. configs/hyps)");
  auto* resume_file = cmd->add_option("--resume_evolve,--resume-evolve", population->resume_file,
                                      "with --evolve: the genetic algorithm from a saved evolve_population.yaml");
  cmd->callback([cmd, o, nproc, generations, population, seed_dir, resume_file, img_sizes, yolov7_flags, optimizer, cache,
                 unsupported, local_rank, local_rank_flag] {
    if (cmd->count("--data") == 0) o->data = default_from_source_tree(o->data);  // the demo, from any folder
    if (local_rank_flag->count() > 0 && *local_rank != -1 && *local_rank != dist::read_env().local_rank)
      throw CLI::ValidationError("--local_rank", std::to_string(*local_rank) + ", but the environment makes this process " +
                                 "local rank " + std::to_string(dist::read_env().local_rank) +
                                 " (kestrel takes the rank from LOCAL_RANK, as train.py)");
    // --evolve as train.py: its default project runs/train becomes runs/evolve, and `opt.exist_ok, opt.resume =
    // opt.resume, False`: --resume continues the evolution in its folder, --exist-ok alone does not.
    if (*generations > 0) {
      if (cmd->get_option("--project")->count() == 0) o->project = "runs/evolve";
      o->exist_ok = !o->resume.empty();
      o->resume.clear();
    }
    const bool latest = resolve_resume(*cmd, *o);
    // Their defaults (train.py's: --bucket '', --bbox_interval -1, --artifact_alias latest; a script passing them
    // all) change nothing there and are accepted here.
    for (const auto& [name, option] : *unsupported) {
      if (option->count() == 0) continue;
      const std::string value = option->results().empty() ? std::string(kNoValue) : option->results().back();
      if (value == kNoValue && name != "--upload_dataset")
        throw CLI::ValidationError(name, "expects one argument, as train.py's");
      const bool no_op = name == "--upload_dataset" ? false
                         : name == "--bbox_interval" ? value == "-1"
                         : name == "--artifact_alias" ? value == "latest" || value.empty()
                                                      : value.empty();
      if (no_op) continue;
      if (name == "--bucket")
        throw CLI::ValidationError(name, "kestrel does not copy evolve.csv to or from a Google Cloud bucket (gsutil): "
                                   "copy it into the evolution folder and continue there with --resume");
      throw CLI::ValidationError(name, "kestrel has no W&B or Google Cloud logging; it writes TensorBoard "
                                 "event files and results.csv into the run folder (tensorboard --logdir runs/train)");
    }
    // `--img 64 --img 32` would make the pair `--img 64 32` (train, val) without a word: CLI11 collects the
    // values of every use of a list option, where argparse keeps the last use (`--freeze 10 --freeze 0`
    // freezes nothing upstream, layers 0 and 10 here). Refused rather than guessed.
    if (times_given({"--img", "--img-size", "--imgsz"}) > 1)
      throw CLI::ValidationError("--img", "given more than once; a train and a val size are given together: --img 640 640");
    refuse_repeated({"--freeze"}, "--freeze 0 1 2");
    refuse_repeated({"--checkpoint"}, "--checkpoint 0 1 2");
    // train.py: `--name cfg` names the run after the model YAML (yolov5s.yaml -> yolov5s).
    if (o->name == "cfg" && o->resume.empty()) o->name = std::filesystem::path(o->cfg).stem().string();
    o->img_size = img_sizes->at(0);
    o->img_size_test = img_sizes->size() > 1 ? img_sizes->at(1) : 0;
    // A YOLOv7 spelling beside a different YOLOv5 one is a contradiction, not a silent override.
    if (yolov7_flags->first && optimizer->count() > 0 && o->optimizer != "Adam")
      throw CLI::ValidationError("--adam", "means --optimizer Adam, but --optimizer " + o->optimizer + " was given too");
    if (yolov7_flags->second && cache->count() > 0 && o->cache != "ram")
      throw CLI::ValidationError("--cache-images", "means --cache ram, but --cache " + o->cache + " was given too");
    if (yolov7_flags->first) o->optimizer = "Adam";
    if (o->cos_lr && o->linear_lr && o->resume.empty())  // (a saved run with both resumes as it trained: cosine)
      throw CLI::ValidationError("--linear-lr", "and --cos-lr: give one of them");
    // Checked here, before a run folder exists and AutoAnchor runs, rather than where they are used.
    try {
      train::parse_optimizer_kind(o->optimizer);
    } catch (const Error& e) {
      throw CLI::ValidationError(e.what());  // "--optimizer NAME: expected ..."
    }
    if (o->batch_size == -1 && o->resume.empty() && *nproc > 1)  // refused once here, not by every rank
      throw CLI::ValidationError("--batch-size", train::kAutoBatchNotDataParallel);
    if (o->batch_size > 0 && o->resume.empty() && *nproc > 1 && o->batch_size % *nproc != 0)
      throw CLI::ValidationError("--batch-size", cat(o->batch_size, " must be a multiple of WORLD_SIZE ", *nproc));
    if (o->image_weights && o->rect && o->resume.empty()) {  // upstream's dataset: rect = False if image_weights
      command_line_warnings() << "WARNING: --rect is incompatible with --image-weights (random draws, not --rect's fixed batches): "
                   "training without --rect\n";
      o->rect = false;
    }
    if (yolov7_flags->second) o->cache = "ram";
    if (o->resume.empty()) o->hyp = data::resolve_hyp_path(o->hyp);  // recorded resolved, as train.py's check_yaml
    if (o->resume.empty()) apply_recipe_defaults(*cmd, *o);
    const bool genetic = seed_dir->count() > 0 || resume_file->count() > 0;
    if (seed_dir->count() > 0 && resume_file->count() > 0)
      throw CLI::ValidationError("--resume_evolve", "starts from its saved population; --evolve_population seeds a new one: give one of them");
    if (genetic && *generations == 0)
      throw CLI::ValidationError(seed_dir->count() > 0 ? "--evolve_population" : "--resume_evolve",
                                 "belongs to --evolve N (the number of generations)");
    if (*generations > 0) {
      // Any launcher's ranks (torchrun's WORLD_SIZE, mpirun's, an srun step's): each would evolve into the same folder.
      bool ranks = *nproc > 1 || dist::launched_worker();
      try {
        ranks = ranks || dist::read_env().world_size > 1;
      } catch (const Error&) {
        ranks = true;  // a launcher's variables without MASTER_ADDR ...: several ranks all the same
      }
      if (ranks) throw CLI::ValidationError("--evolve", "runs in one process (as upstream)");
      const train::EvolveResult evolved =
          genetic ? train::evolve_population(*o, *generations, *population) : train::evolve(*o, *generations);
      if (evolved.interrupted) throw CLI::RuntimeError(130);  // as an interrupted training
      return;
    }
    // The launcher re-executes this command line; the workers see WORLD_SIZE and train.
    if (*nproc > 1 && dist::launched_worker() && dist::read_env().local_world_size != *nproc)
      throw CLI::ValidationError("--nproc-per-node", std::to_string(*nproc) + ", but this process is already one of " +
                                 std::to_string(dist::read_env().local_world_size) +
                                 " (WORLD_SIZE is set in the environment): unset WORLD_SIZE, or drop --nproc-per-node");
    if (*nproc > 1 && !dist::launched_worker()) {
      const int code = dist::launch_local(*nproc, rank_command_line(latest ? o->resume : ""));
      if (code != 0) throw CLI::RuntimeError(code);
      return;
    }
    // Stopped by Ctrl-C or SIGTERM (saved; --resume continues, or all epochs done but the final validation
    // skipped): 130, as a shell reports an interrupt, so that a script can tell a stopped run from a finished one.
    const train::TrainResult r = train::train(*o);
    if (r.interrupted || r.stopped_after_training) throw CLI::RuntimeError(130);
  });
}

}  // namespace kestrel::app
