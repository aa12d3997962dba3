// Which upstream a model belongs to (TTA and the validation metric depend on it), for every shipped
// family and for YOLOv7's deploy form, whose head is a plain Detect; and the metric each family gets.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "kestrel/eval/validator.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/model_family.h"
#include "kestrel/models/yolo_model.h"

namespace kestrel::models {
namespace {

std::shared_ptr<YoloModel> build_shipped(const std::string& name) {
  return build_model(load_model_config(resolve_model_config_path(name)));
}

TEST(ModelFamily, ShippedConfigs) {
  EXPECT_FALSE(is_yolov7_family(*build_shipped("yolov5n")));
  EXPECT_FALSE(is_yolov7_family(*build_shipped("yolov3-tiny")));  // upstream YOLOv3 is YOLOv5's code
  EXPECT_TRUE(is_yolov7_family(*build_shipped("yolov7-tiny")));
}

TEST(ModelFamily, Yolov7DeployConfigWithAPlainDetect) {
  std::ifstream file(resolve_model_config_path("yolov7-tiny"));
  std::string yaml((std::istreambuf_iterator<char>(file)), {});
  const auto at = yaml.find("IDetect, [nc, anchors]");
  ASSERT_NE(at, std::string::npos);
  yaml.replace(at, 7, "Detect");
  auto deploy = build_model(parse_model_config(yaml, "yolov7-tiny-deploy.yaml"));
  ASSERT_FALSE(deploy->head().implicit());
  EXPECT_TRUE(is_yolov7_family(*deploy));  // its MP/SP layers tell
}

TEST(ModelFamily, EachFamilyGetsItsUpstreamsMetric) {
  using eval::MetricStyle;
  const auto v5 = build_shipped("yolov5n");
  const auto v7 = build_shipped("yolov7-tiny");
  EXPECT_EQ(eval::metric_style_for(*v5, false), MetricStyle::yolov5);
  EXPECT_EQ(eval::metric_style_for(*v5, true), MetricStyle::yolov5);  // val.py has no other metric
  EXPECT_EQ(eval::metric_style_for(*v7, false), MetricStyle::yolov7);
  EXPECT_EQ(eval::metric_style_for(*v7, true), MetricStyle::yolov7_v5_metric);
}

}  // namespace
}  // namespace kestrel::models
