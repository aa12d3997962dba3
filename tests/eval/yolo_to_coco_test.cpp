// YOLO split -> COCO annotation JSON: the conversion of a verified data::DatasetIndex checked by hand
// (boxes, polygons, image ids, categories), and the folder convenience on real image files, where
// listing, verification and label errors come from the data layer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "data/data_test_support.h"
#include "kestrel/core/error.h"
#include "kestrel/data/dataset_index.h"
#include "kestrel/eval/yolo_to_coco.h"
#include "test_support.h"

namespace kestrel::eval {
namespace {

using test::TempDir;
using test::write_file;


data::ImageRecord record(const std::string& image, int width, int height, std::vector<data::LabelRow> rows = {}) {
  return {image, "", width, height, std::move(rows)};
}

data::LabelRow box(float cls, float cx, float cy, float w, float h) { return {{cls, cx, cy, w, h}, {}}; }

// images/<split>/ and labels/<split>/ under `dir`; returns the images folder.
std::string make_split(const TempDir& dir) {
  std::filesystem::create_directories(dir.file("images/val"));
  std::filesystem::create_directories(dir.file("labels/val"));
  return dir.file("images/val");
}

void expect_bbox(const nlohmann::json& annotation, const std::vector<double>& expected, double tolerance) {
  ASSERT_EQ(annotation["bbox"].size(), 4u) << annotation;
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(annotation["bbox"][i].get<double>(), expected[i], tolerance) << annotation;
}

TEST(YoloToCoco, ConvertsIndexRecordsByHand) {
  data::DatasetIndex index;
  // b: a box with exactly representable values; then the bounding box of a polygon as the data layer
  // stores it (the polygon itself is ignored). c: background.
  data::LabelRow triangle = box(1, 0.25f, 0.375f, 0.25f, 0.25f);
  triangle.polygon = {0.125f, 0.25f, 0.375f, 0.25f, 0.375f, 0.5f};
  index.records = {record("/d/images/val/b.png", 200, 100, {box(3, 0.5f, 0.5f, 0.25f, 0.5f), triangle}),
                   record("/d/images/val/sub/c.png", 64, 32)};
  const nlohmann::json coco = coco_annotations(index, {"zero", "one", "two", "three"}, "/d/images/val");

  ASSERT_EQ(coco["images"].size(), 2u);
  EXPECT_EQ(coco["images"][0]["file_name"], "b.png");
  EXPECT_EQ(coco["images"][1]["file_name"], "sub/c.png");
  EXPECT_EQ(coco["images"][0]["id"], 1);  // stems are not numbers: 1..n in index order
  EXPECT_EQ(coco["images"][1]["id"], 2);
  EXPECT_EQ(coco["images"][0]["width"], 200);
  EXPECT_EQ(coco["images"][0]["height"], 100);
  EXPECT_EQ(coco["images"][1]["width"], 64);
  EXPECT_EQ(coco["images"][1]["height"], 32);

  ASSERT_EQ(coco["annotations"].size(), 2u);
  const auto& a = coco["annotations"][0];
  EXPECT_EQ(a["id"], 1);
  EXPECT_EQ(a["image_id"], 1);
  EXPECT_EQ(a["category_id"], 3);
  EXPECT_EQ(a["iscrowd"], 0);
  // cx 0.5, w 0.25 of 200 px -> x 75, w 50; cy 0.5, h 0.5 of 100 px -> y 25, h 50; area 2500.
  expect_bbox(a, {75, 25, 50, 50}, 0);
  EXPECT_EQ(a["area"].get<double>(), 2500);
  // Polygon x 0.125..0.375 -> 25..75 px, y 0.25..0.5 -> 25..50 px.
  const auto& t = coco["annotations"][1];
  EXPECT_EQ(t["id"], 2);
  EXPECT_EQ(t["category_id"], 1);
  expect_bbox(t, {25, 25, 50, 25}, 0);
  EXPECT_EQ(t["area"].get<double>(), 1250);

  ASSERT_EQ(coco["categories"].size(), 4u);
  EXPECT_EQ(coco["categories"][0]["id"], 0);
  EXPECT_EQ(coco["categories"][3]["id"], 3);
  EXPECT_EQ(coco["categories"][3]["name"], "three");
}

TEST(YoloToCoco, ImageIdsAreNumericStemsOnlyWhenAllDistinct) {
  data::DatasetIndex index;
  index.records = {record("/d/000000000139.jpg", 20, 20), record("/d/x/42.png", 20, 20)};
  nlohmann::json coco = coco_annotations(index, {"a"});
  EXPECT_EQ(coco["images"][0]["id"], 139);
  EXPECT_EQ(coco["images"][1]["id"], 42);
  EXPECT_EQ(coco["images"][0]["file_name"], "/d/000000000139.jpg");  // no root: the index's path

  index.records = {record("/d/a/7.jpg", 20, 20), record("/d/b/007.png", 20, 20)};  // same number twice
  coco = coco_annotations(index, {"a"});
  EXPECT_EQ(coco["images"][0]["id"], 1);
  EXPECT_EQ(coco["images"][1]["id"], 2);

  index.records = {record("/d/7.jpg", 20, 20), record("/d/seven.jpg", 20, 20)};  // one stem not a number
  coco = coco_annotations(index, {"a"});
  EXPECT_EQ(coco["images"][0]["id"], 1);
  EXPECT_EQ(coco["images"][1]["id"], 2);
}

// The ids follow the paths as strings, not the order they are given in (validation sorts by aspect ratio).
TEST(YoloToCoco, ImageIdsFollowThePathsNotTheirOrder) {
  EXPECT_EQ(coco_image_ids({"/d/b.jpg", "/d/a.jpg", "/d/c.jpg"}), (std::vector<int64_t>{2, 1, 3}));
  EXPECT_EQ(coco_image_ids({"/d/9.jpg", "/d/000000000139.jpg"}), (std::vector<int64_t>{9, 139}));
  // "/d/10.jpg" < "/d/9.jpg" < "/d/x.jpg" as strings; one stem not a number numbers them all.
  EXPECT_EQ(coco_image_ids({"/d/9.jpg", "/d/x.jpg", "/d/10.jpg"}), (std::vector<int64_t>{2, 3, 1}));
  EXPECT_TRUE(coco_image_ids({}).empty());
}

// With the annotation file predictions will be scored against, its own ids by file_name (whole trailing
// path components, the longest match), whatever was skipped since; a path it does not name gets an id it
// does not have.
TEST(YoloToCoco, ImageIdsFromTheAnnotationFileNames) {
  CocoAnnotations ann;
  ann.image_ids = {7, 3, 10, 11, 139};
  ann.file_names = {"img_a.jpg", "img_c.jpg", "a/x.jpg", "b/x.jpg", "000000000139.jpg"};
  EXPECT_EQ(coco_image_ids({"/r/images/img_c.jpg", "/r/images/img_a.jpg", "/r/images/new.jpg"}, ann),
            (std::vector<int64_t>{3, 7, 140}));  // 140: above the file's largest id
  EXPECT_EQ(coco_image_ids({"/r/images/b/x.jpg", "/r/images/a/x.jpg", "/r/images/c/x.jpg"}, ann),
            (std::vector<int64_t>{11, 10, 140}));
  EXPECT_EQ(coco_image_ids({"/coco/images/val2017/000000000139.jpg"}, ann), (std::vector<int64_t>{139}));
  ann.file_names.assign(5, "");  // no names: the ids of coco_image_ids(paths)
  EXPECT_EQ(coco_image_ids({"/d/b.jpg", "/d/a.jpg"}, ann), (std::vector<int64_t>{2, 1}));
}

TEST(YoloToCoco, ClassWithoutNameIsAnError) {
  data::DatasetIndex index;
  index.records = {record("/d/images/1.jpg", 20, 20, {box(2, 0.5f, 0.5f, 0.1f, 0.1f)})};
  index.records[0].label = "/d/labels/1.txt";
  const std::string message = test::error_message([&] { coco_annotations(index, {"a", "b"}); });
  EXPECT_NE(message.find("/d/labels/1.txt"), std::string::npos) << message;
  EXPECT_NE(message.find("class 2"), std::string::npos) << message;
}

TEST(YoloToCoco, FolderOfRealImages) {
  TempDir dir;
  const std::string images = make_split(dir);
  test::write_png(dir.file("images/val/b.png"), test::coordinate_image(200, 100));
  test::write_png(dir.file("images/val/a.png"), test::coordinate_image(200, 100));
  // a: a box, the same box again (dropped by data::parse_labels), a blank line, CRLF, a triangle;
  // b: no label file (background).
  write_file(dir.file("labels/val/a.txt"), "3 0.5 0.5 0.25 0.5\n\n3 0.5 0.5 0.25 0.5\r\n1 0.125 0.25 0.375 0.25 0.375 0.5\n");
  const nlohmann::json coco = yolo_to_coco(images, {"zero", "one", "two", "three"});

  ASSERT_EQ(coco["images"].size(), 2u);
  EXPECT_EQ(coco["images"][0]["file_name"], "a.png");  // sorted, relative to the folder
  EXPECT_EQ(coco["images"][1]["file_name"], "b.png");
  EXPECT_EQ(coco["images"][0]["id"], 1);
  EXPECT_EQ(coco["images"][0]["width"], 200);
  EXPECT_EQ(coco["images"][0]["height"], 100);
  // The repeated row is dropped and the rows then come sorted by box (class first), as upstream's np.unique.
  ASSERT_EQ(coco["annotations"].size(), 2u);
  EXPECT_EQ(coco["annotations"][0]["category_id"], 1);
  expect_bbox(coco["annotations"][0], {25, 25, 50, 25}, 1e-9);
  EXPECT_EQ(coco["annotations"][1]["category_id"], 3);
  expect_bbox(coco["annotations"][1], {75, 25, 50, 50}, 1e-9);
  ASSERT_EQ(coco["categories"].size(), 4u);
}

TEST(YoloToCoco, RelativeFolderStartingWithImagesFindsItsLabels) {
  // "images/val" has no "/images/" until it is made absolute; the labels must still be found.
  TempDir dir;
  make_split(dir);
  test::write_png(dir.file("images/val/1.png"), test::coordinate_image(20, 20));
  write_file(dir.file("labels/val/1.txt"), "0 0.5 0.5 0.5 0.5\n");
  const std::filesystem::path previous = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  nlohmann::json coco;
  const std::string message = test::error_message([&] { coco = yolo_to_coco("images/val/", {"a"}); });
  std::filesystem::current_path(previous);
  ASSERT_EQ(message, "") << "no error expected";
  EXPECT_EQ(coco["images"][0]["file_name"], "1.png");
  EXPECT_EQ(coco["annotations"].size(), 1u);
}

TEST(YoloToCoco, ExifRotatedJpegUsesOrientedSize) {
  TempDir dir;
  const std::string images = make_split(dir);
  const auto jpeg = test::encode_jpeg(test::coordinate_image(40, 30));
  test::write_bytes(dir.file("images/val/1.jpg"), test::with_exif_orientation(jpeg, 6));  // 90 degrees: 30x40
  test::write_bytes(dir.file("images/val/2.jpg"), test::with_exif_orientation(jpeg, 3));  // 180 degrees: 40x30
  write_file(dir.file("labels/val/1.txt"), "0 0.5 0.5 0.5 0.25\n");
  const nlohmann::json coco = yolo_to_coco(images, {"a"});
  ASSERT_EQ(coco["images"].size(), 2u);
  EXPECT_EQ(coco["images"][0]["id"], 1);
  EXPECT_EQ(coco["images"][0]["width"], 30);
  EXPECT_EQ(coco["images"][0]["height"], 40);
  EXPECT_EQ(coco["images"][1]["width"], 40);
  EXPECT_EQ(coco["images"][1]["height"], 30);
  // Normalised to the rotated 30x40 image: w 15, h 10, x 7.5, y 15.
  ASSERT_EQ(coco["annotations"].size(), 1u);
  expect_bbox(coco["annotations"][0], {7.5, 15, 15, 10}, 1e-9);
}

TEST(YoloToCoco, DemoSplitHasCocoIdsSizesAndHandCheckedBox) {
  std::vector<std::string> names(80);
  for (int i = 0; i < 80; ++i) names[i] = "class" + std::to_string(i);
  const nlohmann::json coco = yolo_to_coco("data/demo/images/val", names);
  EXPECT_EQ(coco["images"].size(), 16u);        // data/demo/README.md: 16 images, 115 boxes
  EXPECT_EQ(coco["annotations"].size(), 115u);
  EXPECT_EQ(coco["images"][0]["id"], 139);      // 000000000139.jpg
  EXPECT_EQ(coco["images"][15]["id"], 1584);
  // Sizes as reported by `file data/demo/images/val/*.jpg`.
  struct Known { const char* name; int64_t id; int w, h; };
  for (const Known& k : {Known{"000000000139.jpg", 139, 640, 426}, Known{"000000000724.jpg", 724, 375, 500},
                         Known{"000000001503.jpg", 1503, 320, 240}, Known{"000000001584.jpg", 1584, 612, 612}}) {
    const nlohmann::json* image = nullptr;
    for (const auto& i : coco["images"])
      if (i["id"] == k.id) image = &i;
    ASSERT_NE(image, nullptr) << k.name;
    EXPECT_EQ((*image)["file_name"], k.name);
    EXPECT_EQ((*image)["width"], k.w) << k.name;
    EXPECT_EQ((*image)["height"], k.h) << k.name;
  }
  // 000000001503.jpg is 320x240; its first row "63 0.198031 0.698896 0.392687 0.566292" gives
  // x = (0.198031 - 0.3926870/2) * 320 = 0.54, y = (0.698896 - 0.566292/2) * 240 = 99.78,
  // w = 0.392687 * 320 = 125.65984, h = 0.566292 * 240 = 135.91008, area = 17078.4389071872.
  // The data layer keeps rows as float32 (as YOLOv5 does), hence the tolerance.
  const nlohmann::json* found = nullptr;
  for (const auto& a : coco["annotations"])
    if (a["image_id"] == 1503 && a["category_id"] == 63) found = &a;
  ASSERT_NE(found, nullptr);
  expect_bbox(*found, {0.54, 99.78, 125.65984, 135.91008}, 1e-4);
  EXPECT_NEAR((*found)["area"].get<double>(), 17078.4389071872, 1e-2);
}

TEST(YoloToCoco, MalformedLabelsNameFileAndLine) {
  struct Case { const char* text; const char* says; };
  const Case cases[] = {
      {"0 0.5 0.5 0.1 0.1\n0 0.5 0.5 0.1\n", "4 values"},
      {"0 0.5 0.5 0.1 0.1\n0 0.5 0.5 0.1 0.1 0.2\n", "6 values"},
      {"0 0.5 0.5 0.1 0.1\n0 0.5 half 0.1 0.1\n", "'half' is not a number"},
      {"0 0.5 0.5 0.1 0.1\n4 0.5 0.5 0.1 0.1\n", "class 4 exceeds"},
      {"0 0.5 0.5 0.1 0.1\n1.5 0.5 0.5 0.1 0.1\n", "class 1.5"},
      {"0 0.5 0.5 0.1 0.1\n0 0.5 1.2 0.1 0.1\n", "outside 0..1"},
  };
  for (const Case& c : cases) {
    TempDir dir;
    const std::string images = make_split(dir);
    test::write_png(dir.file("images/val/7.png"), test::coordinate_image(10, 10));
    test::write_png(dir.file("images/val/8.png"), test::coordinate_image(10, 10));  // fine, but 7 fails the split
    write_file(dir.file("labels/val/7.txt"), c.text);
    const std::string message = test::error_message([&] { yolo_to_coco(images, {"a", "b", "c", "d"}); });
    EXPECT_EQ(message.rfind(images, 0), 0u) << message;  // names the folder first
    EXPECT_NE(message.find("1 of 2 image(s)"), std::string::npos) << message;
    EXPECT_NE(message.find(dir.file("labels/val/7.txt") + ":2: "), std::string::npos) << message;
    EXPECT_NE(message.find(c.says), std::string::npos) << message;
  }
}

TEST(YoloToCoco, CorruptImagesFailNamingEveryFile) {
  TempDir dir;
  const std::string images = make_split(dir);
  test::write_png(dir.file("images/val/good.png"), test::coordinate_image(20, 20));
  write_file(dir.file("images/val/text.jpg"), "hello");
  test::write_png(dir.file("images/val/tiny.png"), test::coordinate_image(5, 5));  // below 10 px: skipped
  const std::string message = test::error_message([&] { yolo_to_coco(images, {"a"}); });
  EXPECT_NE(message.find("2 of 3 image(s)"), std::string::npos) << message;
  EXPECT_NE(message.find(dir.file("images/val/text.jpg")), std::string::npos) << message;
  EXPECT_NE(message.find(dir.file("images/val/tiny.png")), std::string::npos) << message;
}

// JSON holds UTF-8: a name of other bytes would be written with replacement characters and then match no
// image when val reads the file back, so it is refused, naming the image.
TEST(YoloToCoco, FileNameNotUtf8IsNamed) {
  TempDir dir;
  const std::string images = make_split(dir);
  const std::string latin1 = dir.file("images/val/caf\xe9.png");
  test::write_png(latin1, test::coordinate_image(20, 20));
  const std::string message = test::error_message([&] { yolo_to_coco(images, {"a"}); });
  EXPECT_NE(message.find(latin1 + ": the file name is not UTF-8"), std::string::npos) << message;
}

TEST(YoloToCoco, MissingOrEmptyFoldersAndNoNamesFail) {
  TempDir dir;
  EXPECT_NE(test::error_message([&] { yolo_to_coco(dir.file("nothing"), {"a"}); }).find(dir.file("nothing")), std::string::npos);
  EXPECT_NE(test::error_message([&] { yolo_to_coco(dir.path(), {"a"}); }).find("no images"), std::string::npos);
  EXPECT_NE(test::error_message([&] { yolo_to_coco("data/demo/images/val", {}); }).find("class names"), std::string::npos);
}

// COCO 2017's category ids of YOLO's 80 classes: person 1, bicycle 2, ..., stop sign 13 (12 unused),
// backpack 27 (26 unused), ..., toothbrush 90; ten ids unused in all (COCO's 91 minus id 91 and these).
TEST(CocoCategories, EightyClassesToCocoIds) {
  const std::vector<int>& ids = coco80_to_coco91_ids();
  ASSERT_EQ(ids.size(), 80u);
  EXPECT_EQ(ids[0], 1);    // person
  EXPECT_EQ(ids[10], 11);  // fire hydrant
  EXPECT_EQ(ids[11], 13);  // stop sign
  EXPECT_EQ(ids[24], 27);  // backpack
  EXPECT_EQ(ids[26], 31);  // handbag
  EXPECT_EQ(ids[39], 44);  // bottle
  EXPECT_EQ(ids[40], 46);  // wine glass
  EXPECT_EQ(ids[60], 67);  // dining table
  EXPECT_EQ(ids[61], 70);  // toilet
  EXPECT_EQ(ids[62], 72);  // tv
  EXPECT_EQ(ids[72], 82);  // refrigerator
  EXPECT_EQ(ids[73], 84);  // book
  EXPECT_EQ(ids[79], 90);  // toothbrush
}

// Predictions get the annotation file's ids: by category name, else COCO's ids for COCO's 80 classes,
// else the class index; a file that fits none is an error naming it.
TEST(CocoCategories, IdsByNameThenCocoThenIndex) {
  CocoAnnotations ann;
  ann.source = "instances.json";
  ann.category_ids = {7, 3, 5};
  ann.category_names = {"dog", "cat", "bird"};
  EXPECT_EQ(coco_category_ids_for({"cat", "dog"}, ann, false), (std::vector<int>{3, 7}));
  ann.category_names = {"", "", ""};
  ann.category_ids = {0, 1, 2};
  EXPECT_EQ(coco_category_ids_for({"cat", "dog"}, ann, false), (std::vector<int>{0, 1}));
  ann.category_ids = {3, 5, 7};
  EXPECT_NE(test::error_message([&] { coco_category_ids_for({"cat", "dog"}, ann, false); })
                .find("instances.json: its categories match neither the dataset's class names nor their indices (class 0 'cat'"),
            std::string::npos);
  CocoAnnotations coco;
  coco.category_ids.assign(coco80_to_coco91_ids().begin(), coco80_to_coco91_ids().end());
  coco.category_names.assign(80, "");
  const std::vector<std::string> names(80, "x");
  EXPECT_EQ(coco_category_ids_for(names, coco, true), coco80_to_coco91_ids());
  // --single-cls on COCO: class 0 is COCO's person (val.py's coco80_to_coco91_class()[0]).
  EXPECT_EQ(coco_category_ids_for({"item"}, coco, true), (std::vector<int>{1}));
}

// val.py's is_coco: a val entry ending in coco/val2017.txt (YOLOv5), or a YAML named coco.yaml (YOLOv7).
TEST(CocoCategories, CocoDatasetsAreRecognised) {
  data::DatasetConfig cfg;
  cfg.source = "data/coco.yaml";
  EXPECT_TRUE(is_coco_dataset(cfg));
  cfg.source = "data/coco128.yaml";
  EXPECT_FALSE(is_coco_dataset(cfg));
  cfg.val = {"/datasets/coco/val2017.txt"};
  EXPECT_TRUE(is_coco_dataset(cfg));
  cfg.val = {"/datasets/coco/images/val2017"};
  EXPECT_FALSE(is_coco_dataset(cfg));
  // each rule alone (train.py's final validation uses YOLOv5's or YOLOv7's by recipe)
  data::DatasetConfig by_path;
  by_path.source = "data/my.yaml";
  by_path.val = {"../datasets/coco/val2017.txt"};
  EXPECT_TRUE(has_coco_val_path(by_path));
  EXPECT_FALSE(has_coco_yaml_name(by_path));
  data::DatasetConfig by_name;
  by_name.source = "data/coco.yaml";
  by_name.val = {"/datasets/coco/images/val2017"};
  EXPECT_TRUE(has_coco_yaml_name(by_name));
  EXPECT_FALSE(has_coco_val_path(by_name));
  by_name.val = {"a/coco/val2017.txt", "b/coco/val2017.txt"};  // YOLOv5 compares a single string
  EXPECT_FALSE(has_coco_val_path(by_name));
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
