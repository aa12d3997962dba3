// kestrel train end to end on CPU: a yolov5n memorises a few demo images (loss falls, mAP50 rises), and an
// interrupted run resumed from its state file ends with exactly the weights of an uninterrupted one.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "kestrel/core/error.h"
#include "kestrel/core/safetensors.h"
#include "kestrel/core/stop_signal.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/data/image_io.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/weights_file.h"
#include "kestrel/models/yolo_model.h"
#include "kestrel/train/trainer.h"
#include "kestrel/train/training_run.h"
#include "kestrel/train/training_state.h"
#include "test_support.h"

namespace kestrel::train {
namespace {

namespace fs = std::filesystem;

TrainOptions quick_options(const test::TempDir& dir) {
  TrainOptions o;
  o.cfg = "yolov5n";
  o.data = test::demo_subset(dir, 4);  // 7 boxes, 6 classes; train = val
  o.project = dir.file("runs");
  o.device = "cpu";
  o.img_size = 160;
  o.workers = 2;
  o.quiet = true;
  return o;
}

// Two runs' epoch losses agree within `rel` of the first's.
void expect_same_losses(const TrainResult& a, const TrainResult& b, double rel) {
  ASSERT_EQ(a.epoch_losses.size(), b.epoch_losses.size());
  for (size_t i = 0; i < a.epoch_losses.size(); ++i)
    EXPECT_NEAR(b.epoch_losses[i], a.epoch_losses[i], rel * a.epoch_losses[i]) << "epoch " << i;
}

// The same file of two runs' weights folders, tensor by tensor: |x - y| <= rel |x| + abs (norms), with
// (rel, abs) chosen per tensor name.
void expect_close_tensors(const TrainResult& a, const TrainResult& b, const std::string& file,
                          const std::function<std::pair<double, double>(const std::string&)>& tolerance) {
  const auto x = load_safetensors(fs::path(a.save_dir) / "weights" / file);
  const auto y = load_safetensors(fs::path(b.save_dir) / "weights" / file);
  ASSERT_EQ(x.tensors.size(), y.tensors.size());
  for (size_t i = 0; i < x.tensors.size(); ++i) {
    ASSERT_EQ(x.tensors[i].first, y.tensors[i].first);
    const at::Tensor u = x.tensors[i].second.to(at::kDouble), v = y.tensors[i].second.to(at::kDouble);
    const auto [rel, abs] = tolerance(x.tensors[i].first);
    EXPECT_LE((u - v).norm().item<double>(), rel * u.norm().item<double>() + abs) << x.tensors[i].first;
  }
}

// --resume of a run's folder, quietly: the saved options do the rest.
TrainOptions resume_options(const TrainResult& run) {
  TrainOptions r;
  r.resume = run.save_dir;
  r.quiet = true;
  return r;
}

// The run of `o` stopped after its first optimiser step, as by Ctrl-C (saved, resumable).
TrainResult interrupted_run(TrainOptions o) {
  o.interrupt_after = 1;
  TrainResult r = train(o);
  EXPECT_TRUE(r.interrupted);
  return r;
}

// Changes a saved run's state file, as if the run had been saved otherwise.
void edit_state(const TrainResult& run, const std::function<void(TrainingState&)>& change) {
  const std::string path = training_state_path(run.save_dir);
  TrainingState state = read_training_state(path);
  change(state);
  write_training_state(path, state);
}

// Two batches of 2 per epoch at 128 px: the smallest run with warm-up, accumulation and epochs.
TrainOptions short_run(const test::TempDir& dir, int epochs) {
  TrainOptions o = quick_options(dir);
  o.img_size = 128;
  o.batch_size = 2;  // 2 batches per epoch; the warm-up keeps accumulation at 1-2 batches
  o.epochs = epochs;
  return o;
}

// warmup_momentum 0 trains (torch's SGD takes a plain first step: tests/train/optimizer_test.cpp), while
// momentum 0 is refused before anything is made, as upstream's SGD(nesterov=True) refuses it.
TEST(Trainer, SgdMomentumZeroRefusedAndWarmupFromZeroTrains) {
  test::TempDir dir;
  TrainOptions o = short_run(dir, 1);
  o.noval = true;
  std::ofstream(dir.file("warm.yaml")) << "warmup_momentum: 0.0\n";
  o.hyp = dir.file("warm.yaml");
  const TrainResult run = train(o);
  EXPECT_EQ(run.epochs_completed, 1);
  std::ofstream(dir.file("none.yaml")) << "momentum: 0.0\n";
  o.hyp = dir.file("none.yaml");
  o.name = "none";
  const std::string error = test::error_message([&] { train(o); });
  EXPECT_NE(error.find(dir.file("none.yaml") + ": 'momentum: 0': SGD's Nesterov momentum needs a momentum above 0"),
            std::string::npos) << error;
  EXPECT_FALSE(fs::exists(fs::path(o.project) / "none")) << "a run folder was made";
  o.optimizer = "Adam";  // beta1 0 is Adam's to take
  o.epochs = 1;
  EXPECT_EQ(train(o).epochs_completed, 1);
}

// --max-boxes is the targets' fixed capacity per image (static shapes): what a mosaic holds beyond it is
// left out of the loss, and said once an epoch, never silently.
TEST(Trainer, BoxesBeyondMaxBoxesAreReported) {
  test::TempDir dir;
  TrainOptions o = short_run(dir, 1);  // mosaics of 4 images with 7 boxes among them
  o.max_boxes = 1;
  o.noval = true;
  o.nosave = true;
  o.noplots = true;
  testing::internal::CaptureStdout();
  train(o);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("were beyond --max-boxes 1 per image and were left out of the loss"), std::string::npos) << out;
}

TEST(Trainer, Yolov5nMemorisesFourImages) {
  test::TempDir dir;
  TrainOptions o = quick_options(dir);
  // No augmentation and a flat learning rate: the fastest way for a from-scratch model to fit a tiny set.
  test::write_file(dir.file("hyp.yaml"),
                   "lr0: 0.01\nlrf: 1.0\nwarmup_epochs: 0\nhsv_h: 0\nhsv_s: 0\nhsv_v: 0\ntranslate: 0\nscale: 0\n"
                   "fliplr: 0\nmosaic: 0\n");
  o.hyp = dir.file("hyp.yaml");
  o.min_warmup_iterations = 0;
  o.batch_size = 64;  // one batch of the 4 images per epoch, and one optimiser step per batch (nbs 64)
  o.epochs = 200;
  o.noval = true;   // validate once, after the last epoch
  o.nosave = true;
  const TrainResult r = train(o);
  ASSERT_EQ(r.epochs_completed, 200);
  ASSERT_EQ(r.epoch_losses.size(), 200u);
  // The loss must fall well below where it started (it ends near a fifth of it: 0.22 -> 0.05).
  EXPECT_LT(r.epoch_losses.back(), 0.5 * r.epoch_losses.front());
  // An untrained model scores 0 (its objectness prior keeps every score below val's 0.001 threshold;
  // observed 0 until ~epoch 150). Memorising 4 images reaches mAP50 ~0.5 here; 0.25 leaves room for
  // arithmetic differences across machines while still failing for a model that learnt nothing.
  EXPECT_GT(r.final_map50, 0.25);
  EXPECT_TRUE(fs::exists(r.last));
  EXPECT_TRUE(fs::exists(fs::path(r.save_dir) / "results.csv"));
  EXPECT_TRUE(fs::exists(fs::path(r.save_dir) / "hyp.yaml"));
  EXPECT_TRUE(fs::exists(fs::path(r.save_dir) / "opt.yaml"));
  for (const char* chart : {"results.png", "confusion_matrix.png", "PR_curve.png", "F1_curve.png", "P_curve.png", "R_curve.png"})
    EXPECT_TRUE(fs::exists(fs::path(r.save_dir) / chart)) << chart;
  // labels.jpg at the start; val.py's batch images of best.safetensors at the end: the 4 images are one
  // validation batch, so val_batch0 only, a 2 x 2 grid of letterboxed images whose long side is val.py's
  // rect shape with 0.5 stride padding: ceil(160 / 32 + 0.5) x 32 = 192.
  EXPECT_EQ(data::decode_image_file((fs::path(r.save_dir) / "labels.jpg").string()).image.size(), cv::Size(1600, 1600));
  for (const char* batch : {"val_batch0_labels.jpg", "val_batch0_pred.jpg"}) {
    const cv::Mat img = data::decode_image_file((fs::path(r.save_dir) / batch).string()).image;
    EXPECT_EQ(std::max(img.rows, img.cols), 2 * 192) << batch;
  }
  EXPECT_FALSE(fs::exists(fs::path(r.save_dir) / "val_batch1_labels.jpg"));
  // Upstream's train_batch0..2.jpg: iterations 0, 1, 2 (here epochs 0, 1, 2 of one batch each), the 4
  // images of 160 px on a 2 x 2 grid (ns = ceil(sqrt(4)) = 2, tiles at full size): 320 x 320.
  for (int ni = 0; ni < 3; ++ni) {
    const std::string name = "train_batch" + std::to_string(ni) + ".jpg";
    EXPECT_EQ(data::decode_image_file((fs::path(r.save_dir) / name).string()).image.size(), cv::Size(320, 320)) << name;
  }
  EXPECT_FALSE(fs::exists(fs::path(r.save_dir) / "train_batch3.jpg"));
  bool events = false;
  for (const auto& entry : fs::directory_iterator(r.save_dir))
    events = events || entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  EXPECT_TRUE(events) << "no TensorBoard event file in " << r.save_dir;
}

// With --multi-scale, train_batch*.jpg show the batches as trained on, resized (upstream plots the resized
// imgs): a 2 x 2 grid of the 4 images at a size s from randrange(80, 272) // 32 * 32, so 2s square with s a
// multiple of 32 in 64..256; the seed's three draws are not all the base 160.
TEST(Trainer, MultiScaleTrainBatchesShowTheResizedImages) {
  test::TempDir dir;
  TrainOptions o = quick_options(dir);
  o.multi_scale = true;
  o.batch_size = 64;  // one batch of the 4 images per epoch
  o.epochs = 3;
  o.noval = true;
  o.nosave = true;
  const TrainResult r = train(o);
  std::set<int> sides;
  for (int ni = 0; ni < 3; ++ni) {
    const cv::Size size = data::decode_image_file((fs::path(r.save_dir) / cat("train_batch", ni, ".jpg")).string()).image.size();
    EXPECT_EQ(size.width, size.height) << ni;
    EXPECT_EQ(size.width % 64, 0) << ni;
    EXPECT_GE(size.width, 128) << ni;
    EXPECT_LE(size.width, 512) << ni;
    sides.insert(size.width);
  }
  EXPECT_NE(sides, std::set<int>{320}) << "every batch drawn at the base size";
}

// --noplots: the run's files without a chart or drawing (upstream's plots=False); the final validation
// still runs.
TEST(Trainer, NoplotsWritesNoPlotFiles) {
  test::TempDir dir;
  TrainOptions o = short_run(dir, 1);
  o.noplots = true;
  const TrainResult r = train(o);
  ASSERT_EQ(r.epochs_completed, 1);
  EXPECT_TRUE(fs::exists(fs::path(r.save_dir) / "results.csv"));
  EXPECT_TRUE(fs::exists(r.best));
  for (const auto& entry : fs::directory_iterator(r.save_dir)) {
    const std::string ext = entry.path().extension().string();
    EXPECT_TRUE(ext != ".png" && ext != ".jpg") << entry.path();
  }
}

TEST(Trainer, InterruptedAndResumedRunEqualsUninterrupted) {
  test::TempDir dir;
  TrainOptions o = short_run(dir, 3);
  o.name = "whole";
  const TrainResult whole = train(o);
  ASSERT_FALSE(whole.interrupted);

  o.name = "split";
  o.interrupt_after = 3;  // stops after the first optimiser step at or after batch 3: inside epoch 1
  const TrainResult first = train(o);
  ASSERT_TRUE(first.interrupted);
  EXPECT_EQ(first.epochs_completed, 1);
  TrainOptions resume = resume_options(first);
  const TrainResult second = train(resume);
  ASSERT_FALSE(second.interrupted);
  EXPECT_EQ(second.save_dir, first.save_dir);

  const auto a = load_safetensors(fs::path(whole.save_dir) / "weights" / "last.state.safetensors");
  const auto b = load_safetensors(fs::path(second.save_dir) / "weights" / "last.state.safetensors");
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    ASSERT_EQ(a.tensors[i].first, b.tensors[i].first);
    EXPECT_TRUE(at::equal(a.tensors[i].second, b.tensors[i].second)) << a.tensors[i].first;
  }
  // results.csv: the same three rows (the resumed run appends the last two).
  auto read = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(read(fs::path(whole.save_dir) / "results.csv"), read(fs::path(second.save_dir) / "results.csv"));
  // TensorBoard: a second event file (as a new SummaryWriter), which opens with a session start at the
  // resumed epoch 1, so that readers drop anything an earlier file logged from there on. Its bytes by hand:
  // step 1 (field 2, varint: 10 01), session_log (field 7, 2 bytes: 3a 02) with status START (08 01).
  std::vector<std::string> event_files;
  for (const auto& entry : fs::directory_iterator(second.save_dir))
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) event_files.push_back(read(entry.path()));
  ASSERT_EQ(event_files.size(), 2u);
  const std::string session_start("\x10\x01\x3a\x02\x08\x01", 6);
  EXPECT_EQ((event_files[0].find(session_start) != std::string::npos) + (event_files[1].find(session_start) != std::string::npos), 1)
      << "one file, the resumed run's, holds the session start at step 1";
}

