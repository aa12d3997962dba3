// A YOLO-format split turned into a COCO annotation file, so that kestrel's own predictions on any YOLO
// dataset can be scored with COCO's metrics (eval/coco_eval.h) — the numbers papers quote.
//
// Conventions of the generated file:
//  - category id = YOLO class index (0-based), named from the dataset's `names`. Result files scored
//    against it must use the class index as category_id too (not COCO's 1..90 ids).
//  - image id = the file stem as an integer when every stem is a decimal number and no two are equal
//    (COCO's own file names, e.g. 000000000139.jpg -> 139); otherwise 1..n in sorted path order.
//  - annotation ids 1..n (pycocotools treats a gt id of 0 as "no match"), area = box w*h in pixels,
//    iscrowd 0, bbox [x, y, w, h] in pixels, not clipped.
//  - width and height come from the file header (JPEG SOF or PNG IHDR), swapped when the JPEG's EXIF
//    orientation is 5..8, because decoders (OpenCV, as in YOLOv5) rotate such images and the
//    normalised labels refer to the rotated image.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kestrel::eval {

struct ImageSize {
  int width = 0;
  int height = 0;
};

// Reads only the header; throws kestrel::Error naming the file if it is not a readable JPEG or PNG.
ImageSize read_image_size(const std::string& path);

struct YoloImage {
  std::string path;  // as found under the images folder
  int64_t id = 0;    // COCO image id (rule above)
  ImageSize size;
};

// JPEG and PNG files under `images_dir` (recursively, like YOLOv5), sorted by path, with ids and sizes.
// Other image formats YOLOv5 accepts (bmp, webp, tif ...) are an error rather than silently missing.
std::vector<YoloImage> list_yolo_images(const std::string& images_dir);

// YOLOv5's rule: the last "/images/" of the absolute path becomes "/labels/", the extension ".txt".
std::string yolo_label_path(const std::string& image_path);

// One label row converted to pixels.
struct YoloBox {
  int64_t class_index = 0;
  double x = 0, y = 0, w = 0, h = 0;  // COCO bbox: top-left corner and size in pixels
};

// Parses a label file ("class cx cy w h" normalised, or "class x1 y1 x2 y2 ..." polygons, which become
// their bounding box as in YOLOv5). A missing file means no objects. Exact duplicate rows are dropped
// (YOLOv5 drops them too). Errors name the file and line: wrong column count, non-numbers, a class that
// is not an integer in [0, num_classes), coordinates outside [0, 1].
std::vector<YoloBox> read_yolo_labels(const std::string& label_path, ImageSize size, int64_t num_classes);

// The whole split as a COCO annotation JSON object (images, annotations, categories).
nlohmann::json yolo_to_coco(const std::string& images_dir, const std::vector<std::string>& names);

// Same, written to `json_path`.
void write_yolo_as_coco(const std::string& images_dir, const std::vector<std::string>& names,
                        const std::string& json_path);

}  // namespace kestrel::eval
