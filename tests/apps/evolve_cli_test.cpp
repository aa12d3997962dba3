// kestrel train --evolve on the command line, as train.py maps its flags: --resume continues the named
// folder's evolution (exist_ok = resume), --exist-ok alone starts a new folder, a --project given is kept.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_support.h"

namespace kestrel {
namespace {

int rows_of(const std::string& csv) {
  std::ifstream in(csv);
  int n = -1;  // the header
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

TEST(EvolveCli, ResumeContinuesTheFolderExistOkDoesNot) {
  test::TempDir dir;
  const std::string evolve = test::kestrel_binary() + " train --evolve 1 --cfg yolov5n --data data/demo/demo.yaml --img 64"
                             " --epochs 1 --batch-size 16 --workers 1 --device cpu --noautoanchor --quiet --noplots"
                             " --project " + dir.file("p") + " --name e";
  auto r = test::run_command(evolve);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(rows_of(dir.file("p/e/evolve.csv")), 1);
  r = test::run_command(evolve + " --exist-ok");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(rows_of(dir.file("p/e2/evolve.csv")), 1) << r.output;
  r = test::run_command(evolve + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(rows_of(dir.file("p/e/evolve.csv")), 2) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("p/e3")));
  EXPECT_NE(r.output.find(dir.file("p/e/evolve.csv")), std::string::npos) << r.output;  // the --project given
}

}  // namespace
}  // namespace kestrel
