// Run folders (upstream increment_path) and results.csv in YOLOv5's exact layout.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "kestrel/train/run_files.h"

namespace kestrel::train {
namespace {

namespace fs = std::filesystem;

TEST(RunFiles, RunFoldersIncrementLikeUpstream) {
  const fs::path project = fs::temp_directory_path() / "kestrel_runs_test";
  fs::remove_all(project);
  EXPECT_EQ(make_run_dir(project.string(), "exp", false), (project / "exp").string());
  EXPECT_EQ(make_run_dir(project.string(), "exp", false), (project / "exp2").string());
  EXPECT_EQ(make_run_dir(project.string(), "exp", false), (project / "exp3").string());
  EXPECT_EQ(make_run_dir(project.string(), "exp", true), (project / "exp").string());
  EXPECT_TRUE(fs::is_directory(project / "exp2" / "weights"));
  // upstream's increment_path on Path(project) / name: a nested name, a trailing slash, an empty name
  EXPECT_EQ(make_run_dir(project.string(), "sub/run", false), (project / "sub" / "run").string());
  EXPECT_EQ(make_run_dir(project.string(), "sub/run", false), (project / "sub" / "run2").string());
  EXPECT_EQ(make_run_dir(project.string(), "mine/", false), (project / "mine").string());
  EXPECT_EQ(make_run_dir(project.string(), "mine/", false), (project / "mine2").string());
  EXPECT_EQ(make_run_dir((project / "p").string(), "", false), (project / "p").string());
  EXPECT_EQ(make_run_dir((project / "p").string(), "", false), (project / "p2").string());
  // a project that cannot be made (under a file here; a read-only folder alike) is named with the reason,
  // not as the run folder's "No such file or directory"
  std::ofstream(project / "file") << "x";
  try {
    make_run_dir((project / "file" / "p").string(), "exp", false);
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_EQ(std::string(e.what()), (project / "file" / "p").string() + ": cannot create the project folder (Not a directory)");
  }
  fs::remove_all(project);
}

TEST(RunFiles, ResultsCsvHasUpstreamColumnsAndFormat) {
  const fs::path path = fs::temp_directory_path() / "kestrel_results_test.csv";
  fs::remove(path);
  ResultsCsv csv(path.string());
  csv.append(0, {0.1, 0.2, 0.3, 0.5, 0.25, 0.125, 0.0625, 1, 2, 3, 0.0973, 0.0003, 0.0003});
  csv.append(1, std::vector<double>(13, 0.123456789));
  std::ifstream in(path);
  std::string header, row0, row1;
  std::getline(in, header);
  std::getline(in, row0);
  std::getline(in, row1);
  // YOLOv5 v7.0 writes '%20s,' per key and '%20.5g,' per value, the trailing comma stripped.
  EXPECT_EQ(header.substr(0, 42), "               epoch,      train/box_loss,");
  EXPECT_NE(header.find(",metrics/mAP_0.5:0.95,"), std::string::npos);  // 20 characters: no padding
  EXPECT_EQ(header.substr(header.size() - 21), ",               x/lr2");
  EXPECT_EQ(row0.substr(0, 42), "                   0,                 0.1,");
  EXPECT_EQ(row1.substr(21, 20), "             0.12346");
  EXPECT_EQ(std::count(row0.begin(), row0.end(), ','), 13);
  EXPECT_THROW(csv.append(2, {1.0}), std::exception);
  // nan as Python's '%20.5g' writes it (glibc gives "-nan" for x86's default NaN, whose sign bit is set)
  csv.append(2, std::vector<double>(13, -std::numeric_limits<double>::quiet_NaN()));
  std::ifstream again(path);
  std::string row2;
  for (int line = 0; line < 4; ++line) std::getline(again, row2);
  EXPECT_EQ(row2.substr(20, 22), ",                 nan,") << row2;
  fs::remove(path);
}

// A resume drops the rows of epochs it will log again (written before a crash that lost their checkpoint).
TEST(RunFiles, ResumeDropsRowsOfEpochsToBeLoggedAgain) {
  const fs::path path = fs::temp_directory_path() / "kestrel_results_drop_test.csv";
  fs::remove(path);
  ResultsCsv csv(path.string());
  for (int e = 0; e < 3; ++e) csv.append(e, std::vector<double>(13, 0.5 + e));
  EXPECT_EQ(csv.drop_rows_from(3), 0);
  EXPECT_EQ(csv.drop_rows_from(1), 2);
  csv.append(1, std::vector<double>(13, 9.0));
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].substr(0, 21), "               epoch,");
  EXPECT_EQ(lines[1].substr(0, 42), "                   0,                 0.5,");
  EXPECT_EQ(lines[2].substr(0, 42), "                   1,                   9,");
  fs::remove(path);
}

// A full disk: writes are buffered, so the failure shows only when the file is closed. It must be an error
// naming the file, not a row lost in silence (/dev/full refuses every write with ENOSPC).
TEST(RunFiles, FullDiskIsAnErrorNotALostRow) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const fs::path dir = fs::temp_directory_path() / "kestrel_full_disk_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::create_symlink("/dev/full", dir / "results.csv");
  ResultsCsv csv((dir / "results.csv").string());
  try {
    csv.append(0, std::vector<double>(13, 0.5));
    ADD_FAILURE() << "no error for a row that could not be written";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("results.csv: write failed (No space left on device)"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kestrel::train