// A run trained with --cuda-graph, resumed with --device cpu: without graphs (which need CUDA), said in a
// warning, to the end. Without the device override it would resume on its own device.
TEST(Trainer, GraphedRunResumesOnTheCpuWithoutGraphs) {
  test::TempDir dir;
  const TrainResult first = interrupted_run(short_run(dir, 2));
  // As if the run had been trained on a GPU with --cuda-graph: the state file's options say so.
  edit_state(first, [](TrainingState& state) { state.options.cuda_graph = true; });
  const std::string state_path = training_state_path(first.save_dir);

  TrainOptions resume = resume_options(first);
  resume.device = "cpu";
  testing::internal::CaptureStderr();
  const TrainResult second = train(resume);
  const std::string warnings = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(second.interrupted);
  EXPECT_EQ(second.epochs_completed, 2);
  EXPECT_NE(warnings.find("resuming on the CPU without it"), std::string::npos) << warnings;
  EXPECT_TRUE(read_training_state(state_path).options.cuda_graph == false);  // the resumed run's own options
}

// A run resumed after its dataset shrank (fewer batches per epoch): the saved last optimiser step lies
// ahead of the resumed iteration, and no step would be due for epochs, silently. Here the state file says
// the last step was at iteration 1000, as a larger dataset would have it: the run warns and steps again.
// Its next batch lies past the epoch's 2 (2^63 - 1, which overflowed the iteration count): the run resumes at
// the end of that epoch, with a warning.
TEST(Trainer, ResumeAfterTheDatasetShrankStillSteps) {
  test::TempDir dir;
  const TrainResult first = interrupted_run(short_run(dir, 3));
  int64_t updates_before = 0;
  edit_state(first, [&](TrainingState& state) {
    updates_before = state.ema_updates;
    state.progression.last_opt_step = 1000;
    state.progression.next_batch = std::numeric_limits<int64_t>::max();
  });
  const std::string state_path = training_state_path(first.save_dir);

  TrainOptions resume = resume_options(first);
  testing::internal::CaptureStdout();
  const TrainResult second = train(resume);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_FALSE(second.interrupted);
  EXPECT_NE(out.find("was saved with more batches per epoch than the dataset now gives"), std::string::npos) << out;
  EXPECT_NE(out.find("was saved at batch 9223372036854775807 of epoch 0, past the 2 batches per epoch the dataset now gives"),
            std::string::npos) << out;
  const TrainingState after = read_training_state(state_path);
  EXPECT_GT(after.ema_updates, updates_before) << "no optimiser step after the resume";
  EXPECT_LT(after.progression.last_opt_step, 1000);
}

