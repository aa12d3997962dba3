// `kestrel val --task study` (val.py / YOLOv7 test.py --task study): validation at every image size from
// 256 to 1536 in steps of 128, one row per size in study_<data>_<weights>.txt, and study.png, mAP50-95
// against the time per image for every study file of the run.
#pragma once
#include <string>
#include <vector>

#include "kestrel/eval/validator.h"

namespace kestrel::eval {

// 256, 384, ..., 1536 (upstream's range(256, 1536 + 128, 128)).
std::vector<int> study_image_sizes();

// One row as np.savetxt(fmt='%10.4g') writes it, values separated by single spaces:
//   val.py (10 values):   P R mAP50 mAP50-95 box obj cls  pre-process inference NMS (ms per image)
//   test.py (13 values):  P R mAP50 mAP50-95 box obj cls  inference NMS total (ms per image)  img img batch
// The losses are the validation losses, zeros outside training (as upstream's standalone runs).
std::string study_row(const ValidationResult& r, bool yolov7_columns, int img_size, int batch_size);

// The file name upstream gives a study: study_<data YAML stem>_<weights stem>.txt.
std::string study_file_name(const std::string& data_yaml, const std::string& weights);

// study.png: for each file (sorted by name), mAP50-95 x 100 against the speed column (val.py's rows:
// inference; test.py's: total), from the second size up to the size of the best mAP, as upstream's
// plot_val_study / plot_study_txt; every size when the best is the first (upstream then draws nothing).
// The axes follow the data (upstream's are fixed for COCO) and there is no EfficientDet reference curve.
// Bad files are errors naming the file and line.
void plot_study(std::vector<std::string> study_files, const std::string& png_path);

}  // namespace kestrel::eval
