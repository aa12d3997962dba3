// kestrel val: YOLOv5 val.py on a dataset split with kestrel weights.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "kestrel/core/device.h"
#include "kestrel/core/atomic_file.h"
#include "kestrel/core/error.h"
#include "kestrel/data/dataset_config.h"
#include "kestrel/eval/coco_eval.h"
#include "kestrel/eval/plots.h"
#include "kestrel/eval/val_study.h"
#include "kestrel/eval/yolo_to_coco.h"
#include "kestrel/eval/validator.h"
#include "kestrel/models/model_family.h"
#include "kestrel/models/weights_file.h"
#include "kestrel/train/run_files.h"
#include "kestrel/train/split_loader.h"

namespace kestrel::app {
namespace {

struct ValOptions {
  std::string data = "data/demo/demo.yaml", task = "val", device, project = "runs/val", name = "exp", coco_ann;
  std::vector<std::string> weights;
  int batch_size = 32, img_size = 640, workers = 8;
  double conf_thres = 0.001, iou_thres = 0.6;
  int max_det = 300;
  bool single_cls = false, verbose = false, save_json = false, half = false, exist_ok = false, noplots = false;
  bool augment = false, save_txt = false, save_conf = false, save_hybrid = false, v5_metric = false, v3_metric = false;
  bool iou_thres_given = false;
};

struct Model {
  models::LoadedModel loaded;
  bool yolov7 = false;
  eval::MetricStyle metric = eval::MetricStyle::yolov5;  // --v5-metric / --v3-metric against the model's family
  std::vector<std::string> names;  // the weights' names, also with --single-cls (val.py: model.names)
  int nc = 0;
};

Model load_for(const ValOptions& o, const std::string& weights, const data::DatasetConfig& cfg, const c10::Device& device) {
  Model m;
  m.loaded = models::load_model_weights(weights);
  // Conv + BN fused, as upstream's val.py and test.py run their models (attempt_load fuses): fewer passes
  // over memory, and upstream's rounding more nearly (docs/parity.md "The model alone").
  m.loaded.model->eval();
  m.loaded.model->fuse();
  m.loaded.model->to(device);
  m.nc = o.single_cls ? 1 : static_cast<int>(m.loaded.info.names.size());
  if (!o.single_cls && cfg.nc != m.nc) fail(weights, " has ", m.nc, " classes but ", o.data, " has ", cfg.nc);
  m.yolov7 = models::is_yolov7_family(*m.loaded.model);
  m.metric = eval::metric_style_for(*m.loaded.model, o.v5_metric, o.v3_metric);  // refused before any folder is made
  // val.py keeps the model's names with --single-cls (train.py's {0: 'item'} is training's): class 0's name
  // in the charts and batch images, indices on the confusion matrix (its names no longer fit its one class).
  m.names = m.loaded.info.names;
  return m;
}

// --task speed and study with several files: each is read and checked (classes, metric) on the CPU before a
// run folder is made or a pass runs, then loaded again for its passes, one model on the device at a time.
void check_every_file(const ValOptions& o, const data::DatasetConfig& cfg) {
  if (o.weights.size() > 1)
    for (const auto& weights : o.weights) (void)load_for(o, weights, cfg, c10::Device(c10::kCPU));
}

// Where one pass writes: txt labels, plots (with the confusion matrix to fill), nothing when empty.
struct PassOutputs {
  std::string txt_dir, plot_dir;
  bool save_json = false;              // COCO predictions (ValidationResult::predictions)
  std::vector<int> coco_category_ids;  // class -> category id in the JSON predictions (empty: the class index)
  const eval::CocoAnnotations* coco_annotations = nullptr;  // what the JSON is scored against (image ids by file name)
  eval::ConfusionMatrix* confusion = nullptr;
};

// What a pass is for: a plain validation, or one of --task speed / study's.
enum class PassKind { plain, speed, study };

// "N labels saved to DIR", as val.py after a pass with --save-txt.
void report_labels(const std::string& txt_dir) {
  int64_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(txt_dir)) files += entry.path().extension() == ".txt";
  std::cout << files << " labels saved to " << txt_dir << "\n";
}

// One validation pass of `m` over the split at `img_size`; prints val.py's table and speed line.
eval::ValidationResult validate_once(const ValOptions& o, Model& m, const data::DatasetConfig& cfg, const c10::Device& device,
                                     int img_size, PassKind kind, const PassOutputs& out) {
  // For speed, val.py v7.0 letterboxes square batches without padding; yolov3 v9.6.0's keeps its rectangular
  // batches, unpadded; YOLOv7's test.py keeps them, padded.
  const bool unpadded = kind == PassKind::speed && !m.yolov7;
  const bool square = unpadded && m.metric != eval::MetricStyle::yolov3;
  const int stride = static_cast<int>(std::max<int64_t>(m.loaded.model->max_stride(), 32));
  train::ValLoaderOptions l;
  l.img_size = (img_size + stride - 1) / stride * stride;  // val.py's check_img_size, and its warning
  if (l.img_size != img_size)
    std::cout << "WARNING: --img-size " << img_size << " must be multiple of max stride " << stride << ", updating to "
              << l.img_size << "\n";
  l.batch_size = o.batch_size;
  l.stride = stride;
  l.workers = o.workers;
  l.single_cls = o.single_cls;
  l.nc_for_check = cfg.nc;
  l.pin_memory = device.is_cuda();
  l.rect = !square;
  l.pad = unpadded ? 0.0 : 0.5;
  const train::SplitLoader split = train::make_val_loader(cfg, o.task, l);

  eval::ValidationOptions v;
  v.metric = m.metric;
  v.nms.conf_thres = o.conf_thres;
  // YOLOv7's test.py defaults to IoU 0.65 (its README's numbers), val.py (v7.0 and yolov3 v9.6.0) to 0.6.
  v.nms.iou_thres = eval::is_yolov7_style(v.metric) && !o.iou_thres_given ? 0.65 : o.iou_thres;
  v.nms.max_det = o.max_det;
  v.single_cls = o.single_cls;
  // fp16 on a GPU where upstream uses it without being asked: val.py for --task speed and study, YOLOv7's
  // test.py always.
  v.half = o.half || (device.is_cuda() && (kind != PassKind::plain || m.yolov7));
  // test.py's speed and study passes call test() without augment (val.py's pass it on).
  v.augment = o.augment && !(m.yolov7 && kind != PassKind::plain);
  // test.py's speed and study passes take no --save-hybrid (val.py's do).
  v.save_hybrid = o.save_hybrid && !(m.yolov7 && kind != PassKind::plain);
  v.save_json = out.save_json;
  v.coco_category_ids = out.coco_category_ids;
  v.coco_annotations = out.coco_annotations;
  if (!out.txt_dir.empty()) {
    v.txt_dir = out.txt_dir;
    v.save_conf = o.save_conf;
    // val.py names a label file by the image's stem and appends: images of one stem share a file. Said once.
    std::map<std::string, int> stems;
    for (const auto& record : split.dataset->records()) ++stems[std::filesystem::path(record.image).stem().string()];
    int64_t shared = 0;
    std::string example;
    for (const auto& [stem, count] : stems)
      if (count > 1) shared += count, example = example.empty() ? stem : example;
    if (shared > 0)
      std::cout << "WARNING: " << shared << " images share their file stem with another image of the split (e.g. " << example
                << "): as val.py, their predictions are appended to one labels/" << example << ".txt\n";
  }
  if (out.confusion) {
    v.confusion = out.confusion;
    v.plot_batches = 3;  // val.py: val_batch0..2_labels.jpg / _pred.jpg
    v.plot_dir = out.plot_dir;
    v.names = m.names;
  }
  const eval::ValidationResult r = eval::validate(*m.loaded.model, *split.loader, *split.dataset, device, m.nc, v);
  std::cout << eval::format_validation_table(r, m.names, (o.verbose || m.nc < 50) && m.nc > 1, o.task);
  std::printf("Speed: %.1fms pre-process, %.1fms inference, %.1fms NMS per image at shape (%d, 3, %d, %d)\n",
              r.ms_per_image[0], r.ms_per_image[1], r.ms_per_image[2], o.batch_size, l.img_size, l.img_size);
  return r;
}

// val.py's --task speed: the val split at detect's thresholds (conf 0.25, IoU 0.45), for the timings; no
// JSON and no plots; --save-txt kept for YOLOv5 models (YOLOv7's test.py passes none). Every weights file.
void run_speed(ValOptions o, const data::DatasetConfig& cfg, const c10::Device& device) {
  o.task = "val";
  o.conf_thres = 0.25;
  o.iou_thres = 0.45;
  o.iou_thres_given = true;
  o.save_json = false;
  o.coco_ann.clear();
  check_every_file(o, cfg);
  for (const auto& weights : o.weights) {
    Model m = load_for(o, weights, cfg, device);
    PassOutputs out;
    if (o.save_txt && !m.yolov7) {
      out.txt_dir = (std::filesystem::path(train::make_run_dir(o.project, o.name, o.exist_ok, false)) / "labels").string();
      std::filesystem::create_directories(out.txt_dir);
    }
    validate_once(o, m, cfg, device, o.img_size, PassKind::speed, out);
    if (!out.txt_dir.empty()) report_labels(out.txt_dir);
  }
}

// COCO predictions of a run: whether JSON is written, and the annotations that score it. val.py's rule: on
// COCO the JSON is written without being asked, with COCO's category ids, and scored with COCOeval against
// <path>/annotations/instances_val2017.json (YOLOv7's YAML has no path: next to its val2017.txt) when it is
// there, for the val split, on the split's images only.
struct CocoOutput {
  bool is_coco = false, save_json = false;
  std::string ann_path;                         // --coco-ann or the file found on COCO ("" for none)
  std::string expected_ann;                     // where COCO's annotations were looked for first
  std::optional<eval::CocoAnnotations> annotations;
};

CocoOutput coco_output_for(const ValOptions& o, const data::DatasetConfig& cfg) {
  CocoOutput c;
  c.is_coco = eval::is_coco_dataset(cfg);
  c.ann_path = o.coco_ann;
  std::vector<std::string> guesses = {(std::filesystem::path(cfg.root) / "annotations" / "instances_val2017.json").string()};
  if (!cfg.val.empty())
    guesses.push_back((std::filesystem::path(cfg.val[0]).parent_path() / "annotations" / "instances_val2017.json").string());
  c.expected_ann = guesses.front();
  for (const std::string& guess : guesses)
    if (c.ann_path.empty() && c.is_coco && o.task == "val" && std::filesystem::exists(guess)) c.ann_path = guess;
  c.save_json = o.save_json || !c.ann_path.empty() || c.is_coco;
  if (!c.ann_path.empty()) c.annotations = eval::read_coco_annotations(c.ann_path);  // before any pass: a bad file fails fast
  return c;
}

// Class -> category id in the JSON predictions (empty: the class index).
std::vector<int> category_ids_for(const CocoOutput& c, const Model& m) {
  if (c.annotations) {  // the classes predicted: with --single-cls one, class 0 (named as the weights' class 0)
    const std::vector<std::string> predicted(m.names.begin(), m.names.begin() + std::min<size_t>(m.names.size(), m.nc));
    return eval::coco_category_ids_for(predicted, *c.annotations, c.is_coco);
  }
  return eval::coco_category_ids(c.is_coco, static_cast<size_t>(m.nc));
}

// Writes a pass's predictions to `path` and scores the file as saved when there are annotations; as val.py,
// annotations that do not fit (other images) are a warning. Returns COCOeval's summary when it ran.
std::optional<eval::CocoSummary> save_coco_predictions(const CocoOutput& c, const ValOptions& o,
                                                       const eval::ValidationResult& r, const std::string& path) {
  if (r.predictions.empty()) return std::nullopt;  // val.py: `if save_json and len(jdict)`: no file, no scoring
  write_file_atomic(path, {eval::coco_results_json(r.predictions)}, Durability::kFlushed);
  std::cout << "\nEvaluating pycocotools mAP... saving " << path << "...\n";  // val.py's line, also without annotations
  std::cout.flush();
  if (!c.annotations) {
    if (c.is_coco && o.task == "val")
      std::cout << "WARNING: no " << c.expected_ann << ": the predictions are not scored with COCOeval (--coco-ann FILE)\n";
    return std::nullopt;
  }
  std::cout << "Evaluating COCO mAP with " << c.ann_path << "\n";
  try {
    const auto detections = eval::read_coco_results(path, *c.annotations);
    const eval::CocoSummary summary = eval::evaluate_coco(*c.annotations, detections, r.image_ids);
    std::cout << eval::format_coco_summary(summary);
    return summary;
  } catch (const Error& e) {
    std::cout << "WARNING: COCOeval unable to run: " << e.what() << "\n";
    return std::nullopt;
  }
}

// val.py / test.py --task study: every weights file at sizes 256 ... 1536, a study_*.txt each and study.png,
// in one run folder (upstream writes them to the working directory). No plots or labels per pass. With JSON
// (--save-json, or on COCO) each pass saves <weights>_<size>_predictions.json, and where COCOeval scores it
// the row's mAP50 and mAP50-95 are COCOeval's, as upstream's rows (val.py replaces its own with them).
void run_study(ValOptions o, const data::DatasetConfig& cfg, const c10::Device& device) {
  o.save_txt = false;
  const CocoOutput coco = coco_output_for(o, cfg);
  // Upstream names study files by the weights' stem (the second best.pt overwrites the first's rows).
  std::map<std::string, std::string> file_of;
  for (const auto& weights : o.weights)
    if (const auto [at, fresh] = file_of.emplace(eval::study_file_name(o.data, weights), weights); !fresh)
      fail("--weights: ", at->second, " and ", weights, " would share the study file ", at->first,
           " (one's rows would replace the other's): give the files distinct names");
  check_every_file(o, cfg);
  const std::filesystem::path dir = train::make_run_dir(o.project, o.name, o.exist_ok, false);
  std::vector<std::string> files;
  for (const auto& weights : o.weights) {
    Model m = load_for(o, weights, cfg, device);
    PassOutputs out;
    out.save_json = coco.save_json;
    if (coco.save_json) out.coco_category_ids = category_ids_for(coco, m);
    if (coco.annotations) out.coco_annotations = &*coco.annotations;
    const std::string file = (dir / eval::study_file_name(o.data, weights)).string();
    std::string rows;
    for (int img : eval::study_image_sizes()) {
      std::cout << "\nRunning " << std::filesystem::path(file).filename().string() << " --imgsz " << img << "...\n";  // val.py's line
      eval::ValidationResult r = validate_once(o, m, cfg, device, img, PassKind::study, out);
      if (coco.save_json) {
        const std::string json = (dir / (std::filesystem::path(weights).stem().string() + "_" + std::to_string(img) +
                                         "_predictions.json")).string();
        if (const auto summary = save_coco_predictions(coco, o, r, json)) {
          r.metrics.map = summary->stats[0];
          r.metrics.map50 = summary->stats[1];
        }
      }
      rows += eval::study_row(r, m.yolov7, img, o.batch_size) + "\n";
    }
    write_file_atomic(file, {rows}, Durability::kFlushed);
    files.push_back(file);
  }
  const std::string png = (dir / "study.png").string();
  eval::plot_study(files, png);
  std::cout << "Study saved to " << dir.string() << " (" << files.size() << " study_*.txt, study.png)\n";
}

void run_val(const ValOptions& options) {
  ValOptions o = options;
  if (o.weights.empty()) fail("--weights is required (a kestrel .safetensors file)");
  if (o.save_hybrid) o.save_txt = true;  // as val.py
  if (o.task != "speed" && o.task != "study") {  // val.py's warnings for a normal run
    if (o.conf_thres > 0.001)
      std::cerr << "WARNING: confidence threshold " << o.conf_thres << " > 0.001 produces invalid results\n";
    if (o.save_hybrid) std::cerr << "WARNING: --save-hybrid will return high mAP from hybrid labels, not from predictions alone\n";
  }
  const c10::Device device = parse_device(o.device);
  make_current(device);
  const data::DatasetConfig cfg = data::load_dataset_config(o.data);
  const std::string split = o.task == "train" || o.task == "test" ? o.task : "val";  // speed and study: val
  cfg.existing_split(split);  // before any weights are loaded
  if (o.task == "speed") return run_speed(o, cfg, device);
  if (o.task == "study") {
    o.task = "val";  // upstream's run() validates the val split for any task but train/val/test
    return run_study(o, cfg, device);
  }
  if (o.weights.size() > 1)
    fail("--weights: ", o.weights.size(), " files given; kestrel validates one model (val.py would ensemble them), "
         "several only with --task speed or study");
  const std::string& weights = o.weights.front();
  Model m = load_for(o, weights, cfg, device);
  const CocoOutput coco = coco_output_for(o, cfg);
  const bool save_json = coco.save_json;
  // The run folder exists before the pass (val_batch images are written during it); none when nothing is written.
  const bool writes = !o.noplots || save_json || o.save_txt;
  const std::string dir = writes ? train::make_run_dir(o.project, o.name, o.exist_ok, /*with_weights=*/false) : "";
  eval::ConfusionMatrix confusion(m.nc);  // val.py's defaults: conf 0.25, IoU 0.45
  PassOutputs out;
  if (o.save_txt) {
    out.txt_dir = (std::filesystem::path(dir) / "labels").string();
    std::filesystem::create_directories(out.txt_dir);
  }
  if (!o.noplots) out.confusion = &confusion, out.plot_dir = dir;
  out.save_json = save_json;
  if (save_json) out.coco_category_ids = category_ids_for(coco, m);
  if (save_json && coco.annotations) out.coco_annotations = &*coco.annotations;
  const eval::ValidationResult r = validate_once(o, m, cfg, device, o.img_size, PassKind::plain, out);
  if (!writes) return;
  if (!o.noplots) {
    const auto file = [&](const char* name) { return (std::filesystem::path(dir) / name).string(); };
    eval::plot_confusion_matrix(confusion, m.names, file("confusion_matrix.png"));
    if (r.metrics.scored) {  // as val.py: the curves only where some prediction was correct
      eval::plot_pr_curve(r.metrics, m.names, file("PR_curve.png"));
      eval::plot_confidence_curve(r.metrics, eval::CurveKind::f1, m.names, file("F1_curve.png"));
      eval::plot_confidence_curve(r.metrics, eval::CurveKind::precision, m.names, file("P_curve.png"));
      eval::plot_confidence_curve(r.metrics, eval::CurveKind::recall, m.names, file("R_curve.png"));
    }
  }
  if (save_json)
    save_coco_predictions(coco, o, r,
                          (std::filesystem::path(dir) / (std::filesystem::path(weights).stem().string() + "_predictions.json")).string());
  std::cout << "Results saved to " << dir << "\n";  // val.py's last lines
  if (o.save_txt) report_labels(out.txt_dir);
}

}  // namespace

