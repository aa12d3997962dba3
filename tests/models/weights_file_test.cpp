// kestrel weights files: a round trip keeps every tensor, the class names and the YAML; a file whose
// embedded YAML describes a bigger network than its tensors is refused before that network is built.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include <ATen/ATen.h>

#include "kestrel/core/error.h"
#include "kestrel/core/safetensors.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/state_dict.h"
#include "kestrel/models/weights_file.h"
#include "test_support.h"

namespace kestrel::models {
namespace {

std::string save_yolov5n(const test::TempDir& dir) {
  at::manual_seed(3);
  const auto model = build_model(load_model_config(resolve_model_config_path("yolov5n")), 2);
  const std::string path = dir.file("yolov5n.safetensors");
  save_model_weights(path, *model, describe_config("yolov5n", {"cat", "dog"}));
  return path;
}

TEST(WeightsFile, RoundTripKeepsTensorsNamesAndConfig) {
  test::TempDir dir;
  at::manual_seed(3);
  const auto original = build_model(load_model_config(resolve_model_config_path("yolov5n")), 2);
  const std::string path = dir.file("w.safetensors");
  save_model_weights(path, *original, describe_config("yolov5n", {"cat", "dog"}));

  const LoadedModel loaded = load_model_weights(path);
  EXPECT_EQ(loaded.info.names, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(loaded.info.model_name, "yolov5n");
  const NamedTensors a = state_dict(*original), b = state_dict(*loaded.model);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(at::equal(a[i].second, b[i].second)) << a[i].first;
  }
}

// The fuzzing finding (fuzz/README.md): yolov5n's 1.9 M values with width_multiple 100 in the YAML.
// Layer 0 becomes Conv(3, 6400, k=6) (691,200 + 25,600 BN values: still within the file's ≈ 1.87 M);
// layer 1, Conv(6400, 12800, k=3), would be 737,280,000 values (2.9 GB) and must be refused before it
// is allocated.
TEST(WeightsFile, AConfigBiggerThanTheTensorsIsRefusedBeforeItIsBuilt) {
  test::TempDir dir;
  SafetensorsContents file = load_safetensors(save_yolov5n(dir));
  std::string& yaml = file.metadata.at("model_yaml");
  const auto at = yaml.find("width_multiple: 0.25");
  ASSERT_NE(at, std::string::npos);
  yaml.replace(at, std::string("width_multiple: 0.25").size(), "width_multiple: 100");
  const std::string bad = dir.file("wide.safetensors");
  save_safetensors(bad, file.tensors, file.metadata);

  const std::string message = test::error_message([&] { load_model_weights(bad); });
  EXPECT_NE(message.find(bad), std::string::npos) << message;
  EXPECT_NE(message.find("describe a bigger network than its tensors"), std::string::npos) << message;
  int64_t file_values = 0;  // the budget: twice every value the file's tensors hold, and a million
  for (const auto& [key, t] : file.tensors) file_values += t.numel();
  EXPECT_NE(message.find(cat("more than ", 2 * file_values + 1'000'000, " parameter values")), std::string::npos) << message;
  EXPECT_NE(message.find("convolution of shape [12800, 6400, 3, 3]"), std::string::npos) << message;
}

// The same file with its tensors intact but one class name more: the head grows by 3 x 1 outputs per
// level, within the budget; the strict load names the head's tensors whose shapes differ.
TEST(WeightsFile, MoreClassNamesThanTheHeadHoldsIsAnError) {
  test::TempDir dir;
  SafetensorsContents file = load_safetensors(save_yolov5n(dir));
  file.metadata.at("names") = R"(["cat", "dog", "bird"])";
  file.metadata.at("nc") = "3";
  const std::string bad = dir.file("names.safetensors");
  save_safetensors(bad, file.tensors, file.metadata);
  const std::string message = test::error_message([&] { load_model_weights(bad); });
  EXPECT_NE(message.find(bad), std::string::npos) << message;
  EXPECT_NE(message.find("model.24.m.0.weight"), std::string::npos) << message;
}

// last.state.safetensors given where weights go (detect, val, export, train --weights): named as what it is.
TEST(WeightsFile, ATrainingStateIsNamedWithTheWeightsToGiveInstead) {
  test::TempDir dir;
  const std::string state = dir.file("last.state.safetensors");
  save_safetensors(state, {{"model.0.conv.weight", at::zeros({2})}}, {{"format", "kestrel-train-state-1"}});
  const std::string message = test::error_message([&] { load_model_weights(state); });
  EXPECT_NE(message.find(state + ": a training state"), std::string::npos) << message;
  EXPECT_NE(message.find("weights/last.safetensors and best.safetensors"), std::string::npos) << message;
}

// An ONNX file given as weights (upstream's detect.py and val.py run them) is named as such, not as a
// PyTorch checkpoint to convert; a kestrel weights file that is merely called .onnx still loads.
TEST(WeightsFile, AnOnnxModelIsNamed) {
  test::TempDir dir;
  const std::string onnx = dir.file("yolov5n.onnx");
  test::write_file(onnx, std::string("\x08\x07\x12\x07kestrel", 11));  // ir_version 7, producer_name
  const std::string message = test::error_message([&] { load_model_weights(onnx); });
  EXPECT_NE(message.find(onnx + ": not a kestrel weights file but (by its name) an ONNX model"), std::string::npos) << message;
  // A missing file is said to be missing, whatever its name.
  const std::string missing = test::error_message([&] { load_model_weights(dir.file("none.onnx")); });
  EXPECT_NE(missing.find("not found"), std::string::npos) << missing;
  EXPECT_EQ(missing.find("ONNX"), std::string::npos) << missing;
  // kestrel weights under an .onnx name load.
  auto model = build_model(load_model_config(resolve_model_config_path("yolov5n")), 2);
  const std::string named = dir.file("weights.onnx");
  save_model_weights(named, *model, describe_config("yolov5n", {"a", "b"}));
  EXPECT_EQ(load_model_weights(named).info.names, (std::vector<std::string>{"a", "b"}));
}

// A tensor missing from the file (removed by hand): the network is built and the strict load names it,
// rather than the budget refusing a network bigger than the file by that tensor.
TEST(WeightsFile, AMissingTensorIsNamed) {
  test::TempDir dir;
  SafetensorsContents file = load_safetensors(save_yolov5n(dir));
  ASSERT_EQ(file.tensors.front().first, "model.0.conv.weight");
  file.tensors.erase(file.tensors.begin());
  const std::string bad = dir.file("missing.safetensors");
  save_safetensors(bad, file.tensors, file.metadata);
  const std::string message = test::error_message([&] { load_model_weights(bad); });
  EXPECT_NE(message.find(bad), std::string::npos) << message;
  EXPECT_NE(message.find("model.0.conv.weight"), std::string::npos) << message;
  EXPECT_EQ(message.find("parameter values"), std::string::npos) << message;
}

// Weights with a NaN (a diverged run, damaged bytes) would load and detect nothing, or train on NaN; a
// class count in the metadata that disagrees with the names means the file was edited by hand.
TEST(WeightsFile, NonFiniteTensorsAndAClassCountThatDisagreesAreErrors) {
  test::TempDir dir;
  const SafetensorsContents good = load_safetensors(save_yolov5n(dir));
  SafetensorsContents file = good;
  size_t k = 5;
  while (file.tensors[k].second.scalar_type() != at::kFloat) ++k;  // a weight, not a batch counter
  file.tensors[k].second = file.tensors[k].second.clone();
  file.tensors[k].second.view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
  const std::string nan = dir.file("nan.safetensors");
  save_safetensors(nan, file.tensors, file.metadata);
  std::string message = test::error_message([&] { load_model_weights(nan); });
  EXPECT_NE(message.find(nan + ": tensor " + file.tensors[k].first + " holds NaN or infinite values"), std::string::npos) << message;
  // F64 weights load as float32: 1e300 is finite in the file and infinite in the model
  file = good;
  file.tensors[k].second = file.tensors[k].second.to(at::kDouble);
  file.tensors[k].second.view(-1)[0] = 1e300;
  const std::string wide = dir.file("wide.safetensors");
  save_safetensors(wide, file.tensors, file.metadata);
  message = test::error_message([&] { load_model_weights(wide); });
  EXPECT_NE(message.find(wide + ": tensor " + file.tensors[k].first + " (F64) holds values beyond float32's range"), std::string::npos)
      << message;
  file.tensors[k].second.view(-1)[0] = 1e30;  // within float32's range: loads
  save_safetensors(wide, file.tensors, file.metadata);
  EXPECT_NO_THROW(load_model_weights(wide));
  file = good;
  file.metadata.at("nc") = "5";
  const std::string nc = dir.file("nc.safetensors");
  save_safetensors(nc, file.tensors, file.metadata);
  message = test::error_message([&] { load_model_weights(nc); });
  EXPECT_NE(message.find(nc + ": weights metadata says nc 5 but lists 2 class names"), std::string::npos) << message;
}

// A weight stored as integers (a damaged or hand-edited file) is refused, not converted into garbage weights.
TEST(WeightsFile, IntegerTensorsForFloatWeightsAreRefused) {
  test::TempDir dir;
  SafetensorsContents file = load_safetensors(save_yolov5n(dir));
  size_t k = 0;
  while (file.tensors[k].second.scalar_type() != at::kFloat) ++k;
  file.tensors[k].second = file.tensors[k].second.to(at::kInt);
  const std::string ints = dir.file("ints.safetensors");
  save_safetensors(ints, file.tensors, file.metadata);
  const std::string message = test::error_message([&] { load_model_weights(ints); });
  EXPECT_NE(message.find(file.tensors[k].first + ": file int vs model float"), std::string::npos) << message;
}

}  // namespace
}  // namespace kestrel::models
