// The kestrel executable as a user runs it: exit codes and messages.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <cstdlib>
#include <iterator>
#include <regex>

#include "kestrel/data/dataset_config.h"
#include "kestrel/data/image_io.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/weights_file.h"
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace kestrel {
namespace {

test::CommandResult kestrel(const std::string& args) { return test::run_command(test::kestrel_binary() + " " + args); }

TEST(Cli, ModelsPrintsEveryShippedConfig) {
  auto r = kestrel("models --img 320");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* name : {"yolov3 ", "yolov3-tiny", "yolov5n", "yolov5s", "yolov5m", "yolov5l", "yolov5x", "yolov7 ",
                           "yolov7-tiny", "yolov7x", "yolor-csp", "yolov4-csp", "yolor-p6", "r50-csp"})
    EXPECT_NE(r.output.find(name), std::string::npos) << name;
  // 16.43 GFLOPs at 640 is 4.11 at 320 (a quarter of the area)
  EXPECT_NE(r.output.find("7235389 parameters"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("4.11 GFLOPs@320"), std::string::npos) << r.output;
}

TEST(Cli, ModelsTableForOneConfig) {
  auto r = kestrel("models yolov5n --nc 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Detect"), std::string::npos);
  EXPECT_NE(r.output.find("YOLOv5n summary: 25 layers"), std::string::npos) << r.output;  // model_info's capitals
  EXPECT_NE(r.output.find("strides 8,16,32"), std::string::npos) << r.output;
  // yolo.py's spelling, --cfg
  r = kestrel("models --cfg yolov5n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("YOLOv5n summary: 25 layers"), std::string::npos) << r.output;
}

// The shipped set is kestrel's own, also where the working folder has a configs/models of the user's; a
// config that cannot be built is named and the others are still shown, the exit code saying one failed.
TEST(Cli, ModelsListsTheShippedSetAndGoesOnPastABadConfig) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("configs/models"));
  test::write_file(dir.file("configs/models/aa.yaml"), "nc: 80\n");
  auto r = test::run_command("cd " + dir.path() + " && " + test::kestrel_binary() + " models");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("yolov5n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("aa.yaml"), std::string::npos) << r.output;
  // A module kestrel does not know is named as such, also with a repeat count (it was "a repeat count > 1 is
  // not supported" for a typo).
  test::write_file(dir.file("typo.yaml"),
                   "nc: 80\ndepth_multiple: 1.0\nwidth_multiple: 1.0\nanchors: 3\nbackbone:\n  [[-1, 1, Conv, [16, 3, 2]],\n"
                   "   [-1, 2, Cnv, [32, 3, 2]]]\nhead:\n  [[[1], 1, Detect, [nc, anchors]]]\n");
  r = kestrel("models " + dir.file("typo.yaml") + " yolov5n");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("unknown module 'Cnv'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("YOLOv5n summary: 25 layers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 of 2 model configs could not be built"), std::string::npos) << r.output;
  // Output that cannot be written is an error (a full disk), as Python's failed print.
  if (std::filesystem::exists("/dev/full")) {
    r = test::run_command("(" + test::kestrel_binary() + " models yolov5n > /dev/full)");  // stderr still captured
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("error: writing the standard output failed"), std::string::npos) << r.output;
  }
}

TEST(Cli, BadInputGivesAClearErrorAndExitCode) {
  test::TempDir dir;
  test::write_file(dir.file("broken.yaml"), "nc: 80\ndepth_multiple: [\n");
  auto r = kestrel("models " + dir.file("broken.yaml"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("error: " + dir.file("broken.yaml")), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("malformed YAML"), std::string::npos) << r.output;
  r = kestrel("models --img 7");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--img"), std::string::npos) << r.output;
  // Several --weights (upstream's detect.py ensembles them, export.py exports each): one, said so.
  r = kestrel("detect --weights a.safetensors b.safetensors --source x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--weights: 2 files given; kestrel takes one (detect.py would ensemble them)"), std::string::npos)
      << r.output;
  r = kestrel("export --weights a.safetensors b.safetensors c.safetensors");
  EXPECT_NE(r.output.find("--weights: 3 files given; kestrel takes one (export.py exports each"), std::string::npos)
      << r.output;
  r = kestrel("frobnicate");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("error: unknown subcommand 'frobnicate' (one of: train, val, detect"), std::string::npos) << r.output;
  // Upstream's script names say which subcommand is theirs.
  r = kestrel("test --weights w.safetensors");
  EXPECT_NE(r.output.find("error: unknown subcommand 'test'; upstream's test.py is kestrel val (one of:"), std::string::npos) << r.output;
  r = kestrel("train_aux.py --cfg yolov7-w6");
  EXPECT_NE(r.output.find("upstream's train_aux.py is kestrel train (P6 configs train with the auxiliary-head loss)"), std::string::npos)
      << r.output;
}

