// The validation table: val.py v7.0's rows, pf = '%22s' + '%11i' * 2 + '%11.3g' * 4 with `seen` (every
// image validated) in the Images column of every class row. Expected lines are that format string
// evaluated by Python.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "kestrel/eval/validator.h"

namespace kestrel::eval {
namespace {

TEST(ValidationTable, RowsAsValPy) {
  ValidationResult r;
  r.images = 5;
  r.labels = 4;
  r.instances = {3, 1};
  r.metrics.classes = at::tensor({0, 1}, at::kLong);
  r.metrics.precision = at::tensor({0.5, 1.0}, at::kDouble);
  r.metrics.recall = at::tensor({0.25, 0.0}, at::kDouble);
  r.metrics.ap = at::zeros({2, 10}, at::kDouble);
  r.metrics.ap[0].fill_(0.4);  // mAP50 0.4, mAP50-95 0.4
  r.metrics.ap[1][0] = 0.2;    // mAP50 0.2, mAP50-95 0.02
  r.metrics.mp = 0.75, r.metrics.mr = 0.125, r.metrics.map50 = 0.3, r.metrics.map = 0.21;
  const std::string table = format_validation_table(r, {"cat", "dog"}, /*per_class=*/true);
  EXPECT_EQ(table,
            "                 Class     Images  Instances          P          R      mAP50   mAP50-95\n"
            "                   all          5          4       0.75      0.125        0.3       0.21\n"
            "                   cat          5          3        0.5       0.25        0.4        0.4\n"
            "                   dog          5          1          1          0        0.2       0.02\n");
  EXPECT_EQ(format_validation_table(r, {"cat", "dog"}, /*per_class=*/false),
            "                 Class     Images  Instances          P          R      mAP50   mAP50-95\n"
            "                   all          5          4       0.75      0.125        0.3       0.21\n");
}

}  // namespace
}  // namespace kestrel::eval
