#include "kestrel/eval/validator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "kestrel/core/device.h"
#include "kestrel/core/error.h"
#include "kestrel/data/batch_image.h"
#include "kestrel/data/image_io.h"
#include "kestrel/eval/detector.h"
#include "kestrel/eval/plots.h"
#include "kestrel/eval/test_time_augment.h"
#include "kestrel/eval/yolo_to_coco.h"
#include "kestrel/models/model_family.h"

namespace kestrel::eval {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Boxes [n, 4] xyxy in network-input pixels -> original-image pixels, clipped (val.py scale_boxes with
// ratio_pad: subtract the letterbox padding, divide by the resize gain, clip to the original image).
at::Tensor to_original(const at::Tensor& boxes, const data::SampleMeta& meta) {
  // upstream takes ratio_pad[0][0] (the height ratio) as the gain of both axes
  return unletterbox_boxes(boxes, meta.ratio.y, meta.pad.x, meta.pad.y, meta.original);
}

// val_batch<i>_labels.jpg and val_batch<i>_pred.jpg: the letterboxed batch with its targets, and with the
// NMS output in the batch's pixels (before any scaling to the original image), as val.py's plot_images.
void plot_batch(const data::Batch& batch, const std::vector<at::Tensor>& kept, const data::YoloDataset& dataset,
                const ValidationOptions& options, int64_t number) {
  if (options.plot_dir.empty()) fail("ValidationOptions: plot_batches needs plot_dir");
  data::BatchImageOptions o;
  for (const auto& meta : batch.meta) o.paths.push_back(dataset.records()[meta.index].image);
  const std::filesystem::path dir(options.plot_dir);
  std::vector<at::Tensor> predictions = kept;
  if (options.single_cls)  // val.py zeroes the class of single-class predictions before plotting
    for (auto& p : predictions) {
      p = p.clone();
      if (p.size(0)) p.select(1, 5).zero_();
    }
  data::write_jpeg((dir / cat("val_batch", number, "_labels.jpg")).string(), data::render_batch(batch, options.names, o));
  data::write_jpeg((dir / cat("val_batch", number, "_pred.jpg")).string(), data::render_batch(batch, predictions, options.names, o));
}

// --save-hybrid: targets [B, M, 5] (class, cx, cy, w, h normalised to the batch image) -> [B, M, 5 + nc]
// rows as the head decodes them (pixels, objectness 1, class one-hot); padding rows (mask false) are all
// zero, below any confidence threshold.
at::Tensor labels_as_predictions(const data::DeviceBatch& input, int64_t nc) {
  const double h = static_cast<double>(input.images.size(2)), w = static_cast<double>(input.images.size(3));
  const at::Tensor t = input.targets.to(at::kFloat);
  const at::Tensor valid = input.target_mask.to(at::kFloat).unsqueeze(-1);  // [B, M, 1]
  const at::Tensor boxes = t.slice(2, 1, 5) * at::tensor({w, h, w, h}, t.options());
  const at::Tensor classes = at::one_hot(t.select(2, 0).to(at::kLong).clamp(0, nc - 1), nc).to(at::kFloat);
  return at::cat({boxes, at::ones_like(valid), classes}, 2) * valid;
}

// val.py's three timed phases of one batch (times added to `ms`, in ms): pre-process (to the device, scaled;
// not the wait for the loader), inference (with the val losses added to loss_sum when `loss` is given, not
// under --augment, as val.py) and NMS. Returns each image's kept detections [n, 6] on the CPU.
std::vector<at::Tensor> infer_batch(models::YoloModel& model, data::Batch& batch, const c10::Device& device,
                                    const ValidationOptions& options, const LossItemsFn& loss, at::Tensor& loss_sum,
                                    std::array<double, 3>& ms) {
  auto t = Clock::now();
  data::trim_targets(batch);
  const data::DeviceBatch input = data::to_device(batch, device, options.channels_last);
  synchronize(device);
  ms[0] += ms_since(t);

  t = Clock::now();
  at::Tensor predictions;
  {
    AutocastGuard autocast(device.type(), at::kHalf, options.half && device.is_cuda());
    if (options.augment) {
      predictions = predict_augmented(model, input.images).to(at::kFloat);  // val.py: no loss then
    } else {
      const std::vector<at::Tensor> levels = model.forward(input.images);
      predictions = model.head().decode(levels).to(at::kFloat);
      if (loss) loss_sum.add_(loss(levels, input.targets, input.target_mask).to(at::kFloat));
    }
  }
  synchronize(device);
  ms[1] += ms_since(t);

  t = Clock::now();
  // The head's class count (upstream's prediction.shape[2] - 5), which --single-cls does not change.
  if (options.save_hybrid) predictions = at::cat({predictions, labels_as_predictions(input, predictions.size(2) - 5)}, 1);
  NmsOptions nms = options.nms;
  nms.agnostic = nms.agnostic || options.single_cls;
  nms.yolov7 = is_yolov7_style(options.metric);  // YOLOv7's test.py runs YOLOv7's NMS
  nms.yolov3 = options.metric == MetricStyle::yolov3;
  std::vector<at::Tensor> kept = non_max_suppression(predictions, nms);
  for (auto& k : kept) k = k.to(at::kCPU);
  ms[2] += ms_since(t);
  return kept;
}

// What ap_per_class reads, image by image (val.py's stats).
struct MatchLists {
  std::vector<at::Tensor> correct, conf, pred_cls, target_cls;
};

// One image's detections pred [n, 6] (batch pixels) against its labels [nl, 5] (class, normalised cxcywh of
// the w x h batch image), as val.py's per-image loop: the matches at every IoU threshold and the confusion
// matrix. Returns val.py's predn [n, 6] (x1, y1, x2, y2 in original pixels, conf, cls); empty without
// detections.
at::Tensor score_image(const at::Tensor& pred, const at::Tensor& labels, const data::SampleMeta& meta, double w, double h,
                       const at::Tensor& iou_thresholds, const ValidationOptions& options, MatchLists& lists) {
  const at::Tensor tcls = labels.select(1, 0).to(at::kLong);
  if (pred.size(0) == 0) {
    if (labels.size(0) == 0) return {};  // val.py: nothing to count
    // val.py v7.0's detections=None: only the label classes count (all missed), so the boxes may stay
    // normalised. YOLOv7's test.py and yolov3 v9.6.0's val.py pass over such an image (`continue`).
    if (options.confusion && options.metric == MetricStyle::yolov5) options.confusion->process_batch(at::Tensor(), labels);
    lists.correct.push_back(at::zeros({0, iou_thresholds.size(0)}, at::kBool));
    lists.conf.push_back(at::zeros({0}));
    lists.pred_cls.push_back(at::zeros({0}));
    lists.target_cls.push_back(tcls);
    return {};
  }
  const at::Tensor pred_boxes = to_original(pred.slice(1, 0, 4), meta);
  // Labels: normalised cxcywh of the batch image -> pixel xyxy -> original image.
  const at::Tensor cxcy = labels.slice(1, 1, 3) * at::tensor({w, h}, at::kFloat);
  const at::Tensor half_wh = labels.slice(1, 3, 5) * at::tensor({w / 2, h / 2}, at::kFloat);
  const at::Tensor gt_boxes = to_original(at::cat({cxcy - half_wh, cxcy + half_wh}, 1), meta);
  const auto match = options.metric == MetricStyle::yolov5   ? match_predictions
                     : options.metric == MetricStyle::yolov3 ? match_predictions_yolov3
                                                             : match_predictions_yolov7;
  lists.correct.push_back(match(pred_boxes, pred.select(1, 5), gt_boxes, tcls.to(at::kFloat), iou_thresholds));
  const at::Tensor predn = at::cat({pred_boxes, pred.slice(1, 4, 6).to(pred_boxes.dtype())}, 1);
  if (options.confusion && labels.size(0) > 0)  // val.py: only images with labels
    options.confusion->process_batch(predn, at::cat({tcls.to(gt_boxes.dtype()).unsqueeze(1), gt_boxes}, 1));
  lists.conf.push_back(pred.select(1, 4));
  lists.pred_cls.push_back(pred.select(1, 5));
  lists.target_cls.push_back(tcls);
  return predn;
}

// --save-txt's label file (appended to, as val.py) and --save-json's COCO results of one image's predn.
void write_image_outputs(const at::Tensor& predn, const data::SampleMeta& meta, const data::YoloDataset& dataset,
                         const ValidationOptions& options, const std::vector<int64_t>& coco_ids, ValidationResult& r) {
  if (!options.txt_dir.empty()) {
    const std::string path =
        options.txt_dir + "/" + std::filesystem::path(dataset.records()[meta.index].image).stem().string() + ".txt";
    std::ofstream out(path, std::ios::app);
    for (int64_t j = 0; j < predn.size(0); ++j) out << label_line(predn[j], meta.original, options.save_conf) << "\n";
    if (!out) fail(path, ": write failed");
  }
  if (options.save_json) {
    const int64_t id = coco_ids.at(meta.index);
    // One copy to the host per image, then plain reads (an element read of a device tensor waits for it).
    const at::Tensor host = predn.to(at::kCPU, at::kDouble).contiguous();
    const auto b = host.accessor<double, 2>();
    for (int64_t j = 0; j < b.size(0); ++j) {
      const auto c = static_cast<size_t>(b[j][5]);
      const int category = c < options.coco_category_ids.size() ? options.coco_category_ids[c] : static_cast<int>(c);
      r.predictions.push_back(coco_detection(id, category, b[j][0], b[j][1], b[j][2], b[j][3], b[j][4]));
    }
  }
}

}  // namespace

ValidationResult validate(models::YoloModel& model, data::DataLoader& loader, const data::YoloDataset& dataset,
                          const c10::Device& device, int64_t nc, const ValidationOptions& options,
                          const LossItemsFn& loss) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  ValidationResult r;
  r.instances.assign(static_cast<size_t>(nc), 0);
  std::vector<int64_t> coco_ids;  // by dataset record, as `kestrel data coco` numbers the same images
  if (options.save_json) {
    std::vector<std::string> paths;
    for (const auto& record : dataset.records()) paths.push_back(record.image);
    coco_ids = options.coco_annotations ? coco_image_ids(paths, *options.coco_annotations) : coco_image_ids(paths);
    r.image_ids = coco_ids;
  }
  const at::Tensor iou_thresholds = default_iou_thresholds();
  MatchLists lists;
  at::Tensor loss_sum = at::zeros({3}, at::TensorOptions().dtype(at::kFloat).device(device));
  int64_t batches = 0;
  loader.start_epoch(0);
  while (std::optional<data::Batch> batch = loader.next()) {
    const std::vector<at::Tensor> kept = infer_batch(model, *batch, device, options, loss, loss_sum, r.ms_per_image);
    ++batches;
    if (batches <= options.plot_batches) plot_batch(*batch, kept, dataset, options, batches - 1);
    const at::Tensor targets = batch->targets, mask = batch->target_mask;
    const double h = static_cast<double>(batch->images.size(2)), w = static_cast<double>(batch->images.size(3));
    for (size_t i = 0; i < kept.size(); ++i) {
      ++r.images;
      const data::SampleMeta& meta = batch->meta[i];
      const at::Tensor labels = targets[static_cast<int64_t>(i)].index({mask[static_cast<int64_t>(i)]});  // [nl, 5]
      r.labels += labels.size(0);
      for (int64_t j = 0; j < labels.size(0); ++j) {
        const auto c = static_cast<int64_t>(labels[j][0].item<float>());
        if (c < 0 || c >= nc) fail(dataset.records()[meta.index].label, ": class ", c, " is outside 0..", nc - 1);
        ++r.instances[static_cast<size_t>(c)];
      }
      at::Tensor pred = kept[i];
      if (options.single_cls && pred.size(0)) pred.select(1, 5).zero_();
      const at::Tensor predn = score_image(pred, labels, meta, w, h, iou_thresholds, options, lists);
      if (predn.defined()) write_image_outputs(predn, meta, dataset, options, coco_ids, r);
    }
  }
  if (was_training) model.train();
  if (batches > 0) {
    const at::Tensor mean = (loss_sum / static_cast<double>(batches)).to(at::kCPU);
    for (int k = 0; k < 3; ++k) r.loss[k] = mean[k].item<double>();
  }
  if (r.images > 0)
    for (double& ms : r.ms_per_image) ms /= static_cast<double>(r.images);
  if (lists.correct.empty()) {
    r.metrics = ap_per_class(at::zeros({0, iou_thresholds.size(0)}, at::kBool), at::zeros({0}), at::zeros({0}),
                             at::zeros({0}), options.metric);
  } else {
    r.metrics = ap_per_class(at::cat(lists.correct), at::cat(lists.conf), at::cat(lists.pred_cls), at::cat(lists.target_cls),
                             options.metric);
  }
  return r;
}

