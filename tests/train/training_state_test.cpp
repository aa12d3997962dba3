// The training-state file: what is written is read back (options, progression, every tensor group in
// its place), a run folder resolves to its file, and damaged or foreign files are errors naming the file.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "kestrel/core/error.h"
#include "kestrel/core/safetensors.h"
#include "kestrel/train/training_state.h"
#include "test_support.h"

namespace kestrel::train {
namespace {

TrainingState sample_state() {
  TrainingState s;
  s.options.epochs = 9;
  s.options.cfg = "yolov5n";
  s.options.cuda_graph = true;
  s.progression = {3, 7, 40, 0.25, 2, {1.5, 2.5, 3.5}, 7, {0.1, 0.2}};
  s.ema_updates = 41;
  s.world_size = 2;
  s.model = {{"model.0.conv.weight", at::arange(6, at::kFloat).view({2, 3})}};
  s.ema = {{"model.0.conv.weight", at::full({2, 3}, 0.5)}};
  s.optimizer = {{"group0.0.momentum", at::ones({4})}};
  s.scaler = {{"scale", at::full({}, 1024.0)}};
  s.model_yaml = "nc: 80\nbackbone: []\n";
  s.model_name = "yolov5n";
  return s;
}

TEST(TrainingState, WhatIsWrittenIsReadBack) {
  test::TempDir dir;
  const std::string path = dir.file("last.state.safetensors");
  const TrainingState a = sample_state();
  write_training_state(path, a);
  const TrainingState b = read_training_state(path);
  EXPECT_EQ(b.options.epochs, 9);
  EXPECT_EQ(b.options.cfg, "yolov5n");
  EXPECT_TRUE(b.options.cuda_graph);
  EXPECT_EQ(b.progression.epoch, 3);
  EXPECT_EQ(b.progression.next_batch, 7);
  EXPECT_EQ(b.progression.last_opt_step, 40);
  EXPECT_EQ(b.progression.best_fitness, 0.25);
  EXPECT_EQ(b.progression.best_epoch, 2);
  EXPECT_EQ(b.progression.loss_sum, (std::array<double, 3>{1.5, 2.5, 3.5}));
  EXPECT_EQ(b.progression.loss_count, 7);
  EXPECT_EQ(b.progression.maps, (std::vector<double>{0.1, 0.2}));
  EXPECT_EQ(b.ema_updates, 41);
  EXPECT_EQ(b.world_size, 2);
  EXPECT_EQ(b.model_yaml, "nc: 80\nbackbone: []\n");
  EXPECT_EQ(b.model_name, "yolov5n");
  // Each group keeps its own tensors under their own names (the prefixes are the file's business).
  ASSERT_EQ(b.model.size(), 1u);
  EXPECT_EQ(b.model[0].first, "model.0.conv.weight");
  EXPECT_TRUE(at::equal(b.model[0].second, a.model[0].second));
  ASSERT_EQ(b.ema.size(), 1u);
  EXPECT_TRUE(at::equal(b.ema[0].second, a.ema[0].second));
  ASSERT_EQ(b.optimizer.size(), 1u);
  EXPECT_EQ(b.optimizer[0].first, "group0.0.momentum");
  ASSERT_EQ(b.scaler.size(), 1u);
  EXPECT_EQ(b.scaler[0].second.item<double>(), 1024.0);
  // The file itself uses the prefixes.
  const SafetensorsContents raw = load_safetensors(path);
  EXPECT_EQ(raw.tensors.size(), 4u);
  EXPECT_EQ(raw.metadata.at("format"), "kestrel-train-state-1");
}

// A loss sum made infinite or NaN by an fp16 overflow (a step the scaler skipped) and saved by Ctrl-C:
// JSON has no such numbers (written as null); the file must still resume, with the values as they were.
TEST(TrainingState, NonFiniteLossSumsResume) {
  test::TempDir dir;
  const std::string path = dir.file("last.state.safetensors");
  TrainingState a = sample_state();
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  a.progression.loss_sum = {inf, 2.5, nan};
  a.progression.maps = {nan, 0.2};
  write_training_state(path, a);
  const TrainingState b = read_training_state(path);
  EXPECT_TRUE(std::isnan(b.progression.loss_sum[0]));  // NaN either way: the epoch's mean loss is lost, not the run
  EXPECT_EQ(b.progression.loss_sum[1], 2.5);
  EXPECT_TRUE(std::isnan(b.progression.loss_sum[2]));
  EXPECT_TRUE(std::isnan(b.progression.maps[0]));
  EXPECT_EQ(b.progression.maps[1], 0.2);
}

TEST(TrainingState, ARunFolderMeansItsLastState) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("exp/weights"));
  EXPECT_EQ(training_state_path(dir.file("exp")), dir.file("exp") + "/weights/last.state.safetensors");
  EXPECT_EQ(training_state_path(dir.file("x.safetensors")), dir.file("x.safetensors"));
}

// A bare --resume: the most recently written run state below the project folder, as upstream's newest
// last*.pt; none is an error naming the folder.
TEST(TrainingState, BareResumeTakesTheNewestRun) {
  namespace fs = std::filesystem;
  test::TempDir dir;
  EXPECT_NE(test::error_message([&] { latest_training_state(dir.path()); }).find("no run to resume under " + dir.path()),
            std::string::npos);
  for (const char* run : {"exp", "exp2", "exp3"}) {
    fs::create_directories(dir.file(std::string(run) + "/weights"));
    test::write_file(dir.file(std::string(run) + "/weights/last.state.safetensors"), "x");
  }
  test::write_file(dir.file("exp3/last.state.safetensors"), "x");  // not in a weights folder: not a run's
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(dir.file("exp/weights/last.state.safetensors"), now - std::chrono::hours(2));
  fs::last_write_time(dir.file("exp2/weights/last.state.safetensors"), now);
  fs::last_write_time(dir.file("exp3/weights/last.state.safetensors"), now - std::chrono::hours(1));
  fs::last_write_time(dir.file("exp3/last.state.safetensors"), now + std::chrono::hours(1));
  EXPECT_EQ(latest_training_state(dir.path()), dir.file("exp2/weights/last.state.safetensors"));
}