void add_val_command(CLI::App& app) {
  auto o = std::make_shared<ValOptions>();
  auto* cmd = app.add_subcommand("val", "validate weights on a dataset split (P, R, mAP50, mAP50-95)");
  cmd->add_option("--data", o->data, "dataset YAML")->capture_default_str();
  cmd->add_option("--weights", o->weights, "kestrel weights (.safetensors); several with --task speed or study")
      ->required()->expected(1, -1);
  cmd->add_option("--batch-size,--batch", o->batch_size, "batch size")->capture_default_str()->check(CLI::Range(1, 65536));
  cmd->add_option("--img,--img-size,--imgsz", o->img_size, "image size")->capture_default_str()->check(CLI::Range(32, 8192));
  cmd->add_option("--conf-thres,--conf", o->conf_thres, "confidence threshold")->capture_default_str()->check(unit_interval());
  auto* iou = cmd->add_option("--iou-thres,--iou", o->iou_thres, "NMS IoU threshold (YOLOv7 models: 0.65 unless given)")
                   ->capture_default_str()->check(unit_interval());
  cmd->add_option("--max-det", o->max_det, "detections per image")->capture_default_str()->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--task", o->task,
                  "split: train, val or test; speed: the val split at conf 0.25, IoU 0.45, for the timings; study: the "
                  "val split at sizes 256 ... 1536 (study_*.txt, study.png)")
      ->capture_default_str()->check(CLI::IsMember({"train", "val", "test", "speed", "study"}));
  cmd->add_option("--device", o->device, "cuda device (0, cuda:0) or cpu");
  cmd->add_option("--workers", o->workers, "loader threads")->capture_default_str()->check(CLI::Range(0, 1024));
  cmd->add_flag("--single-cls", o->single_cls, "treat as single-class dataset");
  cmd->add_flag("--verbose", o->verbose, "per-class table for any class count (none for one class or when nothing was correct, as val.py)");
  cmd->add_flag("--save-txt", o->save_txt, "save predictions to <run>/labels/<image stem>.txt (cls cx cy w h, normalised)");
  cmd->add_flag("--save-conf", o->save_conf, "save confidences in --save-txt labels");
  cmd->add_flag("--save-hybrid", o->save_hybrid,
                "save label+prediction hybrid results to <run>/labels (implies --save-txt; the labels join the predictions "
                "before NMS at confidence 1, so the mAP is not the model's)");
  cmd->add_flag("--save-json", o->save_json, "write COCO-format predictions");
  cmd->add_option("--coco-ann", o->coco_ann, "COCO annotation JSON to score the predictions with (COCOeval)");
  cmd->add_flag("--half", o->half, "fp16 inference (CUDA; on there anyway for YOLOv7 models and --task speed/study, as upstream)");
  // YOLOv7's --no-trace (do not TorchScript-trace the model): kestrel never traces.
  cmd->add_flag("--dnn", "not supported: kestrel runs its own .safetensors weights, not ONNX through OpenCV DNN")
      ->each([](const std::string&) {
        throw CLI::ValidationError("kestrel runs its .safetensors weights with LibTorch; an exported .onnx "
                                   "runs in onnxruntime or OpenCV DNN outside kestrel (docs/deploy.md)");
      });
  cmd->add_flag("--no-trace", "YOLOv7's flag, accepted: kestrel runs the model as built, without tracing");
  cmd->add_flag("--augment", o->augment, "augmented inference (scales 1, 0.83, 0.67; the middle one flipped)");
  auto* v5_metric = cmd->add_flag("--v5-metric", o->v5_metric, "YOLOv7 models: AP with recall sentinel 1.0, as YOLOv7's test.py --v5-metric (YOLOv5 models always use it)");
  cmd->add_flag("--v3-metric", o->v3_metric, "validate as ultralytics/yolov3 v9.6.0's val.py: labels matched once at IoU 0.5 and that IoU reused at every threshold, P and R at the unsmoothed F1 peak, NMS class offset 4096 (docs/parity.md)")->excludes(v5_metric);
  cmd->add_option("--project", o->project, "runs folder")->capture_default_str();
  cmd->add_option("--name", o->name, "run name")->capture_default_str();
  cmd->add_flag("--exist-ok", o->exist_ok, "reuse project/name");
  cmd->add_flag("--noplots", o->noplots, "do not write confusion_matrix.png, the PR/F1/P/R curves and the val_batch images");
  cmd->callback([cmd, o, iou] {
    refuse_repeated({"--weights"}, "--weights a.safetensors b.safetensors (--task speed or study)");
    o->iou_thres_given = iou->count() > 0;
    if (cmd->count("--data") == 0) o->data = default_from_source_tree(o->data);  // the demo, from any folder
    run_val(*o);
  });
}

}  // namespace kestrel::app
