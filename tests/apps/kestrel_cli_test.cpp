// The kestrel executable as a user runs it: exit codes and messages.
#include <gtest/gtest.h>

#include "test_support.h"

namespace kestrel {
namespace {

test::CommandResult kestrel(const std::string& args) { return test::run_command(test::kestrel_binary() + " " + args); }

TEST(Cli, ModelsPrintsEveryShippedConfig) {
  auto r = kestrel("models --img 320");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* name : {"yolov3 ", "yolov3-tiny", "yolov5n", "yolov5s", "yolov5m", "yolov5l", "yolov5x", "yolov7 ",
                           "yolov7-tiny", "yolov7x"})
    EXPECT_NE(r.output.find(name), std::string::npos) << name;
  // 16.43 GFLOPs at 640 is 4.11 at 320 (a quarter of the area)
  EXPECT_NE(r.output.find("7235389 parameters"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("4.11 GFLOPs@320"), std::string::npos) << r.output;
}

TEST(Cli, ModelsTableForOneConfig) {
  auto r = kestrel("models yolov5n --nc 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Detect"), std::string::npos);
  EXPECT_NE(r.output.find("yolov5n summary: 25 layers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("strides 8,16,32"), std::string::npos) << r.output;
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
  r = kestrel("frobnicate");
  EXPECT_NE(r.exit_code, 0);
}

TEST(Cli, EnvReportsVersions) {
  auto r = kestrel("env");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("libtorch     2.11.0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cpu threads"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kestrel