// argparse's abbreviations, as upstream's scripts take them: a unique prefix is the flag (--epoch 0 reaches
// --epochs' own check), several flags are named, and a flag that is no prefix names the subcommand's --help.
TEST(Cli, FlagAbbreviationsAsArgparse) {
  auto r = kestrel("train --epoch 0 --device cpu");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--epochs: Value 0 not in range 1"), std::string::npos) << r.output;
  r = kestrel("train --epoch=0 --device cpu");
  EXPECT_NE(r.output.find("--epochs: Value 0 not in range 1"), std::string::npos) << r.output;
  r = kestrel("train --im 64 --device cpu");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("ambiguous option: --im could match --img"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--image-weights"), std::string::npos) << r.output;
  // A prefix that only kestrel's longer flags make ambiguous is upstream's flag, which they extend (train.py
  // has --evolve, not --evolve-population; YOLOv7's --cache-images caches in RAM as --cache does).
  r = kestrel("train --evol 0 --device cpu");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--evolve: Value 0 not in range 1"), std::string::npos) << r.output;
  r = kestrel("train --cach frob --device cpu");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.output.find("ambiguous"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--cache: frob not in {ram,disk,val}"), std::string::npos) << r.output;
  // YOLOv7's export.py has --dynamic and --dynamic-batch: --dyn stays ambiguous, as there.
  r = kestrel("export --weights w.safetensors --dyn");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("ambiguous option: --dyn could match --dynamic, --dynamic-batch"), std::string::npos) << r.output;
  r = kestrel("train --epoh 3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("error: kestrel train: unknown flag --epoh (kestrel train --help lists its flags)"), std::string::npos)
      << r.output;
  // argparse's last value of a flag given twice (CLI11 refused: "At Most 1 required but received 2")
  r = kestrel("train --cfg yolov5n --cfg no-such-model --device cpu");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no-such-model: no such file"), std::string::npos) << r.output;
  // A list flag given twice, once abbreviated, is counted as the flag it stands for (CLI11 would join the sizes).
  r = kestrel("train --img 64 --img-s 96 --device cpu");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--img: given more than once"), std::string::npos) << r.output;
  // --weights twice would be joined into an ensemble; argparse keeps the last use: refused, saying so.
  for (const char* command : {"val", "detect", "export"}) {
    r = kestrel(std::string(command) + " --weights a.safetensors --weig b.safetensors");
    EXPECT_NE(r.exit_code, 0) << command;
    EXPECT_NE(r.output.find("--weights: given more than once; give all its values after one --weights"), std::string::npos)
        << command << ": " << r.output;
  }
  // --help wins over an unknown flag, as argparse prints the help first.
  r = kestrel("train --foo --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--epochs"), std::string::npos) << r.output;
  // a .py name that is no upstream script of a subcommand gets no hint
  r = kestrel("a.py");
  EXPECT_NE(r.output.find("error: unknown subcommand 'a.py' (one of:"), std::string::npos) << r.output;
  // nested subcommands: bench data's own flags
  r = kestrel("bench data --dat data/demo/demo.yaml --img 0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--img"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("unknown flag"), std::string::npos) << r.output;
}

TEST(Cli, EnvReportsVersions) {
  auto r = kestrel("env");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("libtorch     2.11.0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cpu threads"), std::string::npos) << r.output;
  // the backends this build has, each said (DistGloo's tests need Gloo; CI's CPU build has no NCCL device to try)
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\ndistributed  gloo (yes|no), nccl (yes|no)\n"))) << r.output;
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

TEST(CliData, CheckReportsCountsAndHistogram) {
  auto r = test::run_command(test::kestrel_binary() + " data check data/demo/demo.yaml --no-cache");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // demo: 32 train images with 250 boxes, 16 val images with 115 boxes (data/demo/README.md)
  EXPECT_NE(r.output.find("train: 32 images, 32 labelled, 0 without label file, 0 empty, 0 skipped, 250 boxes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("val: 16 images, 16 labelled, 0 without label file, 0 empty, 0 skipped, 115 boxes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("person"), std::string::npos);
}

TEST(CliData, SplitWithoutUsableSamplesIsAnError) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("images/train"));
  test::write_file(dir.file("images/train/a.jpg"), "not a jpeg");
  test::write_file(dir.file("d.yaml"), "path: .\ntrain: images/train\nval: images/train\nnames: [a]\n");
  auto r = test::run_command(test::kestrel_binary() + " data check " + dir.file("d.yaml") + " --no-cache");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  // not JPEG or PNG content: OpenCV's turn through the plugin, or an error saying it is missing
  EXPECT_TRUE(r.output.find("a.jpg: corrupt or unsupported image") != std::string::npos ||
              r.output.find("a.jpg: not a JPEG or PNG") != std::string::npos) << r.output;
  EXPECT_NE(r.output.find("a split has no usable sample"), std::string::npos) << r.output;
  // Images without any label file (labels put elsewhere): upstream's "No labels found", naming where they go.
  std::filesystem::create_directories(dir.file("nolabels/images/train"));
  std::filesystem::copy_file("data/demo/images/val/000000000139.jpg", dir.file("nolabels/images/train/a.jpg"));
  test::write_file(dir.file("nolabels/d.yaml"), "path: .\ntrain: images/train\nval: images/train\nnames: [a]\n");
  r = test::run_command(test::kestrel_binary() + " data check " + dir.file("nolabels/d.yaml") + " --no-cache");
  EXPECT_NE(r.output.find("WARNING: no labels found in train: no image has a label file (e.g. " +
                          dir.file("nolabels/labels/train/a.txt") + ")"), std::string::npos) << r.output;

  // Training on it names the dataset file, the split and its folder; a split with no images says so, and a
  // split the file does not have (val --task test on a YAML without `test:`) is named as missing.
  r = test::run_command(test::kestrel_binary() + " train --data " + dir.file("d.yaml") +
                        " --cfg yolov5n.yaml --img 64 --epochs 1 --device cpu --project " + dir.file("runs"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(dir.file("d.yaml") + ": none of the 1 images of the train split"), std::string::npos) << r.output;
  std::filesystem::create_directories(dir.file("images/empty"));
  test::write_file(dir.file("e.yaml"), "path: .\ntrain: images/empty\nval: images/empty\nnames: [a]\n");
  r = test::run_command(test::kestrel_binary() + " bench data --data " + dir.file("e.yaml") + " --img 64 --batch-size 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("e.yaml: the train split ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(") has no images"), std::string::npos) << r.output;
  // A YOLOv7 hyp file measures YOLOv7's augmentations (mosaic-9, its zoom), as training with it would use.
  r = test::run_command(test::kestrel_binary() + " bench data --data data/demo/demo.yaml --img 64 --batch-size 8 --workers 1 " +
                        "--epochs 1 --hyp configs/hyps/hyp.scratch.p5.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("images an epoch, YOLOv7's augmentations"), std::string::npos) << r.output;
  // The hyp file read as training reads it: a misspelt key is named (it would time the defaults), and a file
  // that is no hyp file (the dataset YAML) is refused.
  test::write_file(dir.file("typo.yaml"), "mosiac: 0.0\n");
  for (const std::string& command : {std::string(" bench data --data data/demo/demo.yaml --img 64 --batch-size 8 --workers 1 --epochs 1"),
                                     " data show data/demo/demo.yaml --img 64 --batch-size 2 --workers 1 --out " + dir.file("s.jpg")}) {
    r = test::run_command(test::kestrel_binary() + command + " --hyp " + dir.file("typo.yaml"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("typo.yaml: keys kestrel does not use: mosiac"), std::string::npos) << command << r.output;
    r = test::run_command(test::kestrel_binary() + command + " --hyp data/demo/demo.yaml");
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("'path' must be a number"), std::string::npos) << command << r.output;
  }
  // --json: stdout holds the JSON object alone (reports and notes go to stderr).
  r = test::run_command(test::kestrel_binary() + " bench data --data data/demo/demo.yaml --img 64 --batch-size 8 --workers 1 "
                        "--epochs 1 --json 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NO_THROW((void)nlohmann::json::parse(r.output)) << r.output;
  // --cache is checked with the other flags, before the split is indexed; "none" as bench e2e takes it.
  r = test::run_command(test::kestrel_binary() + " bench data --data data/demo/demo.yaml --cache foo");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--cache: foo not in {ram,disk,none}"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("images, "), std::string::npos) << "indexed before the flag was refused: " << r.output;
  r = test::run_command(test::kestrel_binary() + " bench data --data data/demo/demo.yaml --img 64 --batch-size 8 --workers 1 "
                        "--epochs 1 --cache none");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = test::run_command(test::kestrel_binary() + " val --task test --data data/demo/demo.yaml --device cpu --weights w.safetensors");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("data/demo/demo.yaml: no 'test' split"), std::string::npos) << r.output;
}

TEST(CliData, ShowWritesAnImage) {
  test::TempDir dir;
  auto r = test::run_command(test::kestrel_binary() + " data show data/demo/demo.yaml --img 128 --batch-size 4 --out " + dir.file("b.txt"));
  EXPECT_NE(r.exit_code, 0);  // a JPEG under another name
  EXPECT_NE(r.output.find("--out: kestrel writes a JPEG: name it .jpg"), std::string::npos) << r.output;
  // into a split's folder, where the image and labels.jpg would join the split: refused
  r = test::run_command(test::kestrel_binary() + " data show data/demo/demo.yaml --img 128 --batch-size 4 --out data/demo/images/train/x.jpg");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--out data/demo/images/train/x.jpg: inside the dataset's train images"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists("data/demo/images/train/x.jpg"));
  r = test::run_command(test::kestrel_binary() + " data show data/demo/demo.yaml --img 128 --batch-size 4 --out " + dir.file("b.jpg"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::file_size(dir.file("b.jpg")) > 1000);
  // 4 images of 128: a 2 x 2 grid at full size; labels.jpg and labels_correlogram.jpg beside it, over every
  // box of the 32 training images (one per non-empty line of their label files).
  EXPECT_EQ(data::decode_image_file(dir.file("b.jpg")).image.size(), cv::Size(256, 256));
  EXPECT_EQ(data::decode_image_file(dir.file("labels.jpg")).image.size(), cv::Size(1600, 1600));
  EXPECT_EQ(data::decode_image_file(dir.file("labels_correlogram.jpg")).image.size(), cv::Size(2000, 2000));
  int boxes = 0;
  for (const auto& entry : std::filesystem::directory_iterator("data/demo/labels/train")) {
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) boxes += line.find_first_not_of(" \t\r") != std::string::npos;
  }
  EXPECT_NE(r.output.find(": " + std::to_string(boxes) + " boxes in 32 training images -> " + dir.file("labels.jpg")),
            std::string::npos) << r.output;
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// train -> val through the executable, on two epochs of the demo data at a small size.
TEST(CliTrain, TrainsThenValidatesItsWeights) {
  test::TempDir dir;
  auto r = test::run_command(test::kestrel_binary() + " train --cfg yolov5n --data data/demo/demo.yaml --epochs 2 --img 128"
                             " --batch-size 16 --workers 2 --device cpu --quiet --project " + dir.file("runs"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\n2 epochs completed in 0.0"), std::string::npos) << r.output;  // train.py's line, in hours
  EXPECT_NE(r.output.find(" hours.\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Results saved to " + dir.file("runs/exp")), std::string::npos) << r.output;
  // the workers: --workers 2, fewer on a machine of one core
  EXPECT_NE(r.output.find("Image sizes 128 train, 128 val\nUsing "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" dataloader workers\nLogging results to " + dir.file("runs/exp") + "\nStarting training for 2 epochs...\n"),
            std::string::npos) << r.output;
  const std::string weights = dir.file("runs/exp/weights/best.safetensors");
  ASSERT_TRUE(std::filesystem::exists(weights));
  r = test::run_command(test::kestrel_binary() + " val --data data/demo/demo.yaml --img 128 --device cpu --weights " + weights +
                        " --save-json --project " + dir.file("val"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mAP50-95"), std::string::npos) << r.output;
  // 16 val images with 115 label rows (wc -l data/demo/labels/val/*.txt): every label counts, however small
  EXPECT_NE(r.output.find("                   all         16        115"), std::string::npos) << r.output;
  // --v3-metric's wiring (its numbers: tests/eval/ap_metrics_test.cpp, against v9.6.0's functions).
  auto v3 = test::run_command(test::kestrel_binary() + " val --data data/demo/demo.yaml --img 128 --device cpu --weights " +
                              weights + " --v3-metric --project " + dir.file("val") + " --name v3");
  ASSERT_EQ(v3.exit_code, 0) << v3.output;
  EXPECT_NE(v3.output.find("                   all         16        115"), std::string::npos) << v3.output;
  // A 2-epoch model scores every box below val's 0.001: as val.py (`if save_json and len(jdict)`), no JSON.
  EXPECT_FALSE(std::filesystem::exists(dir.file("val/exp/best_predictions.json"))) << r.output;
  // --coco-ann scores the written predictions with kestrel's COCOeval. The wiring is what is checked here
  // (the evaluator itself is checked against pycocotools in tests/eval/coco_eval_test.cpp): pycocotools
  // accepts the file for `kestrel data coco`'s annotations (its loadRes refuses image ids they do not list)
  // and prints the same AP and AR@100, which for a 2-epoch model are near 0.
  r = test::run_command(test::kestrel_binary() + " data coco data/demo/demo.yaml --split val --out " + dir.file("ann.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_command(test::kestrel_binary() + " val --data data/demo/demo.yaml --img 128 --device cpu --weights " + weights +
                        " --save-json --conf-thres 0.000001 --coco-ann " + dir.file("ann.json") + " --project " +
                        dir.file("val") + " --name coco");  // a 2-epoch model's scores are tiny: keep them
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto line_of = [](const std::string& text, const std::string& start) {
    const size_t at = text.find(start);
    return at == std::string::npos ? std::string() : text.substr(at, text.find('\n', at) - at);
  };
  const std::string ap = " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ]";
  const std::string ar = " Average Recall     (AR) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ]";
  ASSERT_NE(line_of(r.output, ap), "") << r.output;
  ASSERT_NE(r.output.find("\nEvaluating pycocotools mAP... saving " + dir.file("val/coco/best_predictions.json") + "...\n"),
            std::string::npos) << r.output;
  const auto py = test::run_python("from pycocotools.coco import COCO\nfrom pycocotools.cocoeval import COCOeval\n"
                                   "gt = COCO('" + dir.file("ann.json") + "')\n"
                                   "e = COCOeval(gt, gt.loadRes('" + dir.file("val/coco/best_predictions.json") + "'), 'bbox')\n"
                                   "e.evaluate(); e.accumulate(); e.summarize()\n");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  EXPECT_EQ(line_of(r.output, ap), line_of(py.output, ap)) << py.output;
  EXPECT_EQ(line_of(r.output, ar), line_of(py.output, ar)) << py.output;

  // COCO as val.py finds it: a YAML named coco.yaml, its <path>/annotations/instances_val2017.json (here the
  // demo's annotations with COCO's category ids 1..90, remapped in Python, and no category names, so that
  // only COCO's 80 -> 91 table can name them), no flags. The predictions are
  // saved and scored by themselves, with COCO's ids: the same detections as above, each category id the
  // COCO id of the class id written above (COCO's table built in Python: 1..90 without its ten unused ids).
  const auto coco = test::run_python(
      "import json, os, yaml\n"
      "root = '" + dir.file("coco") + "'\n"
      "os.makedirs(root + '/annotations', exist_ok=True)\n"
      "ids = [i for i in range(1, 91) if i not in (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)]\n"
      "ann = json.load(open('" + dir.file("ann.json") + "'))\n"
      "for c in ann['categories']: c['id'] = ids[c['id']]; c['name'] = ''\n"
      "for a in ann['annotations']: a['category_id'] = ids[a['category_id']]\n"
      "json.dump(ann, open(root + '/annotations/instances_val2017.json', 'w'))\n"
      "demo = yaml.safe_load(open('data/demo/demo.yaml'))\n"
      "cfg = {'path': root, 'train': os.path.abspath('data/demo/images/train'), 'val': os.path.abspath('data/demo/images/val'),\n"
      "       'nc': demo.get('nc', len(demo['names'])), 'names': demo['names']}\n"
      "yaml.safe_dump(cfg, open(root + '/coco.yaml', 'w'))\n");
  ASSERT_EQ(coco.exit_code, 0) << coco.output;
  r = test::run_command(test::kestrel_binary() + " val --data " + dir.file("coco/coco.yaml") + " --img 128 --device cpu --weights " +
                        weights + " --conf-thres 0.000001 --project " + dir.file("val") + " --name coco2017");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Evaluating COCO mAP with " + dir.file("coco/annotations/instances_val2017.json") + "\n" + ap),
            std::string::npos) << r.output;
  const auto same = test::run_python(
      "import json\n"
      "ids = [i for i in range(1, 91) if i not in (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)]\n"
      "a = json.load(open('" + dir.file("val/coco/best_predictions.json") + "'))\n"
      "b = json.load(open('" + dir.file("val/coco2017/best_predictions.json") + "'))\n"
      "assert len(a) == len(b) and len(a) > 0, (len(a), len(b))\n"
      "for p, q in zip(a, b):\n"
      "    assert q['category_id'] == ids[p['category_id']] and q['bbox'] == p['bbox'] and q['score'] == p['score'], (p, q)\n"
      "print('same', len(a))\n");
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_NE(r.output.find("Results saved to " + dir.file("val/coco2017")), std::string::npos) << r.output;
}

// YOLOv7's --img-size TRAIN TEST (its README trains with --img 640 640): the second size is the validation's;
// and its --adam and --cache-images (an error beside a contradicting --optimizer / --cache).
TEST(CliTrain, Yolov7Flags) {
  test::TempDir dir;
  const std::string base = test::kestrel_binary() + " train --cfg yolov5n --data data/demo/demo.yaml --epochs 1 --batch-size 16"
                           " --workers 2 --device cpu --quiet --noplots --project " + dir.file("runs");
  auto r = test::run_command(base + " --img 64 96 --adam --cache-images");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream opt(dir.file("runs/exp/opt.yaml"));
  const std::string yaml((std::istreambuf_iterator<char>(opt)), {});
  EXPECT_NE(yaml.find("imgsz: 64\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("imgsz_test: 96\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("optimizer: \"Adam\"\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("cache: \"ram\"\n"), std::string::npos) << yaml;
  // train.py's check_img_size: sizes off the stride are rounded up with a warning, the validation size too
  // (YOLOv5's training size to at least two strides: 40 -> 64).
  r = test::run_command(base + " --img 40 100 --name rounded");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("WARNING: --img-size 40 must be multiple of max stride 32, updating to 64"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("WARNING: --img-size 100 must be multiple of max stride 32, updating to 128"), std::string::npos)
      << r.output;
  std::ifstream rounded_opt(dir.file("runs/rounded/opt.yaml"));
  const std::string rounded_yaml((std::istreambuf_iterator<char>(rounded_opt)), {});
  EXPECT_NE(rounded_yaml.find("imgsz: 64\n"), std::string::npos) << rounded_yaml;
  EXPECT_NE(rounded_yaml.find("imgsz_test: 128\n"), std::string::npos) << rounded_yaml;
  r = test::run_command(base + " --img 64 96 128");
  EXPECT_NE(r.exit_code, 0);
  // A YOLOv7 spelling beside a contradicting YOLOv5 one is an error (agreeing ones are fine, as above).
  r = test::run_command(base + " --adam --optimizer SGD");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--adam: means --optimizer Adam, but --optimizer SGD was given too"), std::string::npos) << r.output;
  r = test::run_command(base + " --cache-images --cache disk");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--cache-images: means --cache ram, but --cache disk was given too"), std::string::npos) << r.output;
  // A YOLOv7 hyp file brings YOLOv7's train.py defaults: 300 epochs, no early stopping, no gradient
  // clipping, unless given (--patience 5 here). Stopped after one batch, as a Ctrl-C would: exit 130.
  r = test::run_command(test::kestrel_binary() + " train --cfg yolov5n --data data/demo/demo.yaml --batch-size 16 --img 64"
                        " --workers 2 --device cpu --quiet --noplots --hyp configs/hyps/hyp.scratch.tiny.yaml --patience 5"
                        " --interrupt-after 1 --name v7recipe --project " + dir.file("runs"));
  EXPECT_EQ(r.exit_code, 130) << r.output;
  std::ifstream v7_opt(dir.file("runs/v7recipe/opt.yaml"));
  const std::string v7_yaml((std::istreambuf_iterator<char>(v7_opt)), {});
  EXPECT_NE(v7_yaml.find("\nepochs: 300\n"), std::string::npos) << v7_yaml;
  EXPECT_NE(v7_yaml.find("\npatience: 5\n"), std::string::npos) << v7_yaml;
  EXPECT_NE(v7_yaml.find("\nmax_grad_norm: 0.0\n"), std::string::npos) << v7_yaml;
  EXPECT_NE(yaml.find("\nepochs: 1\n"), std::string::npos) << yaml;  // a YOLOv5 recipe, --epochs given
  EXPECT_NE(yaml.find("\nmax_grad_norm: 10.0\n"), std::string::npos) << yaml;
}

// The spellings of YOLOv7's README commands: train's --save_period, test.py's and detect.py's --conf / --iou
// (argparse prefixes of --conf-thres / --iou-thres) and --no-trace.
TEST(CliTrain, Yolov7ReadmeSpellings) {
  test::TempDir dir;
  auto r = test::run_command(test::kestrel_binary() + " train --cfg yolov5n --data " + test::demo_subset(dir, 2) +
                             " --epochs 3 --batch-size 2 --img 64 --workers 1 --device cpu --quiet --noplots --save_period 2"
                             " --project " + dir.file("runs"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // YOLOv5 v7.0 saves epoch{N}.pt when epoch % save_period == 0 (epochs counted from 0): 0 and 2 of 0..2.
  EXPECT_TRUE(std::filesystem::exists(dir.file("runs/exp/weights/epoch0.safetensors"))) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("runs/exp/weights/epoch1.safetensors"))) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("runs/exp/weights/epoch2.safetensors"))) << r.output;
  const std::string weights = dir.file("runs/exp/weights/last.safetensors");
  r = test::run_command(test::kestrel_binary() + " val --weights " + weights + " --data " + dir.file("tiny.yaml") +
                        " --img 64 --batch 2 --conf 0.001 --iou 0.65 --device cpu --no-trace --noplots --name v7");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("all          2"), std::string::npos) << r.output;
  r = test::run_command(test::kestrel_binary() + " detect --weights " + weights + " --conf 0.25 --iou 0.45 --img-size 64 --source " +
                        dir.file("images/train") + " --no-trace --nosave --project " + dir.file("det"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("image 2/2 "), std::string::npos) << r.output;
}

TEST(CliTrain, BadFlagsAndFilesAreClearErrors) {
  test::TempDir dir;
  auto r = test::run_command(test::kestrel_binary() + " train --cfg yolov5n --data " + dir.file("none.yaml") + " --project " +
                             dir.file("runs"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir.file("none.yaml")), std::string::npos) << r.output;
  r = test::run_command(test::kestrel_binary() + " train --cfg yolov5n --amp fp8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--amp"), std::string::npos) << r.output;
  // A negative seed (numpy refuses one upstream) did wrap to 2^64 - 1; a loss scale of 0 printed DBL_MAX.
  r = test::run_command(test::kestrel_binary() + " train --cfg yolov5n --seed -1");
  EXPECT_NE(r.output.find("--seed: expected a seed >= 0, got -1"), std::string::npos) << r.output;
  // The scale lives in a float32 tensor: 1e39 overflowed it (LibTorch's error, naming no flag), 1e-46 rounded
  // to 0 (every gradient unscaled to NaN).
  for (const char* scale : {"0", "-1", "inf", "nan", "x", "1e39", "1e-46"}) {
    r = test::run_command(test::kestrel_binary() + " train --cfg yolov5n --loss-scale " + scale);
    EXPECT_NE(r.output.find(std::string("--loss-scale: expected a positive number a float32 holds (about 1.2e-38 to 3.4e38), got ") + scale),
              std::string::npos) << r.output;
  }
  // --v3-metric: ultralytics/yolov3 v9.6.0's val.py cannot score a YOLOv7 model (refused before training
  // starts, not at the first validation), and is not YOLOv7's --v5-metric too.
  r = test::run_command(test::kestrel_binary() + " train --cfg yolov7-tiny --v3-metric --data data/demo/demo.yaml --img 64 "
                        "--device cpu --project " + dir.file("runs"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--v3-metric: ultralytics/yolov3 v9.6.0's val.py scores YOLOv3 and YOLOv5 models"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("runs/exp"))) << r.output;
  {  // val, study and speed alike: refused before the run folder is made
    const auto names = data::load_dataset_config("data/demo/demo.yaml").names;
    auto v7 = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov7-tiny")), static_cast<int>(names.size()));
    models::save_model_weights(dir.file("v7.safetensors"), *v7, models::describe_config("yolov7-tiny", names));
    auto v5 = models::build_model(models::load_model_config(models::resolve_model_config_path("yolov5n")), static_cast<int>(names.size()));
    models::save_model_weights(dir.file("v5.safetensors"), *v5, models::describe_config("yolov5n", names));
    // Several files (speed and study): every one is checked before the first pass writes anything (--save-txt).
    const std::string both = dir.file("v5.safetensors") + " " + dir.file("v7.safetensors");
    for (const char* task : {"val", "study", "speed"}) {
      const bool several = std::string(task) != "val";
      r = test::run_command(test::kestrel_binary() + " val --data data/demo/demo.yaml --img 64 --device cpu --v3-metric --task " +
                            task + " --weights " + (several ? both + " --save-txt" : dir.file("v7.safetensors")) +
                            " --project " + dir.file("v7val"));
      EXPECT_EQ(r.exit_code, 1) << task;
      EXPECT_NE(r.output.find("--v3-metric: ultralytics/yolov3 v9.6.0's val.py scores YOLOv3 and YOLOv5 models"), std::string::npos) << r.output;
      EXPECT_FALSE(std::filesystem::exists(dir.file("v7val"))) << task << ": " << r.output;
    }
    // Two files of one name would write one study file (upstream overwrites the first's rows): refused.
    std::filesystem::create_directories(dir.file("copy"));
    std::filesystem::copy_file(dir.file("v5.safetensors"), dir.file("copy/v5.safetensors"));
    r = test::run_command(test::kestrel_binary() + " val --data data/demo/demo.yaml --img 64 --device cpu --task study --weights " +
                          dir.file("v5.safetensors") + " " + dir.file("copy/v5.safetensors") + " --project " + dir.file("v7val"));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("would share the study file study_demo_v5.txt"), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir.file("v7val"))) << r.output;
  }
  r = test::run_command(test::kestrel_binary() + " val --weights x.safetensors --v3-metric --v5-metric");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--v5-metric excludes --v3-metric"), std::string::npos) << r.output;
  test::write_file(dir.file("fake.safetensors"), "not a safetensors file at all");
  r = test::run_command(test::kestrel_binary() + " val --weights " + dir.file("fake.safetensors"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir.file("fake.safetensors")), std::string::npos) << r.output;
  // Both schedules (YOLOv7 recipes: --cos-lr won silently): refused before any work, no run folder made.
  r = test::run_command(test::kestrel_binary() + " train --cfg yolov5n --cos-lr --linear-lr --project " + dir.file("runs"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--linear-lr: and --cos-lr: give one of them"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("runs/exp")));
  // train.py's W&B / Google Cloud flags: refused with the reason, before any work.
  for (const std::string flag : {"--entity me", "--bbox_interval 5", "--artifact_alias best", "--upload_dataset"}) {
    r = test::run_command(test::kestrel_binary() + " train --cfg yolov5n --project " + dir.file("runs") + " " + flag);
    EXPECT_NE(r.exit_code, 0) << flag;
    EXPECT_NE(r.output.find(flag.substr(0, flag.find(' ')) + ": kestrel has no W&B or Google Cloud logging"), std::string::npos)
        << r.output;
  }
  r = test::run_command(test::kestrel_binary() + " train --cfg yolov5n --evolve 1 --project " + dir.file("runs") + " --bucket b");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--bucket: kestrel does not copy evolve.csv to or from a Google Cloud bucket"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("runs/exp")));
  // train.py's defaults of those flags change nothing: accepted (the run then fails on its --data, later).
  r = test::run_command(test::kestrel_binary() + " train --cfg yolov5n --data " + dir.file("none.yaml") + " --project " +
                        dir.file("runs") + " --bucket '' --entity '' --bbox_interval -1 --artifact_alias latest");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.output.find("W&B"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("none.yaml"), std::string::npos) << r.output;
  // ... but a value is needed, as argparse's (a bare --bucket is not the empty default).
  r = test::run_command(test::kestrel_binary() + " train --cfg yolov5n --project " + dir.file("runs") + " --bucket");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--bucket: expects one argument"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("runs/exp")));
  // --evolve runs in one process: an srun step of 2 tasks (its MASTER_ADDR not even set) is refused as such.
  r = test::run_command("env -u WORLD_SIZE -u MASTER_ADDR SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0 " + test::kestrel_binary() +
                        " train --cfg yolov5n --evolve 1 --project " + dir.file("runs"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--evolve: runs in one process"), std::string::npos) << r.output;
  // WORLD_SIZE left in the environment (a torchrun shell) would make --nproc-per-node 2 train in one
  // process without a word: it is refused, naming both.
  r = test::run_command("WORLD_SIZE=1 " + test::kestrel_binary() + " train --cfg yolov5n --nproc-per-node 2 --project " +
                        dir.file("runs"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--nproc-per-node: 2, but this process is already one of 1 (WORLD_SIZE is set"), std::string::npos)
      << r.output;
  // Refused before the run folder and AutoAnchor, not when first used: an unknown optimiser, a clipping norm
  // of nan (which would switch clipping off), no detections. (--rect with --image-weights is dropped with a
  // warning, as upstream's dataset drops it: the command then fails on the missing --cfg.)
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"train --optimizer Lion", "--optimizer Lion: expected SGD, Adam or AdamW"},
      {"train --rect --image-weights", "WARNING: --rect is incompatible with --image-weights"},
      {"train --max-grad-norm nan", "--max-grad-norm: must be a finite number, got nan"},
      // nan passed CLI11's range (the loss refused it after the run folder was made); a negative patience
      // was silently no early stopping (upstream: stop after the first epoch)
      {"train --label-smoothing nan", "--label-smoothing: expected a number in [0, 1], got nan"},
      {"train --patience -3", "--patience: expected 0 (off) or a number of epochs, got -3"},
      // sizes from 16 px round to 0 at stride 32 (upsample to 0 x 0 at the first batch)
      {"train --cfg yolov7-tiny --img 32 --multi-scale --device cpu", "--multi-scale at --img 32: its smallest sizes (16 px) round down to 0"},
      {"train --batch-size 0", "--batch-size: expected -1 (AutoBatch) or 1 to 65536, got 0"},
      {"train --batch-size 1e3", "--batch-size: expected an integer, got '1e3'"},
      {"train --batch-size -1 --nproc-per-node 2", "AutoBatch with --batch-size -1 is not compatible with data-parallel"},
      {"train --batch-size 5 --nproc-per-node 2", "--batch-size: 5 must be a multiple of WORLD_SIZE 2"},
      {"train --img 64 --imgsz=32", "--img: given more than once"},
      {"train --freeze 10 --freeze 3", "--freeze: given more than once; give all its values after one --freeze"},
      {"train --checkpoint 1 --checkpoint=2", "--checkpoint: given more than once"},
      {"detect --weights w.safetensors --imgsz 640 --imgsz 320", "--img: given more than once"},
      {"detect --weights w.safetensors --classes 0 --classes 2", "--classes: given more than once; give all its values after one --classes"},
      {"train --evolve_population configs/hyps", "--evolve_population: belongs to --evolve N"},
      {"train --local_rank 1", "--local_rank: 1, but the environment makes this process local rank 0"},
      {"train --resume-evolve p.yaml", "--resume_evolve: belongs to --evolve N"},
      {"train --evolve 2 --evolve_population no/such/folder", "--evolve_population no/such/folder: not a folder"},
      {"train --evolve 2 --evolve_population configs/hyps --resume_evolve p.yaml", "--resume_evolve: starts from its saved population"},
      {"val --weights w.safetensors --max-det 0", "--max-det: Value 0 not in range"},
      {"val --weights w.safetensors --workers -3", "--workers: Value -3 not in range"}};
  for (const auto& [args, message] : refused) {
    r = test::run_command(test::kestrel_binary() + " " + args + " --project " + dir.file("runs"));
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("runs")));
}

// --batch-size -1 (YOLOv5's AutoBatch) on the CPU trains with the default 16, as upstream, and the run
// records the batch it used (a resume trains on with it).
// --single-cls merges every class into 0 before the labels meet the YAML's nc, as upstream: a one-class YAML
// over multi-class labels trains on all of them (kestrel skipped every image with a class >= nc), and so
// does val. Without --single-cls those images are label errors, named.
TEST(CliTrain, SingleClsMergesClassesAboveTheYamlsNc) {
  test::TempDir dir;
  test::demo_subset(dir, 3);  // COCO classes 0..79 in their labels
  test::write_file(dir.file("one.yaml"), "path: " + dir.path() + "\ntrain: images/train\nval: images/train\nnames: ['thing']\n");
  const std::string common = test::kestrel_binary() + " train --cfg yolov5n --data " + dir.file("one.yaml") +
                             " --img 64 --epochs 1 --batch-size 3 --device cpu --workers 1 --noplots --project " + dir.file("runs");
  auto r = test::run_command(common + " --single-cls");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("train: 3 images, 3 labelled"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("exceeds the dataset's nc"), std::string::npos) << r.output;
  r = test::run_command(test::kestrel_binary() + " val --single-cls --img 64 --device cpu --workers 1 --data " + dir.file("one.yaml") +
                        " --weights " + dir.file("runs/exp/weights/last.safetensors") + " --project " + dir.file("val"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("3 images, 3 labelled"), std::string::npos) << r.output;
  r = test::run_command(common + " --name plain");
  EXPECT_NE(r.output.find("exceeds the dataset's nc=1"), std::string::npos) << r.output;
}

// From any working folder, the default --data is the demo (train.py's data/coco128.yaml lies under its ROOT);
// a batch larger than the split is capped, and the start line says the batch trained.
TEST(CliTrain, DefaultDataFromAnyFolderAndACappedBatch) {
  test::TempDir dir;
  const auto r = test::run_command("cd " + dir.path() + " && " + test::kestrel_binary() + " train --cfg yolov5n --epochs 1 "
                                   "--img 64 --batch-size 48 --workers 1 --device cpu --noval --noplots --nosave --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("train: --batch-size 48 is more than the split's 32 images: batches of 32"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", 1 batches of 32 per epoch"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("runs/train/exp/results.csv"))) << r.output;
}

TEST(CliTrain, AutoBatchOnTheCpuUsesTheDefault) {
  test::TempDir dir;
  // (--name cfg: train.py names the run after the model YAML, here runs/yolov5n.)
  // (A bare --hyp file name is found among the bundled configs/hyps, as check_yaml finds it under data/.)
  const auto r = kestrel("train --cfg yolov5n --data data/demo/demo.yaml --epochs 1 --img 64 --batch-size -1 --workers 1"
                         " --hyp hyp.scratch-med.yaml --device cpu --noval --noplots --nosave --quiet --name cfg --project " +
                         dir.file("runs"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("AutoBatch: CUDA not detected, using default CPU batch-size 16"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", from scratch (no --weights), 2 batches of 16 per epoch"), std::string::npos) << r.output;  // the demo's 32 images
  // smart_optimizer's line, as train.py v7.0 prints it for yolov5n at batch 16 (accumulate 4: decay unscaled).
  EXPECT_NE(r.output.find("optimizer: SGD(lr=0.01) with parameter groups 57 weight(decay=0.0), 60 weight(decay=0.0005), 60 bias\n"),
            std::string::npos) << r.output;
  std::ifstream opt(dir.file("runs/yolov5n/opt.yaml"));
  const std::string yaml((std::istreambuf_iterator<char>(opt)), {});
  EXPECT_NE(yaml.find("\nbatch_size: 16\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("\nhyp: \"configs/hyps/hyp.scratch-med.yaml\"\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("\nsave_dir: \"" + dir.file("runs/yolov5n") + "\"\n"), std::string::npos) << yaml;
  std::ifstream hyp_yaml(dir.file("runs/yolov5n/hyp.yaml"));
  EXPECT_NE(std::string((std::istreambuf_iterator<char>(hyp_yaml)), {}).find("\nmixup: 0.1\n"), std::string::npos);  // med's, not low's 0
  // A rank of a torchrun launch (WORLD_SIZE in the environment) refuses it before joining the others.
  const auto rank = test::run_command("env WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=9 " +
                                      test::kestrel_binary() + " train --cfg yolov5n --data data/demo/demo.yaml --batch-size -1"
                                      " --device cpu --project " + dir.file("runs2"));
  EXPECT_NE(rank.exit_code, 0);
  EXPECT_NE(rank.output.find("AutoBatch with --batch-size -1 is not compatible with data-parallel training"), std::string::npos)
      << rank.output;
}

// A scheduler's SIGTERM stops a run like Ctrl-C: saved at the next optimiser step, "--resume" named, and
// exit code 130 (not 0: a script can tell a stopped run from a finished one; not 143: it was saved). The
// signal is sent once the trainer has said where its results go, which it does as it starts the epochs.
TEST(CliTrain, SigtermSavesAndExits130) {
  test::TempDir dir;
  const std::string log = dir.file("log.txt");
  const std::string script =
      test::kestrel_binary() + " train --cfg yolov5n --data data/demo/demo.yaml --epochs 3 --img 64 --batch-size 16"
      " --workers 1 --device cpu --noplots --project " + dir.file("runs") + " > " + log + " 2>&1 & pid=$!; "
      "for i in $(seq 600); do grep -q 'results to' " + log + " && break; sleep 0.1; done; "
      "kill -TERM $pid; wait $pid; echo \"exit=$?\"\n";
  test::write_file(dir.file("stop.sh"), script);
  const auto r = test::run_command("bash " + dir.file("stop.sh"));
  std::ifstream in(log);
  const std::string output((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(r.output.find("exit=130"), std::string::npos) << r.output << output;
  EXPECT_NE(output.find("Stopping after the next optimiser step"), std::string::npos) << output;
  EXPECT_NE(output.find("Interrupted: saved"), std::string::npos) << output;
  ASSERT_TRUE(std::filesystem::exists(dir.file("runs/exp/weights/last.state.safetensors"))) << output;
  // A partial file of a process killed while writing (a second Ctrl-C) is cleared by the resume.
  test::write_file(dir.file("runs/exp/weights/last.safetensors.tmp.12345"), "partial");
  test::write_file(dir.file("runs/exp/weights/last.state.safetensors.tmp12345-678901"), "partial");
  // A bare --resume (upstream: the newest run): this one, the only run under --project.
  const auto resumed = test::run_command(test::kestrel_binary() + " train --resume --project " + dir.file("runs") +
                                         " --quiet --epochs 9");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("WARNING: --resume continues with the run's saved options; ignored: --epochs\n"),
            std::string::npos) << resumed.output;
  const std::string from = "Resuming " + dir.file("runs/exp") + " from epoch ";
  const size_t at = resumed.output.find(from);
  ASSERT_NE(at, std::string::npos) << resumed.output;
  // train.py's count: this session's epochs, from the one it resumed in to the last (of 3)
  const int resumed_epoch = std::atoi(resumed.output.c_str() + at + from.size());
  EXPECT_NE(resumed.output.find("\n" + std::to_string(3 - resumed_epoch) + " epochs completed in "), std::string::npos) << resumed.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("runs/exp/weights/weights")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("runs/exp/weights/last.safetensors.tmp.12345")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("runs/exp/weights/last.state.safetensors.tmp12345-678901")));
  EXPECT_NE(resumed.output.find("Resuming training from " + dir.file("runs/exp/weights/last.state.safetensors")),
            std::string::npos) << resumed.output;
  // Resumed from inside weights/ by the file's bare name: the run folder is still the one above it (the
  // run finished: nothing left to do, said naming the file).
  const auto again = test::run_command("cd " + dir.file("runs/exp/weights") + " && " + test::kestrel_binary() +
                                       " train --resume last.state.safetensors --quiet");
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_NE(again.output.find("last.state.safetensors: this run already finished"), std::string::npos) << again.output;
}

}  // namespace
}  // namespace kestrel
