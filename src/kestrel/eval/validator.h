// One pass of a model over a validation split with YOLOv5 val.py's procedure: letterboxed
// (rectangular) batches, NMS at conf 0.001 / IoU 0.6 with multi-label, predictions and labels scaled
// back to the original image, matching at IoU 0.50:0.95 (ap_metrics.h), P/R/mAP per class; plus the
// validation losses and the time per image of each stage.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "kestrel/data/loader.h"
#include "kestrel/eval/ap_metrics.h"
#include "kestrel/eval/coco_eval.h"
#include "kestrel/eval/nms.h"
#include "kestrel/models/yolo_model.h"

namespace kestrel::eval {

class ConfusionMatrix;  // eval/plots.h

struct ValidationOptions {
  NmsOptions nms = [] {
    NmsOptions o;
    o.conf_thres = 0.001;  // val.py defaults
    o.iou_thres = 0.6;
    o.multi_label = true;
    o.max_det = 300;
    return o;
  }();
  // Whose metric (ap_metrics.h): val.py's, or YOLOv7 test.py's (callers pick by model family).
  MetricStyle metric = MetricStyle::yolov5;
  bool single_cls = false;
  bool half = false;                    // fp16 autocast on CUDA (val.py --half; training validates in fp16)
  bool channels_last = false;           // images as NHWC, for a model whose weights are (training's --channels-last)
  bool augment = false;                 // val.py --augment: test-time augmentation (test_time_augment.h), no loss
  bool save_json = false;               // collect COCO-format predictions
  // val.py --save-txt [--save-conf]: each image's predictions appended to <txt_dir>/<image stem>.txt as
  // detect.py's label lines (confidence descending; images without predictions get no file). Empty: off.
  std::string txt_dir;
  bool save_conf = false;
  // val.py --save-hybrid (for auto-labelling): each image's labels join its predictions before NMS as
  // detections of confidence 1 (box, objectness 1, their class 1), so the metrics and txt files mix both.
  bool save_hybrid = false;
  std::vector<int> coco_category_ids;   // class index -> category id in JSON (empty: the class index)
  // The annotation file the JSON will be scored against: image ids by its file names (yolo_to_coco.h
  // coco_image_ids(paths, annotations)); null: coco_image_ids(paths).
  const CocoAnnotations* coco_annotations = nullptr;
  // When set, every image with labels is added to it as val.py does for confusion_matrix.png
  // (predictions and labels in original-image pixels; its nc must be the validation's).
  ConfusionMatrix* confusion = nullptr;
  // val.py's plots=True: the first plot_batches batches drawn into plot_dir as val_batch<i>_labels.jpg
  // (ground truth) and val_batch<i>_pred.jpg (predictions above conf 0.25, with confidences), upstream's 3.
  // Off (0) for the per-epoch validations in training, as upstream's. names: class names on the boxes.
  int plot_batches = 0;
  std::string plot_dir;
  std::vector<std::string> names;
};

// The metric a user of the model's upstream sees: YOLOv7 test.py's for YOLOv7 models (with --v5-metric's
// recall sentinel when `v5_metric`), val.py's for the others (v5_metric changes nothing there), or with
// `v3_metric` ultralytics/yolov3 v9.6.0 val.py's (not for YOLOv7 models: an Error naming --v3-metric).
MetricStyle metric_style_for(const models::YoloModel& model, bool v5_metric, bool v3_metric = false);

// The loss to report on the validation set: raw levels, targets, mask -> [3] (box, obj, cls) items.
using LossItemsFn = std::function<at::Tensor(const std::vector<at::Tensor>&, const at::Tensor&, const at::Tensor&)>;

struct ValidationResult {
  ApPerClass metrics;                   // P, R, mAP50, mAP50-95 (and per class)
  std::vector<int64_t> instances;       // [nc] labels per class in the split
  int64_t images = 0, labels = 0;
  std::array<double, 3> loss{0, 0, 0};  // mean over batches of the loss items (zeros without a loss)
  std::array<double, 3> ms_per_image{0, 0, 0};  // pre-process, inference, NMS
  std::vector<CocoDetection> predictions;  // COCO results (save_json); coco_results_json writes them
  std::vector<int64_t> image_ids;       // the split's COCO image ids (save_json), as the predictions number them
};

// Runs `model` (put in eval mode for the pass, restored after) over every batch of `loader` from epoch 0.
// `dataset` is the loader's (file names and original sizes for JSON). nc: the class count.
ValidationResult validate(models::YoloModel& model, data::DataLoader& loader, const data::YoloDataset& dataset,
                          const c10::Device& device, int64_t nc, const ValidationOptions& options,
                          const LossItemsFn& loss = nullptr);

// val.py's table: header, "all" row, and one row per class with labels (when verbose or few classes).
// Per-class rows only with per_class, more than one class and some correct prediction, as val.py; a split
// without labels adds val.py's warning.
// `task` names the split in val.py's "no labels found in {task} set" warning.
std::string format_validation_table(const ValidationResult& r, const std::vector<std::string>& names, bool per_class,
                                    const std::string& task = "val");


}  // namespace kestrel::eval
