// The builder's parameter budget: charges add up, an overdraft throws before allocation, budgets end
// with their scope, and every model kestrel builds charges exactly its learnable weights and BN statistics.
#include <gtest/gtest.h>

#include <string>

#include "kestrel/core/error.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_config.h"
#include "kestrel/models/parameter_budget.h"
#include "kestrel/models/state_dict.h"
#include "kestrel/models/yolo_model.h"

namespace kestrel::models {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

TEST(ParameterBudget, ChargesAddUpAndAnOverdraftThrowsNamingTheTensor) {
  ParameterBudget budget(100);
  charge_parameters("convolution", {2, 3, 3, 3});  // 54
  EXPECT_EQ(budget.charged(), 54);
  charge_parameters("batch norm", {4, 11});  // 44: 98 in all, still within 100
  EXPECT_EQ(budget.charged(), 98);
  try {
    charge_parameters("convolution bias", {3});
    FAIL() << "101 values passed a budget of 100";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("more than 100 parameter values"), std::string::npos) << what;
    EXPECT_NE(what.find("convolution bias of shape [3]"), std::string::npos) << what;
  }
  EXPECT_TRUE(budget.exceeded());
}

TEST(ParameterBudget, AnOverflowingShapeIsAnOverdraftNotAWrap) {
  ParameterBudget budget(1000);
  // 2^32 * 2^32 wraps to 0 in 64 bits; it must count as too big.
  EXPECT_THROW(charge_parameters("convolution", {int64_t{1} << 32, int64_t{1} << 32}), Error);
  EXPECT_TRUE(budget.exceeded());
  EXPECT_THROW(charge_parameters("convolution", {-1, 5}), Error);
}

TEST(ParameterBudget, OutsideABudgetChargesAreFreeAndBudgetsEndWithTheirScope) {
  charge_parameters("convolution", {int64_t{1} << 40, 1024});  // no budget: nothing happens
  {
    ParameterBudget outer(10);
    {
      ParameterBudget inner(1000);
      charge_parameters("batch norm", {4, 100});
      EXPECT_EQ(inner.charged(), 400);
    }
    EXPECT_EQ(outer.charged(), 0);  // the inner budget took the charge
    EXPECT_THROW(charge_parameters("batch norm", {4, 100}), Error);
  }
  charge_parameters("convolution", {int64_t{1} << 40, 1024});
}

// What a model charges is what its state dict holds minus the entries the layers do not charge:
// num_batches_tracked (one integer per BN) and the head's anchors (derived from the YAML, not sized by
// it). Counted from the built model's own state dict, so a layer that allocates outside make_conv2d /
// make_batch_norm shows up here as a difference.
void expect_charges_match_the_state_dict(const std::string& config) {
  const ModelConfig cfg = load_model_config(resolve_model_config_path(config));
  ParameterBudget budget(int64_t{1} << 40);
  const auto model = build_model(cfg);
  int64_t learnable_and_statistics = 0;
  for (const auto& [name, t] : state_dict(*model))
    if (!ends_with(name, "num_batches_tracked") && !ends_with(name, ".anchors") && !ends_with(name, ".anchor_grid"))
      learnable_and_statistics += t.numel();
  EXPECT_EQ(budget.charged(), learnable_and_statistics) << config;
}

TEST(ParameterBudget, EveryLayerKindChargesWhatItAllocates) {
  expect_charges_match_the_state_dict("yolov5n");      // Conv, C3, SPPF, Detect
  expect_charges_match_the_state_dict("yolov3-tiny");  // MaxPool, ZeroPad2d, Detect on two levels
  expect_charges_match_the_state_dict("yolov7-tiny");  // SP, IDetect (ImplicitA/M)
  expect_charges_match_the_state_dict("yolov7");       // RepConv, SPPCSPC, MP
  expect_charges_match_the_state_dict("r50-csp");      // Stem, ResCSPC, ResCSPB
}

}  // namespace
}  // namespace kestrel::models
