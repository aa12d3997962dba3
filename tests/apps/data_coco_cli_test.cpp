// kestrel data coco: a dataset split as a COCO annotation file, through the executable.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace kestrel {
namespace {

TEST(DataCocoCli, DemoValSplitHasEveryImageAndLabel) {
  test::TempDir dir;
  const std::string out = dir.file("sub/ann.json");  // a missing parent folder is created
  auto r = test::run_command(test::kestrel_binary() + " data coco data/demo/demo.yaml --split val --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(out);
  ASSERT_TRUE(in.good()) << out;
  const nlohmann::json coco = nlohmann::json::parse(in);
  // demo val: 16 images with 115 label rows (cat data/demo/labels/val/*.txt | wc -l)
  EXPECT_EQ(coco["images"].size(), 16u);
  EXPECT_EQ(coco["annotations"].size(), 115u);
  EXPECT_EQ(coco["categories"].size(), 80u);
  EXPECT_EQ(coco["categories"][0]["name"], "person");
  EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));
}

TEST(DataCocoCli, MissingDatasetAndBadSplitAreErrors) {
  test::TempDir dir;
  auto r = test::run_command(test::kestrel_binary() + " data coco " + dir.file("none.yaml") + " --out " + dir.file("a.json"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(dir.file("none.yaml")), std::string::npos) << r.output;
  r = test::run_command(test::kestrel_binary() + " data coco data/demo/demo.yaml --split dev --out " + dir.file("a.json"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--split"), std::string::npos) << r.output;
  // demo.yaml has no test split
  r = test::run_command(test::kestrel_binary() + " data coco data/demo/demo.yaml --split test --out " + dir.file("a.json"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no 'test' split"), std::string::npos) << r.output;
  // --out naming the dataset YAML itself: refused, the YAML left as it was
  {
    std::ifstream in("data/demo/demo.yaml");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    text.replace(text.find("path: ."), 7, "path: " + std::filesystem::absolute("data/demo").string());
    std::ofstream(dir.file("demo.yaml")) << text;
  }
  const auto before = std::filesystem::file_size(dir.file("demo.yaml"));
  r = test::run_command(test::kestrel_binary() + " data coco " + dir.file("demo.yaml") + " --out " + dir.file("demo.yaml"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(": is the dataset YAML " + dir.file("demo.yaml") + "; not replaced"), std::string::npos) << r.output;
  EXPECT_EQ(std::filesystem::file_size(dir.file("demo.yaml")), before);
  // an --out that is not .json (a label file, an image) would be replaced with JSON
  r = test::run_command(test::kestrel_binary() + " data coco data/demo/demo.yaml --out " + dir.file("000000000139.txt"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("kestrel writes COCO JSON: name it .json"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kestrel