// The suggested `kestrel val` command pastes into a shell whatever the paths hold (POSIX single quotes).
TEST(Trainer, SuggestedCommandsQuotePaths) {
  EXPECT_EQ(shell_word("runs/train/exp2/weights/best.safetensors"), "runs/train/exp2/weights/best.safetensors");
  EXPECT_EQ(shell_word("my runs/best.safetensors"), "'my runs/best.safetensors'");
  EXPECT_EQ(shell_word("it's $HOME"), "'it'\\''s $HOME'");
  EXPECT_EQ(shell_word(""), "''");
}

// --patience: a run that stopped early is finished; resuming it again must not train (and log) another epoch
// each time. The state file is edited so that the resumed epoch cannot beat the best (fitness 1.0).
TEST(Trainer, EarlyStoppedRunIsNotResumedAgain) {
  test::TempDir dir;
  const TrainResult first = interrupted_run(short_run(dir, 5));
  edit_state(first, [](TrainingState& state) {
    state.options.patience = 1;
    state.progression.best_fitness = 1.0;
    state.progression.best_epoch = 0;
  });

  TrainOptions resume = resume_options(first);
  testing::internal::CaptureStdout();
  TrainResult second;
  const std::string error = test::error_message([&] { second = train(resume); });
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_EQ(error, "") << out;
  ASSERT_NE(out.find("Stopping training early as no improvement observed in last 1 epochs"), std::string::npos) << out;
  EXPECT_LT(second.epochs_completed, 5);
  const fs::path weights = fs::path(first.save_dir) / "weights";
  EXPECT_EQ(test::error_message([&] { train(resume); }).find("validates its best weights"), std::string::npos)
      << "no best.safetensors here (the best fitness was edited out of reach): no command for it";
  fs::copy_file(weights / "last.safetensors", weights / "best.safetensors");
  const std::string again = test::error_message([&] { train(resume); });
  EXPECT_NE(again.find("this run already finished"), std::string::npos) << again;
  // The command that validates its best weights as training's final validation does: the run's data and size,
  // twice its batch of 2 (train.py's batch_size // WORLD_SIZE * 2), val.py's default IoU 0.6 off COCO.
  EXPECT_NE(again.find("(`kestrel val --data " + fs::absolute(short_run(dir, 5).data).lexically_normal().string() + " "),
            std::string::npos) << again;
  EXPECT_NE(again.find(" --weights " + (fs::path(first.save_dir) / "weights" / "best.safetensors").string() +
                       " --img 128 --batch-size 4 --iou-thres 0.6` validates its best weights)"),
            std::string::npos) << again;
}