MetricStyle metric_style_for(const models::YoloModel& model, bool v5_metric, bool v3_metric) {
  if (v3_metric && models::is_yolov7_family(model))
    fail("--v3-metric: ultralytics/yolov3 v9.6.0's val.py scores YOLOv3 and YOLOv5 models; a YOLOv7 model is scored "
         "by YOLOv7's test.py (its default, or --v5-metric)");
  if (v3_metric && v5_metric) fail("--v3-metric and --v5-metric: give one of them");
  if (v3_metric) return MetricStyle::yolov3;
  if (!models::is_yolov7_family(model)) return MetricStyle::yolov5;
  return v5_metric ? MetricStyle::yolov7_v5_metric : MetricStyle::yolov7;
}

namespace {
// Python's '%22s': padded by characters, not bytes (a UTF-8 class name such as 行人 is 2 characters, 6 bytes).
std::string right_aligned(const std::string& text, size_t width) {
  size_t characters = 0;
  for (unsigned char c : text) characters += (c & 0xC0) != 0x80;
  return characters >= width ? text : std::string(width - characters, ' ') + text;
}
}  // namespace

std::string format_validation_table(const ValidationResult& r, const std::vector<std::string>& names, bool per_class,
                                    const std::string& task) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%22s%11s%11s%11s%11s%11s%11s\n", "Class", "Images", "Instances", "P", "R", "mAP50",
                "mAP50-95");
  out += line;
  std::snprintf(line, sizeof line, "%22s%11lld%11lld%11.3g%11.3g%11.3g%11.3g\n", "all", static_cast<long long>(r.images),
                static_cast<long long>(r.labels), r.metrics.mp, r.metrics.mr, r.metrics.map50, r.metrics.map);
  out += line;
  if (r.labels == 0) out += "WARNING: no labels found in " + task + " set, can not compute metrics without labels\n";
  // val.py's rows: asked for, more than one class, and some prediction correct (else it has no ap_class).
  if (!per_class || names.size() <= 1 || !r.metrics.scored) return out;
  const at::Tensor ap = r.metrics.ap.to(at::kDouble);
  for (int64_t i = 0; i < r.metrics.classes.size(0); ++i) {
    const auto c = r.metrics.classes[i].item<int64_t>();
    const std::string name = c < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(c)] : std::to_string(c);
    // Images: every image seen, on every row (val.py and YOLOv7's test.py print `seen` there).
    std::snprintf(line, sizeof line, "%s%11lld%11lld%11.3g%11.3g%11.3g%11.3g\n", right_aligned(name, 22).c_str(), static_cast<long long>(r.images),
                  static_cast<long long>(r.instances[static_cast<size_t>(c)]), r.metrics.precision[i].item<double>(),
                  r.metrics.recall[i].item<double>(), ap[i][0].item<double>(), ap[i].mean().item<double>());
    out += line;
  }
  return out;
}

}  // namespace kestrel::eval
