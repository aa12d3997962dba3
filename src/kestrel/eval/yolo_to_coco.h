// A YOLO-format split turned into a COCO annotation file, so that kestrel's own predictions on any YOLO
// dataset can be scored with COCO's metrics (eval/coco_eval.h) — the numbers papers quote.
//
// Listing, image verification and label parsing are the data layer's (data/image_files.h,
// data/dataset_index.h, data/labels.h); this file only turns a verified index into COCO's layout.
//
// Conventions of the generated file:
//  - category id = YOLO class index (0-based), named from the dataset's `names`. Result files scored
//    against it must use the class index as category_id too (not COCO's 1..90 ids).
//  - image id = the file stem as an integer when every stem is a decimal number and no two are equal
//    (COCO's own file names, e.g. 000000000139.jpg -> 139); otherwise 1..n in the index's (sorted
//    path) order.
//  - annotation ids 1..n (pycocotools treats a gt id of 0 as "no match"), area = box w*h in pixels,
//    iscrowd 0, bbox [x, y, w, h] in pixels from the normalised row and the image size, not clipped.
//  - width and height are the index's: the decoded size after EXIF orientation, which is the image the
//    normalised labels refer to (as in YOLOv5). Polygon rows count as their bounding box.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kestrel/data/dataset_config.h"
#include "kestrel/data/dataset_index.h"
#include "kestrel/eval/coco_eval.h"

namespace kestrel::eval {

// The COCO image ids kestrel gives images, the same in its annotation files (`kestrel data coco`) and in
// its predictions (`kestrel val --save-json`): the integer file stems when every stem is decimal and
// distinct (COCO's own files: 000000000139.jpg -> 139), else 1..n in the order of the paths as strings.
// `paths` in any order (validation sorts by aspect ratio); the ids come back in that order.
std::vector<int64_t> coco_image_ids(const std::vector<std::string>& paths);

// The ids of `paths` in an annotation file: its own id for an image whose file_name ends the path (whole
// components: "val/x.jpg" names .../images/val/x.jpg; the longest such name wins), so that predictions meet
// their images whatever was skipped or added since the file was made (on COCO's own file the same ids as
// the numeric stems, val.py's rule). A path no file_name ends gets an id the file does not have (above its
// largest), so its predictions are reported as outside the file rather than scored against another image.
// A file without file names: coco_image_ids(paths).
std::vector<int64_t> coco_image_ids(const std::vector<std::string>& paths, const CocoAnnotations& annotations);

// COCO 2017's category ids of the 80 classes in YOLO's order (val.py's coco80_to_coco91_class): 1..90
// without the ten ids COCO leaves unused (12, 26, 29, 30, 45, 66, 68, 69, 71, 83).
const std::vector<int>& coco80_to_coco91_ids();
// val.py's class map without an annotation file: coco80_to_coco91_class()[c] on a COCO dataset of at most
// 80 classes (--single-cls's class 0 is person), else empty (the class index is the category id).
std::vector<int> coco_category_ids(bool is_coco, size_t nc);

// The two tests upstream uses for "the dataset is COCO": YOLOv5's (val.py, train.py), a single val entry
// ending in coco/val2017.txt; YOLOv7's (test.py, train.py) and YOLOv5's --save-json default, a dataset
// YAML whose name ends in coco.yaml.
bool has_coco_val_path(const data::DatasetConfig& cfg);
bool has_coco_yaml_name(const data::DatasetConfig& cfg);
// val.py's is_coco for kestrel val: either of the two.
bool is_coco_dataset(const data::DatasetConfig& cfg);

// The category id of each class in predictions scored against `annotations`: by name when every class
// name is a category name of the file (COCO's instances_*.json and yolov5's coco.yaml names agree);
// else COCO's 80 -> 91 ids on a COCO dataset (is_coco; also for fewer classes: --single-cls's class 0 is
// person, as val.py); else the class index when
// every index is a category id of the file (`kestrel data coco`'s files). Otherwise an error naming the
// file and a class it does not know.
std::vector<int> coco_category_ids_for(const std::vector<std::string>& names, const CocoAnnotations& annotations,
                                       bool is_coco);

// The verified samples of `index` (index.records; skipped files are not in it) as a COCO annotation
// JSON object (info, images, annotations, categories). `names` gives the categories; a row whose class
// has no name is an error. file_name is the image path relative to `images_root` when the image lies
// under it, else the path as the index has it.
nlohmann::json coco_annotations(const data::DatasetIndex& index, const std::vector<std::string>& names,
                                const std::string& images_root = "");

// Lists the images under `images_dir` (data::list_images: recursively, every format the data layer reads),
// verifies them (data::index_split, no cache, nc = names.size()) and converts them. Any skipped image or
// label file is an error naming the folder and every skipped file's reason: a ground-truth file must not
// silently lose images. No images at all is an error too.
nlohmann::json yolo_to_coco(const std::string& images_dir, const std::vector<std::string>& names);

// Same, written to `json_path` (whole, via a temporary file renamed into place).
void write_yolo_as_coco(const std::string& images_dir, const std::vector<std::string>& names,
                        const std::string& json_path);

}  // namespace kestrel::eval