// train.py validates under --noval where EarlyStopping's possible_stop (epochs without improvement >=
// patience - 1) held after the previous epoch. With --patience 1 that is every epoch after the first: the
// unvalidated fitness stays 0, which (>= the best) moves the best epoch along each time.
TEST(Trainer, NovalStillValidatesWhereTheNextEpochMayStopEarly) {
  test::TempDir dir;
  TrainOptions o = short_run(dir, 3);
  o.noval = true;
  o.nosave = true;
  o.noplots = true;
  o.patience = 1;
  const TrainResult r = train(o);
  ASSERT_EQ(r.epochs_completed, 3);
  std::ifstream csv(fs::path(r.save_dir) / "results.csv");
  std::string line;
  std::vector<std::map<std::string, double>> rows;
  std::vector<std::string> columns;
  while (std::getline(csv, line)) {
    std::vector<std::string> cells;
    std::stringstream cells_in(line);
    for (std::string cell; std::getline(cells_in, cell, ',');) cells.push_back(cell.substr(cell.find_first_not_of(' ')));
    if (columns.empty()) { columns = cells; continue; }
    std::map<std::string, double>& row = rows.emplace_back();
    for (size_t i = 0; i < cells.size(); ++i) row[columns[i]] = std::stod(cells[i]);
  }
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].at("val/box_loss"), 0.0);  // epoch 0: not validated (--noval)
  EXPECT_GT(rows[1].at("val/box_loss"), 0.0);  // epoch 1: possible_stop after epoch 0
  EXPECT_GT(rows[2].at("val/box_loss"), 0.0);  // the last epoch
}

// A run whose dataset gained a class since the save cannot be resumed: the error says why and what to do
// instead, not only which tensor shapes differ.
TEST(Trainer, ResumeWithAChangedClassCountSaysSo) {
  test::TempDir dir;
  const TrainOptions o = short_run(dir, 2);
  const TrainResult first = interrupted_run(o);
  std::string names = "names: [";
  for (int c = 0; c <= 80; ++c) names += (c ? ", c" : "c") + std::to_string(c);
  test::write_file(o.data, "path: .\ntrain: images/train\nval: images/train\n" + names + "]\n");
  TrainOptions resume = resume_options(first);
  const std::string error = test::error_message([&] { train(resume); });
  EXPECT_NE(error.find("now has 81 classes"), std::string::npos) << error;
  EXPECT_NE(error.find("start a new run with --weights"), std::string::npos) << error;
}

// A run started from pretrained --weights (no --cfg) resumes after that file moved away: the state holds
// the weights and the run's own last.safetensors the architecture.
TEST(Trainer, ResumeNeedsNotThePretrainedFile) {
  test::TempDir dir;
  auto pretrained = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), 1);
  models::save_model_weights(dir.file("pre.safetensors"), *pretrained, models::describe_config("yolov5n", {"a"}));
  TrainOptions o = short_run(dir, 2);
  o.cfg.clear();
  o.weights = dir.file("pre.safetensors");
  const TrainResult first = interrupted_run(o);
  fs::remove(dir.file("pre.safetensors"));
  TrainOptions resume = resume_options(first);
  TrainResult second;
  EXPECT_EQ(test::error_message([&] { second = train(resume); }), "");
  EXPECT_FALSE(second.interrupted);
  EXPECT_EQ(second.epochs_completed, 2);
}