TEST(TrainingState, ForeignAndDamagedFilesNameThemselves) {
  test::TempDir dir;
  const std::string weights = dir.file("weights.safetensors");
  save_safetensors(weights, {{"a", at::zeros({1})}}, {{"format", "something-else"}});
  EXPECT_NE(test::error_message([&] { read_training_state(weights); }).find(weights + ": not a kestrel training state"),
            std::string::npos);
  // A state whose progress lacks a field, and one whose progress is not JSON.
  const std::string path = dir.file("state.safetensors");
  write_training_state(path, sample_state());
  SafetensorsContents raw = load_safetensors(path);
  nlohmann::json progress = nlohmann::json::parse(raw.metadata.at("progress"));
  progress.erase("next_batch");
  raw.metadata["progress"] = progress.dump();
  save_safetensors(path, raw.tensors, raw.metadata);
  std::string message = test::error_message([&] { read_training_state(path); });
  EXPECT_NE(message.find(path + ": malformed training progress"), std::string::npos) << message;
  raw.metadata["progress"] = "{not json";
  save_safetensors(path, raw.tensors, raw.metadata);
  message = test::error_message([&] { read_training_state(path); });
  EXPECT_NE(message.find(path + ": malformed training progress"), std::string::npos) << message;
  raw.metadata.erase("options");
  save_safetensors(path, raw.tensors, raw.metadata);
  message = test::error_message([&] { read_training_state(path); });
  EXPECT_NE(message.find(path + ": the training options are missing"), std::string::npos) << message;
}

// NaN in the saved EMA (or model, or optimiser state) would resume into a run that trains and saves NaN.
TEST(TrainingState, NonFiniteTensorsAreRefused) {
  test::TempDir dir;
  const std::string path = dir.file("state.safetensors");
  write_training_state(path, sample_state());
  SafetensorsContents raw = load_safetensors(path);
  size_t k = 0;
  while (!raw.tensors[k].second.is_floating_point()) ++k;
  raw.tensors[k].second = raw.tensors[k].second.clone();
  raw.tensors[k].second.view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
  save_safetensors(path, raw.tensors, raw.metadata);
  const std::string message = test::error_message([&] { read_training_state(path); });
  EXPECT_NE(message.find(path + ": tensor " + raw.tensors[k].first + " holds NaN or infinite values"), std::string::npos)
      << message;
}

// Found by fuzz/training_state_fuzz: progress and option numbers out of range (1e300) were converted with
// undefined behaviour, 2^40 wrapped, 1.5 was truncated, and negative counters or a world size of 0 were
// accepted for the resume.
TEST(TrainingState, OutOfRangeNumbersAreMalformed) {
  test::TempDir dir;
  const std::string path = dir.file("state.safetensors");
  write_training_state(path, sample_state());
  const SafetensorsContents good = load_safetensors(path);
  auto with_progress = [&](const char* key, const nlohmann::json& value) {
    SafetensorsContents raw = good;
    nlohmann::json progress = nlohmann::json::parse(raw.metadata.at("progress"));
    progress[key] = value;
    raw.metadata["progress"] = progress.dump();
    save_safetensors(path, raw.tensors, raw.metadata);
    return test::error_message([&] { read_training_state(path); });
  };
  for (const auto& [key, value] : std::vector<std::pair<const char*, nlohmann::json>>{
           {"epoch", 1e300}, {"epoch", 1ll << 40}, {"epoch", 1.5}, {"epoch", -1}, {"next_batch", -5}, {"best_epoch", -1},
           {"loss_count", -1}, {"ema_updates", -1}, {"last_opt_step", -2}, {"world_size", 0}, {"world_size", "2"}}) {
    const std::string message = with_progress(key, value);
    EXPECT_NE(message.find(path + ": malformed training progress"), std::string::npos) << key << "=" << value << ": " << message;
  }
  EXPECT_EQ(with_progress("last_opt_step", -1), "");  // before the first optimiser step
  EXPECT_EQ(read_training_state(path).progression.last_opt_step, -1);

  auto with_option = [&](const char* key, const nlohmann::json& value) {
    SafetensorsContents raw = good;
    nlohmann::json options = nlohmann::json::parse(raw.metadata.at("options"));
    options[key] = value;
    raw.metadata["options"] = options.dump();
    save_safetensors(path, raw.tensors, raw.metadata);
    return test::error_message([&] { read_training_state(path); });
  };
  for (const auto& [key, value] : std::vector<std::pair<const char*, nlohmann::json>>{
           {"epochs", 1e300}, {"epochs", 1ll << 40}, {"batch_size", 2.5}, {"seed", -1}, {"freeze", {1, 1e300}}}) {
    const std::string message = with_option(key, value);
    EXPECT_NE(message.find(path + ": the saved training option '" + key + "' is not a whole number"), std::string::npos)
        << key << "=" << value << ": " << message;
  }
  EXPECT_EQ(with_option("seed", 18446744073709551615ull), "");  // uint64_t's whole range
  EXPECT_EQ(read_training_state(path).options.seed, 18446744073709551615ull);
}

}  // namespace
}  // namespace kestrel::train
