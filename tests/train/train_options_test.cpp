// The saved training options: every saved field survives opt JSON -> options, a damaged file names
// itself, an older state file (without the later keys) loads with their defaults, opt.yaml lists the
// fields in upstream's order.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kestrel/core/error.h"
#include "kestrel/train/train_options.h"

namespace kestrel::train {
namespace {

TrainOptions unusual() {
  TrainOptions o;  // every saved field away from its default
  o.weights = "w.safetensors"; o.cfg = "yolov7"; o.data = "d.yaml"; o.hyp = "h.yaml"; o.epochs = 7; o.batch_size = 12;
  o.img_size = 320; o.rect = true; o.nosave = true; o.noval = true; o.noautoanchor = true; o.cache = "disk";
  o.device = "cuda:1"; o.multi_scale = true; o.single_cls = true; o.sync_bn = true; o.quad = true;
  o.image_weights = true; o.optimizer = "AdamW"; o.workers = 3; o.project = "p"; o.name = "n"; o.exist_ok = true;
  o.cos_lr = true; o.linear_lr = true; o.label_smoothing = 0.1; o.patience = 9; o.freeze = {1, 3}; o.save_period = 5;
  o.seed = 1234567890123ull; o.amp = "bf16"; o.loss_scale = 1024; o.check_nans = true; o.freeze_bn = true;
  o.checkpoint = {0, 2}; o.cuda_graph = true; o.max_grad_norm = 3.5; o.max_boxes = 77; o.min_warmup_iterations = 5;
  o.v3_metric = true;
  return o;
}

TEST(TrainOptions, EverySavedFieldRoundTrips) {
  const TrainOptions a = unusual();
  const TrainOptions b = options_from_json(options_json(a), "test");
  EXPECT_EQ(b.weights, a.weights); EXPECT_EQ(b.cfg, a.cfg); EXPECT_EQ(b.data, a.data); EXPECT_EQ(b.hyp, a.hyp);
  EXPECT_EQ(b.epochs, a.epochs); EXPECT_EQ(b.batch_size, a.batch_size); EXPECT_EQ(b.img_size, a.img_size);
  EXPECT_EQ(b.rect, a.rect); EXPECT_EQ(b.nosave, a.nosave); EXPECT_EQ(b.noval, a.noval);
  EXPECT_EQ(b.noautoanchor, a.noautoanchor); EXPECT_EQ(b.cache, a.cache); EXPECT_EQ(b.device, a.device);
  EXPECT_EQ(b.multi_scale, a.multi_scale); EXPECT_EQ(b.single_cls, a.single_cls); EXPECT_EQ(b.sync_bn, a.sync_bn);
  EXPECT_EQ(b.quad, a.quad); EXPECT_EQ(b.image_weights, a.image_weights); EXPECT_EQ(b.optimizer, a.optimizer);
  EXPECT_EQ(b.workers, a.workers); EXPECT_EQ(b.project, a.project); EXPECT_EQ(b.name, a.name);
  EXPECT_EQ(b.exist_ok, a.exist_ok); EXPECT_EQ(b.cos_lr, a.cos_lr); EXPECT_EQ(b.linear_lr, a.linear_lr);
  EXPECT_EQ(b.label_smoothing, a.label_smoothing); EXPECT_EQ(b.patience, a.patience); EXPECT_EQ(b.freeze, a.freeze);
  EXPECT_EQ(b.save_period, a.save_period); EXPECT_EQ(b.seed, a.seed); EXPECT_EQ(b.amp, a.amp);
  EXPECT_EQ(b.loss_scale, a.loss_scale); EXPECT_EQ(b.check_nans, a.check_nans); EXPECT_EQ(b.freeze_bn, a.freeze_bn);
  EXPECT_EQ(b.checkpoint, a.checkpoint); EXPECT_EQ(b.max_grad_norm, a.max_grad_norm); EXPECT_EQ(b.max_boxes, a.max_boxes);
  EXPECT_EQ(b.min_warmup_iterations, a.min_warmup_iterations); EXPECT_EQ(b.cuda_graph, a.cuda_graph);
  EXPECT_EQ(b.v3_metric, a.v3_metric);
}

TEST(TrainOptions, DamagedAndOlderFiles) {
  nlohmann::json j = options_json(unusual());
  nlohmann::json old = j;
  for (const char* later : {"noautoanchor", "sync_bn", "linear_lr", "quad", "image_weights", "checkpoint", "cuda_graph"})
    old.erase(later);
  const TrainOptions o = options_from_json(old, "old.state");
  EXPECT_FALSE(o.quad);
  EXPECT_FALSE(o.cuda_graph);
  EXPECT_TRUE(o.checkpoint.empty());
  EXPECT_EQ(o.epochs, 7);
  j.erase("epochs");
  try {
    (void)options_from_json(j, "run/weights/last.state.safetensors");
    ADD_FAILURE() << "a state without epochs was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("run/weights/last.state.safetensors"), std::string::npos) << e.what();
  }
  j = options_json(unusual());
  j["workers"] = "many";
  EXPECT_THROW(options_from_json(j, "x"), Error);
}

// The command line's ranges hold for a state file's options too (--resume reads no flags).
TEST(TrainOptions, SavedValuesOutsideTheCommandLinesRangesAreRefused) {
  const std::vector<std::pair<const char*, nlohmann::json>> bad = {
      {"workers", 100000}, {"imgsz", 100000}, {"imgsz", 16}, {"max_boxes", 0}, {"epochs", 0}, {"batch_size", -1},
      {"label_smoothing", 2.0}, {"loss_scale", 0.0}, {"loss_scale", 1e39}, {"loss_scale", 1e-46}, {"amp", "fp8"},
      {"cache", "gpu"}};
  nlohmann::json large = options_json(unusual());
  large["loss_scale"] = 1e31;  // the command line takes any scale a float32 holds
  EXPECT_EQ(options_from_json(large, "x").loss_scale, 1e31);
  large["patience"] = 2147483647;  // and any --patience (an int)
  EXPECT_EQ(options_from_json(large, "x").patience, 2147483647);
  large["patience"] = -1;  // refused by today's command line, saved by earlier versions: resumes (as off)
  EXPECT_EQ(options_from_json(large, "x").patience, -1);
  large["patience"] = 1e10;  // not an int
  EXPECT_THROW(options_from_json(large, "x"), Error);
  for (const auto& [key, value] : bad) {
    nlohmann::json j = options_json(unusual());
    j[key] = value;
    const std::string message = [&] {
      try {
        (void)options_from_json(j, "run/last.state");
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string("(accepted)");
    }();
    EXPECT_NE(message.find(std::string("run/last.state: the saved training option '") + key + "' is "), std::string::npos)
        << key << " = " << value << ": " << message;
  }
}

TEST(TrainOptions, OptYamlInUpstreamOrder) {
  const std::string yaml = options_yaml(TrainOptions{});
  EXPECT_EQ(yaml.rfind("weights: \"\"\ncfg: \"\"\ndata: ", 0), 0u) << yaml;
  EXPECT_NE(yaml.find("\nepochs: 100\nbatch_size: 16\nimgsz: 640\n"), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("save_dir"), std::string::npos);
  EXPECT_NE(yaml.find("\nimgsz_test: 640\n"), std::string::npos) << "the size validation uses, not 0";
  const std::string with_dir = options_yaml(TrainOptions{}, "runs/train/exp2");
  EXPECT_EQ(with_dir, yaml + "save_dir: \"runs/train/exp2\"\n");
}

}  // namespace
}  // namespace kestrel::train