// A resumed run builds the model it trained (its last.safetensors), not what its --cfg file holds now: an
// edited file (here a wider model, whose weights would not fit the state) and a removed one change nothing.
// Its opt.yaml stays as the run's start wrote it.
TEST(Trainer, ResumeBuildsTheRunsOwnModelNotItsCfgFile) {
  test::TempDir dir;
  const std::string cfg = dir.file("my_model.yaml");
  fs::copy_file(models::resolve_model_config_path("yolov5n"), cfg);
  TrainOptions o = short_run(dir, 2);
  o.cfg = cfg;
  const TrainResult first = interrupted_run(o);
  const std::string original = models::load_model_weights((fs::path(first.save_dir) / "weights" / "last.safetensors").string()).info.model_yaml;
  std::string wider = original;
  const size_t at = wider.find("width_multiple: 0.25");
  ASSERT_NE(at, std::string::npos);
  wider.replace(at, 20, "width_multiple: 0.50");
  test::write_file(cfg, wider);
  const auto read = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string opt_yaml = read(fs::path(first.save_dir) / "opt.yaml");
  EXPECT_NE(opt_yaml.find("cfg: \"" + cfg + "\""), std::string::npos) << opt_yaml;
  TrainResult second;
  EXPECT_EQ(test::error_message([&] { second = train(resume_options(first)); }), "");
  EXPECT_FALSE(second.interrupted);
  EXPECT_EQ(read(fs::path(first.save_dir) / "opt.yaml"), opt_yaml) << "opt.yaml keeps how the run started";
  EXPECT_EQ(models::load_model_weights((fs::path(first.save_dir) / "weights" / "last.safetensors").string()).info.model_yaml, original);
  fs::remove(cfg);
  edit_state(first, [](TrainingState& state) { state.progression.epoch = 1, state.progression.next_batch = 0; });
  EXPECT_EQ(test::error_message([&] { second = train(resume_options(first)); }), "");
  EXPECT_EQ(second.epochs_completed, 2);
}

// The state file carries the architecture: a resume needs no other file of the run (a last.safetensors lost
// or damaged, say by a full disk, blocked it). A state saved before kestrel wrote the architecture into it
// takes it from last.safetensors as before; without that file the error names it.
TEST(Trainer, ResumeNeedsOnlyTheStateFile) {
  test::TempDir dir;
  const TrainResult first = interrupted_run(short_run(dir, 2));
  const fs::path last = fs::path(first.save_dir) / "weights" / "last.safetensors";
  const std::string yaml = models::load_model_weights(last.string()).info.model_yaml;
  EXPECT_EQ(read_training_state(training_state_path(first.save_dir)).model_yaml, yaml);
  EXPECT_EQ(read_training_state(training_state_path(first.save_dir)).model_name, "yolov5n");
  fs::remove(last);
  TrainResult second;
  EXPECT_EQ(test::error_message([&] { second = train(resume_options(first)); }), "");
  EXPECT_EQ(second.epochs_completed, 2);
  EXPECT_EQ(models::load_model_weights(last.string()).info.model_yaml, yaml);
  // An older state: the architecture from last.safetensors, whose absence is named.
  edit_state(first, [](TrainingState& state) {
    state.progression.epoch = 1, state.progression.next_batch = 0;
    state.model_yaml.clear(), state.model_name.clear();
  });
  EXPECT_EQ(test::error_message([&] { second = train(resume_options(first)); }), "");
  EXPECT_EQ(second.epochs_completed, 2);
  edit_state(first, [](TrainingState& state) {
    state.progression.epoch = 1, state.progression.next_batch = 0;
    state.model_yaml.clear(), state.model_name.clear();
  });
  fs::remove(last);
  EXPECT_NE(test::error_message([&] { train(resume_options(first)); }).find(last.string()), std::string::npos);
  // A damaged config in the state is named with the state file (no yolov5n.yaml is involved)
  edit_state(first, [](TrainingState& state) { state.model_yaml = "nc: 2\n", state.model_name = "yolov5n"; });
  const std::string broken = test::error_message([&] { train(resume_options(first)); });
  EXPECT_EQ(broken.rfind(training_state_path(first.save_dir) + ": the model config it carries: yolov5n.yaml", 0), 0u) << broken;
}

// Ctrl-C or SIGTERM after the last optimiser step (here before a resumed run's last epoch, which has no
// batch left to step: the request is there from the start) finds every epoch saved: the run ends without its
// final validation of best weights and plots (results.png) rather than ignoring the request.
TEST(Trainer, StopAfterTheLastOptimiserStepSkipsTheFinalValidation) {
  test::TempDir dir;
  const TrainResult first = interrupted_run(short_run(dir, 2));
  edit_state(first, [](TrainingState& state) { state.progression.epoch = 1, state.progression.next_batch = 2; });
  const auto before = std::signal(SIGTERM, SIG_DFL);
  TrainResult second;
  {
    StopSignal outer("");  // as an evolution's around its trainings: an inner one keeps its request
    std::raise(SIGTERM);
    ASSERT_TRUE(StopSignal::requested());
    EXPECT_EQ(test::error_message([&] { second = train(resume_options(first)); }), "");
  }
  std::signal(SIGTERM, before);
  EXPECT_FALSE(second.interrupted);
  EXPECT_TRUE(second.stopped_after_training);
  EXPECT_EQ(second.epochs_completed, 2);
  EXPECT_EQ(models::load_model_weights(second.last).info.extra.at("epoch"), "1") << "the last epoch is saved";
  EXPECT_FALSE(fs::exists(fs::path(second.save_dir) / "results.png"));
  // Without the request the same resume validates best and plots.
  edit_state(first, [](TrainingState& state) { state.progression.epoch = 1, state.progression.next_batch = 2; });
  const TrainResult third = train(resume_options(first));
  EXPECT_FALSE(third.stopped_after_training);
  EXPECT_TRUE(fs::exists(fs::path(third.save_dir) / "results.png"));
}

