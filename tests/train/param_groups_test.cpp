// Parameter-group membership against upstream's own report: YOLOv5 v7.0 trains yolov5s with
// "SGD(lr=0.01) with parameter groups 57 weight(decay=0.0), 60 weight(decay=0.0005), 60 bias".
#include <gtest/gtest.h>

#include <set>

#include "kestrel/models/model_builder.h"
#include "kestrel/models/yolo_model.h"
#include "kestrel/train/param_groups.h"

namespace kestrel::train {
namespace {

std::shared_ptr<models::YoloModel> shipped(const char* name) {
  return models::build_model(models::load_model_config(models::resolve_model_config_path(name)));
}

TEST(ParamGroups, Yolov5sMatchesUpstreamCounts) {
  auto model = shipped("yolov5s");
  ParamGroups g = split_parameters(*model);
  EXPECT_EQ(g.norm_weights.size(), 57u);
  EXPECT_EQ(g.weights.size(), 60u);
  EXPECT_EQ(g.biases.size(), 60u);
}

TEST(ParamGroups, EveryParameterInExactlyOneGroupWithTheRightShape) {
  for (const char* name : {"yolov5n", "yolov7-tiny", "yolov7"}) {
    auto model = shipped(name);
    ParamGroups g = split_parameters(*model);
    std::set<const void*> seen;
    size_t total = 0;
    for (const auto* group : {&g.biases, &g.weights, &g.norm_weights})
      for (const auto& p : *group) {
        seen.insert(p.unsafeGetTensorImpl());
        ++total;
      }
    EXPECT_EQ(total, seen.size()) << name;                       // no parameter twice
    EXPECT_EQ(total, model->parameters().size()) << name;        // none left out
    for (const auto& p : g.biases) EXPECT_EQ(p.dim(), 1) << name;
    for (const auto& p : g.weights) EXPECT_EQ(p.dim(), 4) << name;  // conv kernels only in these models
    for (const auto& p : g.norm_weights) EXPECT_TRUE(p.dim() == 1 || p.dim() == 4) << name;  // BN [c], implicit [1,c,1,1]
  }
}

TEST(ParamGroups, ImplicitKnowledgeIsNotDecayed) {
  auto model = shipped("yolov7");
  ParamGroups g = split_parameters(*model);
  size_t implicit = 0;
  for (const auto& p : g.norm_weights) implicit += p.dim() == 4;
  EXPECT_EQ(implicit, 6u);  // ia.0-2 and im.0-2 of IDetect
}

}  // namespace
}  // namespace kestrel::train
