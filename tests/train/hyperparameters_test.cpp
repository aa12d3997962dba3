// Hyperparameter files: the shipped recipes hold upstream's values (shared/reference/peers.md §1.4), and
// malformed files are errors naming the file and key.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "kestrel/core/error.h"
#include "kestrel/train/hyperparameters.h"
#include "test_support.h"

namespace kestrel::train {
namespace {

TEST(Hyperparameters, ScratchLowIsTheDefault) {
  const Hyperparameters file = load_hyperparameters("configs/hyps/hyp.scratch-low.yaml");
  const Hyperparameters none = default_hyperparameters();
  EXPECT_EQ(hyperparameters_yaml(file), hyperparameters_yaml(none));
  EXPECT_DOUBLE_EQ(file.lrf, 0.01);
  EXPECT_DOUBLE_EQ(file.loss.cls, 0.5);
  EXPECT_DOUBLE_EQ(file.augment.mixup, 0.0);
  EXPECT_FALSE(file.loss_ota);
  EXPECT_TRUE(file.unknown_keys.empty());
}

// ultralytics/yolov3 v9.6.0's data/hyps/hyp.scratch.yaml, read by hand from the v9.6.0 tag: every key and value
// of YOLOv5 v7.0's hyp.scratch-low.yaml, with lrf 0.1 for 0.01.
TEST(Hyperparameters, Yolov3ScratchIsScratchLowWithLrf01) {
  const Hyperparameters v3 = load_hyperparameters("configs/hyps/hyp.scratch.yaml");
  Hyperparameters low = load_hyperparameters("configs/hyps/hyp.scratch-low.yaml");
  EXPECT_DOUBLE_EQ(v3.lrf, 0.1);
  for (auto& [key, value] : low.values)
    if (key == "lrf") value = 0.1;
  EXPECT_EQ(v3.values, low.values);
  EXPECT_FALSE(v3.loss_ota);
  EXPECT_TRUE(v3.unknown_keys.empty());
  EXPECT_TRUE(v3.defaulted_keys.empty());
}

// hyp.yaml reads back as the file it came from, an unknown key that is not a plain name included (quoted, as
// yaml.safe_dump quotes it; written bare it made the run's hyp.yaml malformed and the run unresumable).
TEST(Hyperparameters, WrittenFileReadsBackWithOddKeys) {
  test::TempDir dir;
  std::ifstream in("configs/hyps/hyp.scratch-low.yaml");
  const std::string low((std::istreambuf_iterator<char>(in)), {});
  test::write_file(dir.file("odd.yaml"), low + "\"odd: key\": 1.5\n\"#hash\": 2.0\n");
  const Hyperparameters a = load_hyperparameters(dir.file("odd.yaml"));
  test::write_file(dir.file("again.yaml"), hyperparameters_yaml(a));
  const Hyperparameters b = load_hyperparameters(dir.file("again.yaml"));
  EXPECT_EQ(a.values, b.values);
  EXPECT_NE(hyperparameters_yaml(a).find("\"odd: key\": 1.5\n"), std::string::npos) << hyperparameters_yaml(a);
}

TEST(Hyperparameters, Yolov7RecipesAreRecognised) {
  const Hyperparameters p5 = load_hyperparameters("configs/hyps/hyp.scratch.p5.yaml");
  EXPECT_TRUE(p5.loss_ota);
  EXPECT_TRUE(p5.yolov7_recipe);
  EXPECT_DOUBLE_EQ(p5.lrf, 0.1);
  EXPECT_DOUBLE_EQ(p5.loss.obj, 0.7);
  EXPECT_DOUBLE_EQ(p5.augment.translate, 0.2);
  EXPECT_DOUBLE_EQ(p5.augment.scale, 0.9);
  EXPECT_DOUBLE_EQ(p5.augment.mixup, 0.15);
  EXPECT_DOUBLE_EQ(p5.augment.paste_in, 0.15);
  EXPECT_DOUBLE_EQ(p5.augment.mosaic9, 0.2);
  const Hyperparameters tiny = load_hyperparameters("configs/hyps/hyp.scratch.tiny.yaml");
  EXPECT_DOUBLE_EQ(tiny.lrf, 0.01);
  EXPECT_DOUBLE_EQ(tiny.augment.mixup, 0.05);
  const Hyperparameters high = load_hyperparameters("configs/hyps/hyp.scratch-high.yaml");
  EXPECT_DOUBLE_EQ(high.augment.copy_paste, 0.1);
  EXPECT_FALSE(high.loss_ota);
  // YOLOv5 HEAD's hyp.no-augmentation.yaml (shared/reference/peers.md: all augmentation 0, cls 0.3, obj 0.7, lrf 0.1).
  const Hyperparameters plain = load_hyperparameters("configs/hyps/hyp.no-augmentation.yaml");
  EXPECT_TRUE(plain.defaulted_keys.empty());
  EXPECT_DOUBLE_EQ(plain.lrf, 0.1);
  EXPECT_DOUBLE_EQ(plain.loss.cls, 0.3);
  EXPECT_DOUBLE_EQ(plain.loss.obj, 0.7);
  for (double v : {plain.augment.hsv_h, plain.augment.hsv_s, plain.augment.hsv_v, plain.augment.degrees, plain.augment.translate,
                   plain.augment.scale, plain.augment.shear, plain.augment.perspective, plain.augment.flipud,
                   plain.augment.fliplr, plain.augment.mosaic, plain.augment.mixup, plain.augment.copy_paste})
    EXPECT_EQ(v, 0.0);
}

// YOLOv7's train.py: `'loss_ota' not in hyp or hyp['loss_ota'] == 1` selects OTA, so a YOLOv7 file (paste_in)
// without the key trains with OTA; loss_ota: 0 turns it off; a YOLOv5 file without it does not.
TEST(Hyperparameters, Yolov7FileWithoutLossOtaMeansOta) {
  test::TempDir dir;
  test::write_file(dir.file("v7.yaml"), "lr0: 0.01\npaste_in: 0.1\n");
  test::write_file(dir.file("v7off.yaml"), "lr0: 0.01\npaste_in: 0.1\nloss_ota: 0\n");
  test::write_file(dir.file("v5.yaml"), "lr0: 0.01\nmosaic: 1.0\n");
  EXPECT_TRUE(load_hyperparameters(dir.file("v7.yaml")).loss_ota);
  EXPECT_FALSE(load_hyperparameters(dir.file("v7off.yaml")).loss_ota);
  EXPECT_FALSE(load_hyperparameters(dir.file("v5.yaml")).loss_ota);
  test::write_file(dir.file("v7two.yaml"), "lr0: 0.01\npaste_in: 0.1\nloss_ota: 2\n");  // not == 1: plain loss
  EXPECT_FALSE(load_hyperparameters(dir.file("v7two.yaml")).loss_ota);
}

TEST(Hyperparameters, BadFilesNameTheFileAndKey) {
  const auto dir = std::filesystem::temp_directory_path() / "kestrel_hyp_test";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    const auto path = (dir / name).string();
    std::ofstream(path) << text;
    return path;
  };
  const std::string text_value = write("a.yaml", "lr0: 0.01\nmomentum: fast\n");
  try {
    load_hyperparameters(text_value);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a.yaml:2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("momentum"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_hyperparameters(write("b.yaml", "lr0: -1\n")), Error);
  EXPECT_THROW(load_hyperparameters(write("c.yaml", "- 1\n- 2\n")), Error);
  EXPECT_THROW(load_hyperparameters((dir / "missing.yaml").string()), Error);
  const Hyperparameters unknown = load_hyperparameters(write("d.yaml", "lr0: 0.02\nmy_key: 3\n"));
  EXPECT_DOUBLE_EQ(unknown.lr0, 0.02);
  ASSERT_EQ(unknown.unknown_keys.size(), 1u);
  EXPECT_EQ(unknown.unknown_keys[0], "my_key");
  std::filesystem::remove_all(dir);
}

// A file without some keys trains on hyp.scratch-low's values for them (upstream fails with a KeyError):
// they are listed, and the run's hyp.yaml holds every value trained with. Probabilities above 1, a scale
// gain of 1 or more and a negative warm-up are refused with the file, line and key.
TEST(Hyperparameters, MissingKeysAreListedAndOutOfRangeValuesRefused) {
  test::TempDir dir;
  const auto write = [&](const std::string& name, const std::string& text) {
    test::write_file(dir.file(name), text);
    return dir.file(name);
  };
  const Hyperparameters partial = load_hyperparameters(write("p.yaml", "lr0: 0.02\nmosaic: 0.5\n"));
  EXPECT_DOUBLE_EQ(partial.lr0, 0.02);
  EXPECT_DOUBLE_EQ(partial.momentum, 0.937);
  EXPECT_EQ(partial.defaulted_keys.size(), default_hyperparameters().values.size() - 2);
  EXPECT_NE(std::find(partial.defaulted_keys.begin(), partial.defaulted_keys.end(), "momentum"), partial.defaulted_keys.end());
  const std::string yaml = hyperparameters_yaml(partial);
  EXPECT_EQ(yaml.rfind("lr0: 0.02\nmosaic: 0.5\n", 0), 0u) << yaml;  // the file's keys first, as read
  EXPECT_NE(yaml.find("\nmomentum: 0.937\n"), std::string::npos) << yaml;
  EXPECT_TRUE(load_hyperparameters("configs/hyps/hyp.scratch-low.yaml").defaulted_keys.empty());
  EXPECT_TRUE(load_hyperparameters("configs/hyps/hyp.scratch.p5.yaml").defaulted_keys.empty());
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"lr0: 0.01\nmosaic: 2\n", "m.yaml:2: 'mosaic' is a probability: at most 1, got 2"},
      {"lr0: 0.01\nfliplr: 1.5\n", "m.yaml:2: 'fliplr' is a probability: at most 1, got 1.5"},
      {"lr0: 0.01\nscale: 1.5\n", "m.yaml:2: 'scale' is a gain below 1"},
      {"warmup_epochs: -3\n", "m.yaml: 'warmup_epochs' must be >= 0"},
      {"lr0: 1e30\n", "m.yaml:1: 'lr0' must be in [0, 10], got 1e+30"},
      {"lr0: 0.01\nweight_decay: -1\n", "m.yaml:2: 'weight_decay' must be in [0, 1], got -1"},
      {"iou_t: -1\n", "m.yaml:1: 'iou_t' must be in [0, 1], got -1"},
      {"hsv_v: 1e9\n", "m.yaml:1: 'hsv_v' must be at most 1, got 1e+09"},
      {"translate: 10\n", "m.yaml:1: 'translate' must be at most 1, got 10"},
      {"shear: 1e6\n", "m.yaml:1: 'shear' must be at most 89, got 1e+06"},
      {"perspective: 10\n", "m.yaml:1: 'perspective' must be at most 0.1, got 10"},
      // (its warm-up's iteration count overflowed, and the run trained as without a warm-up)
      {"warmup_epochs: 1e300\n", "m.yaml:1: 'warmup_epochs' must be in [0, 1e+06], got 1e+300"},
      {"lr0: 0.01\n[a, b]: 1\n", "m.yaml:2: a key must be a plain name, not a list or mapping"}};
  // every shipped file is inside the ranges
  for (const auto& file : std::filesystem::directory_iterator("configs/hyps"))
    EXPECT_EQ(test::error_message([&] { load_hyperparameters(file.path().string()); }), "") << file.path();
  for (const auto& [text, message] : refused) {
    const std::string error = test::error_message([&] { load_hyperparameters(write("m.yaml", text)); });
    EXPECT_NE(error.find(message), std::string::npos) << text << " -> " << error;
  }
}

}  // namespace
}  // namespace kestrel::train