// A resumed run trains on with the hyperparameters it started with (upstream: those saved in opt.yaml), not
// with what its --hyp file says now; the file may even be gone.
TEST(Trainer, ResumeKeepsTheRunsOwnHyperparameters) {
  test::TempDir dir;
  const std::string hyp = dir.file("my_hyp.yaml");
  fs::copy_file("configs/hyps/hyp.scratch-low.yaml", hyp);
  TrainOptions o = short_run(dir, 2);
  o.hyp = hyp;
  const TrainResult first = interrupted_run(o);
  const auto lr0_in = [](const std::string& file) {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("lr0:", 0) == 0) return line;
    return std::string("(none)");
  };
  const std::string run_hyp = (fs::path(first.save_dir) / "hyp.yaml").string();
  EXPECT_EQ(lr0_in(run_hyp), "lr0: 0.01");
  test::write_file(hyp, "lr0: 0.5\n");  // changed since: every other key would fall back to defaults
  TrainResult second = train(resume_options(first));
  EXPECT_FALSE(second.interrupted);
  EXPECT_EQ(lr0_in(run_hyp), "lr0: 0.01");
  fs::remove(hyp);  // and gone: the run folder still holds what the run needs
  edit_state(first, [](TrainingState& state) { state.progression.epoch = 1, state.progression.next_batch = 0; });
  EXPECT_EQ(test::error_message([&] { second = train(resume_options(first)); }), "");
  EXPECT_EQ(lr0_in(run_hyp), "lr0: 0.01");
}

// A fresh yolov5n for the classes of the run's dataset.
std::shared_ptr<models::YoloModel> yolov5n_for(const TrainOptions& o) {
  const int nc = static_cast<int>(data::load_dataset_config(o.data).names.size());
  return models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), nc);
}

// Saves `model` (yolov5n_for's) at `path` and makes the run start from it (--weights, no --cfg).
void start_from(TrainOptions& o, const models::YoloModel& model, const std::string& path) {
  models::save_model_weights(path, model, models::describe_config("yolov5n", data::load_dataset_config(o.data).names));
  o.cfg.clear();
  o.weights = path;
}

// A run that diverges (here from weights far beyond float16's range, so that the first steps overflow) ends
// with NaN weights whose fitness, 0, ties the best: best.safetensors is not replaced by them (so not written
// at all here).
TEST(Trainer, DivergedWeightsDoNotBecomeTheBest) {
  test::TempDir dir;
  TrainOptions o = short_run(dir, 1);
  auto huge = yolov5n_for(o);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : huge->parameters()) p.mul_(1e30);
  }
  start_from(o, *huge, dir.file("huge.safetensors"));
  o.noautoanchor = true;
  o.noplots = true;
  testing::internal::CaptureStdout();
  const TrainResult run = train(o);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("WARNING: the EMA weights hold NaN or infinite values after epoch 0 (training diverged): "
                     "best.safetensors is not replaced"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(fs::path(run.save_dir) / "weights" / "best.safetensors"));
  EXPECT_TRUE(fs::exists(fs::path(run.save_dir) / "weights" / "last.safetensors"));
}

// train.py rounds a new run's model to float16 precision before its first step (model.half().float(),
// "pre-reduce anchor precision"); kestrel does too, so that the same initial weights give upstream's
// losses. With learning rates of 1e-30 the parameters cannot move by a float32 step (their entries that
// are 0, the BN biases, move by ~1e-31), so the saved ones are the starting ones: the pretrained float32
// values rounded to float16. BN's running statistics move in the forward passes and are not compared.
TEST(Trainer, NewRunStartsFromWeightsRoundedToHalfPrecision) {
  test::TempDir dir;
  TrainOptions o = short_run(dir, 1);
  auto pretrained = yolov5n_for(o);
  start_from(o, *pretrained, dir.file("pre.safetensors"));
  std::ofstream(dir.file("hyp.yaml")) << "lr0: 1.0e-30\nwarmup_bias_lr: 0.0\n";  // other keys: the defaults
  o.hyp = dir.file("hyp.yaml");
  o.noautoanchor = true;
  const TrainResult run = train(o);
  const auto saved = load_safetensors(training_state_path(run.save_dir));
  std::map<std::string, at::Tensor> by_name(saved.tensors.begin(), saved.tensors.end());
  int compared = 0, changed_by_rounding = 0;
  for (const auto& item : pretrained->named_parameters()) {
    const std::string& name = item.key();
    const auto it = by_name.find("model/" + name);
    ASSERT_NE(it, by_name.end()) << name;
    ASSERT_EQ(it->second.scalar_type(), at::kFloat) << name;  // a float16 file would round by itself
    const at::Tensor start = item.value().detach(), rounded = start.to(at::kHalf).to(at::kFloat);
    EXPECT_LE((it->second - rounded).abs().max().item<double>(), 1e-20) << name;
    // a random float32 kernel's entries are float16 values with probability ~2^-13 each; BN starts at 1 and 0
    if (start.numel() >= 16 && start.std().item<double>() > 0) {
      EXPECT_GT((rounded - start).abs().max().item<double>(), 0) << name;
      ++changed_by_rounding;
    }
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(pretrained->parameters().size()));
  EXPECT_GT(changed_by_rounding, 50);  // yolov5n's 60 convolution kernels
}

