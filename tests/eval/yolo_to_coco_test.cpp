// YOLO split -> COCO annotation JSON: image sizes from headers (checked against `file`'s report for the
// demo images and against hand-built headers), boxes converted by hand, malformed labels reported.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "kestrel/core/error.h"
#include "kestrel/eval/yolo_to_coco.h"
#include "test_support.h"

namespace kestrel::eval {
namespace {

using test::TempDir;
using test::write_file;

std::string be(uint32_t v, int bytes) {
  std::string s;
  for (int i = bytes - 1; i >= 0; --i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}
std::string le(uint32_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

std::string png_header(uint32_t width, uint32_t height) {
  return std::string("\x89PNG\r\n\x1a\n", 8) + be(13, 4) + "IHDR" + be(width, 4) + be(height, 4) +
         std::string("\x08\x02\x00\x00\x00", 5) + be(0, 4);
}

// SOI, APP0 (JFIF), `extra` segments, a DHT (C4: not a frame header), a fill byte, then SOF2.
std::string jpeg_header(uint32_t width, uint32_t height, const std::string& extra = "") {
  const std::string app0 = "\xFF\xE0" + be(16, 2) + std::string("JFIF\0\x01\x01\0\0\x01\0\x01\0\0", 14);
  const std::string dht = "\xFF\xC4" + be(5, 2) + std::string("\0\0\0", 3);
  const std::string sof2 = std::string("\xFF\xFF\xC2") + be(17, 2) + "\x08" + be(height, 2) + be(width, 2) +
                           std::string(10, '\x01');
  return "\xFF\xD8" + app0 + extra + dht + sof2 + "\xFF\xDA" + be(8, 2);
}

// APP1 with an EXIF block holding one IFD0 entry: orientation.
std::string exif_segment(uint16_t orientation, bool little_endian) {
  auto n = [&](uint32_t v, int bytes) { return little_endian ? le(v, bytes) : be(v, bytes); };
  const std::string tiff = std::string(little_endian ? "II" : "MM") + n(42, 2) + n(8, 4) + n(1, 2) +
                           n(0x0112, 2) + n(3, 2) + n(1, 4) + n(orientation, 2) + n(0, 2) + n(0, 4);
  const std::string payload = std::string("Exif\0\0", 6) + tiff;
  return "\xFF\xE1" + be(static_cast<uint32_t>(payload.size() + 2), 2) + payload;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(YoloToCoco, DemoImageSizesMatchFileCommand) {
  // Sizes as reported by `file data/demo/images/val/*.jpg`.
  const std::string dir = "data/demo/images/val/";
  struct Known { const char* name; int w, h; };
  for (const Known& k : {Known{"000000000139.jpg", 640, 426}, Known{"000000000724.jpg", 375, 500},
                         Known{"000000001503.jpg", 320, 240}, Known{"000000001584.jpg", 612, 612}}) {
    const ImageSize s = read_image_size(dir + k.name);
    EXPECT_EQ(s.width, k.w) << k.name;
    EXPECT_EQ(s.height, k.h) << k.name;
  }
}

TEST(YoloToCoco, HandBuiltHeaders) {
  TempDir dir;
  write_file(dir.file("a.png"), png_header(640, 480));
  write_file(dir.file("b.jpg"), jpeg_header(400, 300));
  write_file(dir.file("c.jpg"), jpeg_header(400, 300, exif_segment(6, true)));   // rotated 90: swap
  write_file(dir.file("d.jpg"), jpeg_header(400, 300, exif_segment(8, false)));  // big-endian EXIF
  write_file(dir.file("e.jpg"), jpeg_header(400, 300, exif_segment(3, true)));   // 180: no swap
  const auto size = [&](const char* name) {
    const ImageSize s = read_image_size(dir.file(name));
    return std::to_string(s.width) + "x" + std::to_string(s.height);
  };
  EXPECT_EQ(size("a.png"), "640x480");
  EXPECT_EQ(size("b.jpg"), "400x300");
  EXPECT_EQ(size("c.jpg"), "300x400");
  EXPECT_EQ(size("d.jpg"), "300x400");
  EXPECT_EQ(size("e.jpg"), "400x300");
}

TEST(YoloToCoco, UnreadableImagesNameTheFile) {
  TempDir dir;
  write_file(dir.file("text.jpg"), "hello");
  write_file(dir.file("cut.jpg"), jpeg_header(400, 300).substr(0, 30));
  write_file(dir.file("nosof.jpg"), std::string("\xFF\xD8\xFF\xDA", 4) + be(8, 2));
  for (const char* name : {"text.jpg", "cut.jpg", "nosof.jpg", "missing.png"}) {
    const std::string message = error_of([&] { read_image_size(dir.file(name)); });
    EXPECT_NE(message.find(dir.file(name)), std::string::npos) << message;
  }
  EXPECT_NE(error_of([&] { read_image_size(dir.file("nosof.jpg")); }).find("frame header"), std::string::npos);
}

TEST(YoloToCoco, LabelPathFollowsYolov5Rule) {
  const std::string label = yolo_label_path("/data/set/images/train/images/x.y.jpg");
  EXPECT_EQ(label, "/data/set/images/train/labels/x.y.txt");
}

TEST(YoloToCoco, ConvertsBoxesPolygonsAndRunningIds) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("images/val"));
  std::filesystem::create_directories(dir.file("labels/val"));
  write_file(dir.file("images/val/b.png"), png_header(200, 100));
  write_file(dir.file("images/val/a.png"), png_header(200, 100));
  // a: a box, the same box again (dropped), a triangle; b: no label file.
  write_file(dir.file("labels/val/a.txt"), "3 0.5 0.5 0.2 0.4\n\n3 0.5 0.5 0.2 0.4\r\n1 0.1 0.2 0.3 0.2 0.3 0.6\n");
  const nlohmann::json coco = yolo_to_coco(dir.file("images/val"), {"zero", "one", "two", "three"});

  ASSERT_EQ(coco["images"].size(), 2u);
  EXPECT_EQ(coco["images"][0]["file_name"], "a.png");  // sorted, ids 1..n since stems are not numbers
  EXPECT_EQ(coco["images"][0]["id"], 1);
  EXPECT_EQ(coco["images"][1]["id"], 2);
  EXPECT_EQ(coco["images"][0]["width"], 200);
  EXPECT_EQ(coco["images"][0]["height"], 100);
  ASSERT_EQ(coco["annotations"].size(), 2u);
  const auto& box = coco["annotations"][0];
  EXPECT_EQ(box["id"], 1);
  EXPECT_EQ(box["image_id"], 1);
  EXPECT_EQ(box["category_id"], 3);
  EXPECT_EQ(box["iscrowd"], 0);
  // cx 0.5, w 0.2 of 200 px -> x 80, w 40; cy 0.5, h 0.4 of 100 px -> y 30, h 40.
  const std::vector<double> expected = {80, 30, 40, 40};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(box["bbox"][i].get<double>(), expected[i], 1e-9);
  EXPECT_NEAR(box["area"].get<double>(), 1600, 1e-9);
  // Triangle (0.1,0.2) (0.3,0.2) (0.3,0.6): x 0.1..0.3 -> 20..60 px, y 0.2..0.6 -> 20..60 px.
  const auto& tri = coco["annotations"][1];
  EXPECT_EQ(tri["category_id"], 1);
  const std::vector<double> tri_expected = {20, 20, 40, 40};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(tri["bbox"][i].get<double>(), tri_expected[i], 1e-9);
  ASSERT_EQ(coco["categories"].size(), 4u);
  EXPECT_EQ(coco["categories"][3]["id"], 3);
  EXPECT_EQ(coco["categories"][3]["name"], "three");
}

TEST(YoloToCoco, DemoSplitHasCocoIdsAndHandCheckedBox) {
  std::vector<std::string> names(80);
  for (int i = 0; i < 80; ++i) names[i] = "class" + std::to_string(i);
  const nlohmann::json coco = yolo_to_coco("data/demo/images/val", names);
  EXPECT_EQ(coco["images"].size(), 16u);        // data/demo/README.md: 16 images, 115 boxes
  EXPECT_EQ(coco["annotations"].size(), 115u);
  EXPECT_EQ(coco["images"][0]["id"], 139);      // 000000000139.jpg
  EXPECT_EQ(coco["images"][15]["id"], 1584);
  // 000000001503.jpg is 320x240; its first row "63 0.198031 0.698896 0.392687 0.566292" gives
  // x = (0.198031 - 0.3926870/2) * 320 = 0.54, y = (0.698896 - 0.566292/2) * 240 = 99.78,
  // w = 0.392687 * 320 = 125.65984, h = 0.566292 * 240 = 135.91008, area = 17078.4389071872.
  const nlohmann::json* found = nullptr;
  for (const auto& a : coco["annotations"])
    if (a["image_id"] == 1503 && a["category_id"] == 63) found = &a;
  ASSERT_NE(found, nullptr);
  const std::vector<double> expected = {0.54, 99.78, 125.65984, 135.91008};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR((*found)["bbox"][i].get<double>(), expected[i], 1e-9);
  EXPECT_NEAR((*found)["area"].get<double>(), 17078.4389071872, 1e-6);
}

TEST(YoloToCoco, MalformedLabelsNameFileAndLine) {
  struct Case { const char* text; const char* says; };
  const Case cases[] = {
      {"0 0.5 0.5 0.1 0.1\n0 0.5 0.5 0.1\n", "got 4"},
      {"0 0.5 0.5 0.1 0.1\n0 0.5 0.5 0.1 0.1 0.2\n", "got 6"},
      {"0 0.5 0.5 0.1 0.1\n0 0.5 half 0.1 0.1\n", "'half' is not a number"},
      {"0 0.5 0.5 0.1 0.1\n4 0.5 0.5 0.1 0.1\n", "class 4"},
      {"0 0.5 0.5 0.1 0.1\n1.5 0.5 0.5 0.1 0.1\n", "class 1.5"},
      {"0 0.5 0.5 0.1 0.1\n0 0.5 1.2 0.1 0.1\n", "outside [0, 1]"},
  };
  for (const Case& c : cases) {
    TempDir dir;
    std::filesystem::create_directories(dir.file("images/val"));
    std::filesystem::create_directories(dir.file("labels/val"));
    write_file(dir.file("images/val/7.png"), png_header(10, 10));
    write_file(dir.file("labels/val/7.txt"), c.text);
    const std::string message = error_of([&] { yolo_to_coco(dir.file("images/val"), {"a", "b", "c", "d"}); });
    const std::string label = dir.file("labels/val/7.txt");
    EXPECT_NE(message.find(label + ":2"), std::string::npos) << message;
    EXPECT_NE(message.find(c.says), std::string::npos) << message;
  }
}

TEST(YoloToCoco, UnsupportedOrMissingFoldersFail) {
  TempDir dir;
  EXPECT_THROW(yolo_to_coco(dir.file("nothing"), {"a"}), Error);
  EXPECT_THROW(yolo_to_coco(dir.path(), {"a"}), Error);  // no images
  write_file(dir.file("x.webp"), "RIFF");
  const std::string message = error_of([&] { yolo_to_coco(dir.path(), {"a"}); });
  EXPECT_NE(message.find("x.webp"), std::string::npos) << message;
}

TEST(YoloToCoco, WritesJsonFile) {
  TempDir dir;
  write_yolo_as_coco("data/demo/images/val", std::vector<std::string>(80, "n"), dir.file("val.json"));
  std::ifstream in(dir.file("val.json"));
  const nlohmann::json coco = nlohmann::json::parse(in);
  EXPECT_EQ(coco["annotations"].size(), 115u);
  EXPECT_FALSE(std::filesystem::exists(dir.file("val.json.tmp")));
}

}  // namespace
}  // namespace kestrel::eval
