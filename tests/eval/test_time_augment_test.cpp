// Test-time augmentation (--augment): the scaled inputs' sizes and padding, the mapping of predictions
// back to the input, how many predictions each model family keeps (hand-counted from the grids), and,
// where an upstream checkout and its Python are given, equality with upstream's model(x, augment=True).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "export/onnx_check.h"
#include "kestrel/eval/test_time_augment.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/weights_file.h"
#include "kestrel/models/yolo_model.h"
#include "test_support.h"

namespace kestrel::eval {
namespace {

// 480 x 640 at 0.67: int(321.6) = 321 rows resized, padded to ceil(321.6 / 32) * 32 = 352; int(428.8)
// = 428 columns, padded to ceil(13.4) * 32 = 448. At 0.83: int(398.4) = 398 -> 416, int(531.2) = 531 -> 544.
TEST(TestTimeAugment, ScaledImagesAreResizedThenPaddedToTheStride) {
  const at::Tensor images = at::full({2, 3, 480, 640}, 0.25);
  EXPECT_TRUE(scale_images(images, 1.0, 32).is_same(images));
  const at::Tensor small = scale_images(images, 0.67, 32);
  ASSERT_EQ(small.sizes(), (std::vector<int64_t>{2, 3, 352, 448}));
  // A flat image stays flat where resized; the padding is 0.447 right and below.
  EXPECT_TRUE(at::allclose(small.narrow(2, 0, 321).narrow(3, 0, 428), at::full({2, 3, 321, 428}, 0.25)));
  EXPECT_TRUE(at::allclose(small.narrow(2, 321, 31), at::full({2, 3, 31, 448}, 0.447)));
  EXPECT_TRUE(at::allclose(small.narrow(3, 428, 20), at::full({2, 3, 352, 20}, 0.447)));
  EXPECT_EQ(scale_images(images, 0.83, 32).sizes(), (std::vector<int64_t>{2, 3, 416, 544}));
}

// Row: x 100, y 50, w 20, h 10 in a 0.5-scaled, flipped image of a 640-wide input -> x 640 - 200 = 440,
// y 100, w 40, h 20; the scores are untouched.
TEST(TestTimeAugment, PredictionsAreMappedBackToTheInput) {
  const at::Tensor p = at::tensor({100.0f, 50.0f, 20.0f, 10.0f, 0.9f, 0.8f}).view({1, 1, 6});
  const at::Tensor flipped = descale_predictions(p, 0.5, true, 640);
  EXPECT_TRUE(at::equal(flipped, at::tensor({440.0f, 100.0f, 40.0f, 20.0f, 0.9f, 0.8f}).view({1, 1, 6})));
  const at::Tensor plain = descale_predictions(p, 0.5, false, 640);
  EXPECT_TRUE(at::equal(plain, at::tensor({200.0f, 100.0f, 40.0f, 20.0f, 0.9f, 0.8f}).view({1, 1, 6})));
  EXPECT_EQ(p[0][0][0].item<float>(), 100.0f);  // a new tensor: the input is unchanged
}

std::shared_ptr<models::YoloModel> eval_model(const std::string& config) {
  at::manual_seed(5);
  auto model = models::build_model(models::load_model_config(models::resolve_model_config_path(config)));
  exporting::test_onnx::randomize_batch_norm(*model);
  model->eval();
  return model;
}

// 256 x 256 input, 3 anchors per cell. Scale 1: levels 32², 16², 8² -> 3072, 768, 192 (4032). Scale
// 0.83: int(212.48) = 212, padded to 224: 28², 14², 7² -> 2352, 588, 147 (3087). Scale 0.67: int(171.52)
// = 171, padded to 192: 24², 12², 6² -> 1728, 432, 108 (2268). YOLOv5 drops scale 1's 192 and scale
// 0.67's 1728: 3840 + 3087 + 540 = 7467; YOLOv7 (IDetect) keeps all: 9387.
TEST(TestTimeAugment, EachFamilyKeepsItsPredictions) {
  torch::NoGradGuard no_grad;
  const at::Tensor images = at::rand({1, 3, 256, 256});
  auto v5 = eval_model("yolov5n");
  const at::Tensor p5 = predict_augmented(*v5, images);
  EXPECT_EQ(p5.sizes(), (std::vector<int64_t>{1, 7467, 85}));
  // The first 3840 rows are the plain prediction's P3 and P4 rows.
  EXPECT_TRUE(at::allclose(p5.narrow(1, 0, 3840), v5->predict(images).narrow(1, 0, 3840)));
  auto v7 = eval_model("yolov7-tiny");
  EXPECT_EQ(predict_augmented(*v7, images).sizes(), (std::vector<int64_t>{1, 9387, 85}));
  // YOLOv7's deploy configs end in a plain Detect: still YOLOv7's TTA (its MP/SP layers tell).
  std::ifstream file(models::resolve_model_config_path("yolov7-tiny"));
  std::string yaml((std::istreambuf_iterator<char>(file)), {});
  const auto at = yaml.find("IDetect, [nc, anchors]");
  ASSERT_NE(at, std::string::npos);
  yaml.replace(at, 7, "Detect");
  at::manual_seed(5);
  auto deploy = models::build_model(models::parse_model_config(yaml, "yolov7-tiny-deploy.yaml"));
  deploy->eval();
  ASSERT_FALSE(deploy->head().implicit());
  EXPECT_EQ(predict_augmented(*deploy, images).sizes(), (std::vector<int64_t>{1, 9387, 85}));
}

void write_floats(const std::string& path, const at::Tensor& t) {
  const at::Tensor c = t.to(at::kFloat).contiguous();
  std::ofstream(path, std::ios::binary).write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
}

at::Tensor read_floats(const std::string& path, at::IntArrayRef shape) {
  at::Tensor t = at::empty(shape, at::kFloat);
  std::ifstream(path, std::ios::binary).read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  return t;
}

// upstream's Model(cfg, nc=80) with kestrel's weights (through tools/export_state_dict.py), eval mode,
// model(x, augment=True)[0]. Needs KESTREL_UPSTREAM_PYTHON (an interpreter with the upstream repository's
// requirements: its models/ import cv2, pandas ...) and KESTREL_YOLOV5_DIR / KESTREL_YOLOV7_DIR.
void expect_matches_upstream(const char* checkout_variable, const std::string& config, const std::string& upstream_cfg,
                             int64_t height = 224, int64_t width = 288) {
  const char* python = std::getenv("KESTREL_UPSTREAM_PYTHON");
  const char* checkout = std::getenv(checkout_variable);
  if (!python || !checkout)
    GTEST_SKIP() << "set KESTREL_UPSTREAM_PYTHON and " << checkout_variable << " to compare with upstream";
  torch::NoGradGuard no_grad;
  auto model = eval_model(config);
  test::TempDir dir;
  models::save_model_weights(dir.file("w.safetensors"), *model, models::describe_config(config, std::vector<std::string>(80, "c")));
  const auto exported = test::run_command(std::string(KESTREL_TEST_PYTHON) + " tools/export_state_dict.py " +
                                          dir.file("w.safetensors") + " " + dir.file("sd.pt"));
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  at::manual_seed(8);
  const at::Tensor images = at::rand({2, 3, height, width});  // not square: flips and padding differ per side
  write_floats(dir.file("x.bin"), images);
  const at::Tensor ours = predict_augmented(*model, images);
  test::write_file(dir.file("run.py"), "import sys, numpy as np, torch\nsys.path.insert(0, '" + std::string(checkout) + "')\n" +
      "from models.yolo import Model\n"
      "m = Model('" + std::string(checkout) + "/" + upstream_cfg + "', ch=3, nc=80)\n"
      "m.load_state_dict(torch.load('" + dir.file("sd.pt") + "', weights_only=True))\n"
      "m.eval()\n"
      "x = torch.from_numpy(np.fromfile('" + dir.file("x.bin") + "', np.float32).reshape(2, 3, " + std::to_string(height) + ", " + std::to_string(width) + "))\n"
      "with torch.no_grad(): y = m(x, augment=True)[0]\n"
      "y.numpy().astype(np.float32).tofile('" + dir.file("y.bin") + "')\n"
      "print('SHAPE', *y.shape)\n");
  const auto run = test::run_command(std::string(python) + " " + dir.file("run.py"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_NE(run.output.find("SHAPE 2 " + std::to_string(ours.size(1)) + " 85"), std::string::npos)
      << run.output << "\nkestrel: " << ours.sizes();
  const at::Tensor theirs = read_floats(dir.file("y.bin"), ours.sizes());
  // Boxes are pixels (up to a few hundred), scores 0..1: float32 rounding of the same convolutions.
  EXPECT_LT((ours.narrow(2, 0, 4) - theirs.narrow(2, 0, 4)).abs().max().item<double>(), 1e-3);
  EXPECT_LT((ours.narrow(2, 4, 81) - theirs.narrow(2, 4, 81)).abs().max().item<double>(), 1e-5);
}

TEST(TestTimeAugment, MatchesUpstreamYoloV5) { expect_matches_upstream("KESTREL_YOLOV5_DIR", "yolov5n", "models/yolov5n.yaml"); }

TEST(TestTimeAugment, MatchesUpstreamYoloV7) {
  expect_matches_upstream("KESTREL_YOLOV7_DIR", "yolov7-tiny", "cfg/training/yolov7-tiny.yaml");
}

// A P6 model: DownC, ReOrg, four levels and the IAuxDetect head (its weights, auxiliary convs included, load
// into upstream's Model by name).
TEST(TestTimeAugment, MatchesUpstreamYoloV7E6) {
  expect_matches_upstream("KESTREL_YOLOV7_DIR", "yolov7-e6", "cfg/training/yolov7-e6.yaml", 256, 320);  // stride 64
}

}  // namespace
}  // namespace kestrel::eval