// results.csv's x/lr0..2 are the optimiser's groups in the recipe's order: YOLOv5's train.py puts the biases
// first, YOLOv7's last (its warm-up ramps group 2 from warmup_bias_lr). At the end of epoch 0 (iteration 1
// of a 100- or 1000-iteration warm-up) the bias rate is still near warmup_bias_lr = 0.1 in both recipes
// and the others near 0 (they ramp from 0 to lr0 = 0.01).
TEST(Trainer, LearningRateColumnsFollowTheRecipesGroupOrder) {
  test::TempDir dir;
  for (const bool yolov7 : {false, true}) {
    TrainOptions o = short_run(dir, 1);
    o.noval = true;
    o.name = yolov7 ? "v7" : "v5";
    if (yolov7) o.hyp = "configs/hyps/hyp.scratch.p5.yaml";
    const TrainResult r = train(o);
    std::ifstream csv(fs::path(r.save_dir) / "results.csv");
    std::string header, row;
    ASSERT_TRUE(std::getline(csv, header) && std::getline(csv, row));
    std::vector<double> values;
    std::stringstream fields(row);
    for (std::string field; std::getline(fields, field, ',');) values.push_back(std::stod(field));
    ASSERT_EQ(values.size(), 14u) << row;
    const double lr0 = values[11], lr2 = values[13];
    EXPECT_GT(yolov7 ? lr2 : lr0, 0.09) << row;
    EXPECT_LT(yolov7 ? lr0 : lr2, 0.001) << row;
    EXPECT_LT(values[12], 0.001) << row;
  }
}

// YOLOv7's train.py draws its first ten batches (`if plots and ni < 10`), YOLOv5's its first three.
TEST(Trainer, Yolov7RecipesDrawTenTrainingBatches) {
  test::TempDir dir;
  TrainOptions o = short_run(dir, 3);
  o.batch_size = 1;  // 4 iterations per epoch: 12 in all
  o.noval = true;
  o.nosave = true;
  o.hyp = "configs/hyps/hyp.scratch.p5.yaml";
  const TrainResult r = train(o);
  for (int ni = 0; ni < 10; ++ni)
    EXPECT_TRUE(fs::exists(fs::path(r.save_dir) / ("train_batch" + std::to_string(ni) + ".jpg"))) << ni;
  EXPECT_FALSE(fs::exists(fs::path(r.save_dir) / "train_batch10.jpg"));
}

// --channels-last changes only the memory layout: the same losses, and saved weights and optimiser state
// (written in the standard layout) equal to the NCHW run's up to the convolutions' float rounding.
TEST(Trainer, ChannelsLastTrainsLikeNchw) {
  test::TempDir dir;
  TrainOptions o = short_run(dir, 2);
  o.name = "nchw";
  const TrainResult nchw = train(o);
  o.name = "nhwc";
  o.channels_last = true;
  const TrainResult nhwc = train(o);
  expect_same_losses(nchw, nhwc, 1e-4);
  // Relative to the tensor's norm, with a floor for the small BN biases: the convolutions' kernels for the
  // two layouts sum in other orders (weights observed within ~2e-4 relative, 5e-6 absolute; the momentum
  // buffers, i.e. accumulated gradients, within ~1.2e-3). A layout mix-up would give ~1.
  expect_close_tensors(nchw, nhwc, "last.state.safetensors", [](const std::string& name) {
    return std::pair<double, double>{name.rfind("optimizer/", 0) == 0 ? 1e-2 : 1e-3, 1e-5};
  });
}

// --cuda-graph's step without the capture (the part a CPU can run): padded static buffers, gradients kept
// in place across steps and epochs (an epoch's zeroing must not free what a graph writes), the same
// training as the plain step over three epochs.
TEST(Trainer, GraphStepWithoutCaptureTrainsAsThePlainStep) {
  test::TempDir dir;
  TrainOptions o = short_run(dir, 3);
  o.name = "plain";
  const TrainResult plain = train(o);
  o.name = "graph";
  o.cuda_graph = true;
  o.cuda_graph_capture = false;
  const TrainResult graph = train(o);
  ASSERT_EQ(graph.epochs_completed, 3);
  expect_same_losses(plain, graph, 1e-4);
  expect_close_tensors(plain, graph, "last.safetensors", [](const std::string&) { return std::pair<double, double>{1e-4, 1e-6}; });
}

// A mid-epoch checkpoint of another number of ranks resumes here: batch positions count batches of
// the total --batch-size, which hold the same images for any number of ranks (every W-th sample of
// the epoch order per rank). The multi-process version is DistGloo.SyncBnRunInterruptedOnTwoRanksResumesOnOne.
TEST(Trainer, MidEpochResumeWithAnotherNumberOfRanks) {
  test::TempDir dir;
  TrainOptions o = short_run(dir, 2);
  o.interrupt_after = 1;  // stops inside epoch 0
  const TrainResult first = train(o);
  ASSERT_TRUE(first.interrupted);
  // Pretend the interrupted run had two ranks.
  const std::string state_path = (fs::path(first.save_dir) / "weights" / "last.state.safetensors").string();
  SafetensorsContents state = load_safetensors(state_path);
  auto progress = nlohmann::json::parse(state.metadata.at("progress"));
  ASSERT_EQ(progress.at("world_size").get<int>(), 1);
  ASSERT_EQ(progress.at("next_batch").get<int>(), 1);
  progress["world_size"] = 2;
  state.metadata["progress"] = progress.dump();
  save_safetensors(state_path, state.tensors, state.metadata);
  TrainOptions resume = resume_options(first);
  const TrainResult resumed = train(resume);
  EXPECT_FALSE(resumed.interrupted);
  EXPECT_EQ(resumed.epochs_completed, 2);
  const auto after = nlohmann::json::parse(load_safetensors(state_path).metadata.at("progress"));
  EXPECT_EQ(after.at("world_size").get<int>(), 1);
  EXPECT_EQ(after.at("epoch").get<int>(), 2);
}

// An end-of-epoch checkpoint of another number of ranks resumes on the same optimiser-step schedule as
// the run would have kept. Batch 2 of 4 images: 2 batches per epoch, accumulation round(1 + 31 ni / 100)
// in the 100-iteration warm-up (nbs 64 / 2 = 32 at its end): 1, 1, 2, 2, 2, 3, 3, 3 for iterations 0-7,
// so steps come at 0, 1, 3 and 6 (ni - last >= accumulate). Saved after epoch 2 (iteration 5), the last
// step is 3; a rule that took it as the batch before the resumed one (5) would skip the step at 6. lrf 1
// keeps the learning rate off the epoch count, so a 3-epoch run extended to 4 trains as a 4-epoch run.
TEST(Trainer, EndOfEpochResumeWithAnotherNumberOfRanksKeepsTheStepSchedule) {
  test::TempDir dir;
  test::write_file(dir.file("hyp.yaml"), "lrf: 1.0\n");
  TrainOptions o = short_run(dir, 4);
  o.hyp = dir.file("hyp.yaml");
  o.name = "whole";
  const TrainResult whole = train(o);
  ASSERT_EQ(whole.epochs_completed, 4);
  o.name = "split";
  o.epochs = 3;
  const TrainResult first = train(o);
  ASSERT_EQ(first.epochs_completed, 3);
  ASSERT_EQ(read_training_state(training_state_path(first.save_dir)).progression.last_opt_step, 3);
  edit_state(first, [](TrainingState& state) {  // as if saved by 2 ranks, and with a fourth epoch to go
    state.world_size = 2;
    state.options.epochs = 4;
  });
  const TrainResult second = train(resume_options(first));
  ASSERT_EQ(second.epochs_completed, 4);
  EXPECT_EQ(read_training_state(training_state_path(second.save_dir)).progression.last_opt_step, 6);
  expect_close_tensors(whole, second, "last.safetensors", [](const std::string&) { return std::pair<double, double>{0, 0}; });
}

TEST(Trainer, Fp16LossScalerSkipsOverflowingStepsAndBacksOff) {
  test::TempDir dir;
  TrainOptions o = short_run(dir, 1);
  o.amp = "fp16";        // CPU autocast in fp16 with the dynamic loss scaler
  o.loss_scale = 1e38;   // loss * scale overflows float32: the first steps' gradients are inf
  o.max_grad_norm = 0;   // no unscale before the step: the fused kernel unscales and skips
  const TrainResult r = train(o);
  ASSERT_EQ(r.epochs_completed, 1);
  const auto state = load_safetensors(fs::path(r.save_dir) / "weights" / "last.state.safetensors");
  double scale = 0, skipped = 0;
  for (const auto& [name, t] : state.tensors) {
    if (name == "scaler/scale") scale = t.item<double>();
    if (name == "scaler/skipped_steps") skipped = t.item<double>();
  }
  EXPECT_GE(skipped, 1);
  EXPECT_LE(scale, 0.5e38);  // halved once per skipped step
  EXPECT_NEAR(scale, 1e38 * std::pow(0.5, skipped), 1e32);
  // The model itself stayed finite: skipped steps never applied an inf update.
  for (const auto& [name, t] : state.tensors) {
    if (name.rfind("model/", 0) == 0 && at::isFloatingType(t.scalar_type())) {
      EXPECT_TRUE(at::isfinite(t).all().item<bool>()) << name;
    }
  }
}

TEST(Trainer, BadOptionsAreClearErrors) {
  test::TempDir dir;
  TrainOptions o = quick_options(dir);
  o.img_size = -32;  // (a positive size off the stride is rounded up, as train.py: tests/apps/kestrel_cli_test.cpp)
  EXPECT_NE(test::error_message([&] { train(o); }).find("--img -32: must be positive"), std::string::npos);
  o = quick_options(dir);
  o.cfg.clear();
  EXPECT_THROW(train(o), Error);
  o = quick_options(dir);
  o.optimizer = "Lion";
  EXPECT_THROW(train(o), Error);
  o = quick_options(dir);
  o.cuda_graph = true;  // quick_options trains on the CPU: graphs are a CUDA feature
  EXPECT_NE(test::error_message([&] { train(o); }).find("--cuda-graph"), std::string::npos);
  // A model for one-channel images builds, and failed in its first convolution with LibTorch's words.
  std::ifstream v5n("configs/models/yolov5n.yaml");
  test::write_file(dir.file("gray.yaml"), std::string(std::istreambuf_iterator<char>(v5n), {}) + "\nch: 1\n");
  o = quick_options(dir);
  o.cfg = dir.file("gray.yaml");
  EXPECT_EQ(test::error_message([&] { train(o); }),
            dir.file("gray.yaml") + ": 'ch: 1': the images kestrel trains on have 3 channels (RGB)");
  TrainOptions resume;
  resume.resume = dir.file("nothing-here");
  EXPECT_THROW(train(resume), Error);
}

}  // namespace
}  // namespace kestrel::train
