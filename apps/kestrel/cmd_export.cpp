// kestrel export --weights W [--format onnx] [--img 640] [--batch-size 1] [--opset 12] [--dynamic | --dynamic-batch]
// [--half] [--end2end [--topk-all 100] [--iou-thres 0.45] [--conf-thres 0.25] [--max-wh N]] [--out PATH]: writes
// the fused model as an ONNX graph with the decode included (output [batch, N, nc + 5]), or also NMS: with
// --max-wh for onnxruntime ([K, 7]), without it for TensorRT (EfficientNMS_TRT), as YOLOv7's export.py.
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "kestrel/core/ascii_lower.h"
#include "kestrel/core/error.h"
#include "kestrel/core/python_repr.h"
#include "kestrel/export/onnx_export.h"
#include "kestrel/models/model_family.h"
#include "kestrel/models/weights_file.h"

namespace kestrel::app {
namespace {

struct ExportOptions {
  std::string weights, out;
  std::vector<std::string> formats{"onnx"};  // --include: export.py takes several
  exporting::OnnxExportOptions onnx;
  std::vector<int64_t> img_sizes;  // --img: one size, or export.py's two (equal: kestrel's static graphs are square)
  bool grid = false;               // YOLOv7's --grid: kestrel's graph always has the decode
  double max_wh = 0;            // --max-wh, when given (then NMS for onnxruntime)
  CLI::Option* max_wh_option = nullptr;
  std::string device;              // export.py's --device: accepted, unused
  bool train_mode = false;         // ultralytics/yolov3 v9.6.0's --train: refused
};

// export.py's formats besides ONNX, and how to get each from kestrel's ONNX file instead.
const std::map<std::string, std::string>& other_formats() {
  static const std::map<std::string, std::string> formats = {
      {"torchscript", "kestrel's models are C++ modules, not TorchScript; deploy the ONNX file, or load "
                      "tools/export_state_dict.py's state dict into upstream's PyTorch model"},
      {"engine", "TensorRT builds it from the ONNX file: trtexec --onnx=best.onnx --saveEngine=best.engine --fp16 "
                 "(docs/deploy.md)"},
      {"openvino", "OpenVINO converts the ONNX file: ovc best.onnx"},
      {"coreml", "convert the ONNX file with a CoreML converter"},
      {"saved_model", "convert the ONNX file with an ONNX-to-TensorFlow converter (e.g. onnx2tf)"},
      {"pb", "convert the ONNX file with an ONNX-to-TensorFlow converter (e.g. onnx2tf)"},
      {"tflite", "convert the ONNX file with an ONNX-to-TensorFlow converter (e.g. onnx2tf)"},
      {"edgetpu", "convert the ONNX file to TFLite (e.g. onnx2tf), then compile it with edgetpu_compiler"},
      {"tfjs", "convert the ONNX file to TensorFlow (e.g. onnx2tf), then with tensorflowjs_converter"},
      {"paddle", "convert the ONNX file with x2paddle"}};
  return formats;
}

// export.py's file_size: MiB, shown with one decimal.
std::string mib(const std::string& path) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", ec ? 0.0 : static_cast<double>(bytes) / (1 << 20));
  return text;
}

// {0: 'person', 1: 'bicycle'}: Python's str() of YOLOv5's names dict, the metadata export.py writes.
std::string python_dict_text(const std::vector<std::string>& names) {
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + std::to_string(i) + ": " + python_str_repr(names[i]);
  return out + "}";
}

void run_export(const ExportOptions& o) {
  const auto started = std::chrono::steady_clock::now();
  if (o.weights.empty()) fail("--weights is required (a kestrel .safetensors file)");
  if (o.train_mode)
    fail("--train: ultralytics/yolov3 v9.6.0's training-mode export (the head's raw outputs, no decode) is not written; "
         "kestrel's graph decodes the boxes, as v9.6.0's default export");
  const std::string out = o.out.empty() ? std::filesystem::path(o.weights).replace_extension(".onnx").string() : o.out;
  // export.py lowercases --include, refuses unknown formats, and writes each format asked for; kestrel
  // writes the ONNX file and says how to make each other format from it.
  bool onnx_asked = false;
  std::vector<std::string> others;
  for (const std::string& given : o.formats) {
    const std::string format = ascii_lower(given);
    if (format == "onnx") {
      onnx_asked = true;
    } else if (const auto other = other_formats().find(format); other != other_formats().end()) {
      // The ways name the file this export writes (best.onnx stands for it in the table).
      std::string way = other->second;
      for (const auto& [from, to] : {std::pair<std::string, std::string>{"best.onnx", out},
                                     {"best.engine", std::filesystem::path(out).replace_extension(".engine").string()}})
        for (size_t at = way.find(from); at != std::string::npos; at = way.find(from, at + to.size())) way.replace(at, from.size(), to);
      others.push_back("--include " + format + ": not written (kestrel writes ONNX); " + way);
    } else {
      fail("--include ", format, ": not one of export.py's formats (torchscript, onnx, openvino, engine, coreml, "
           "saved_model, pb, tflite, edgetpu, tfjs, paddle)");
    }
  }
  if (!onnx_asked) fail(others.front(), " (--include onnx writes the ONNX file)");
  for (const std::string& line : others) std::cout << "WARNING: " << line << "\n";
  models::LoadedModel loaded = models::load_model_weights(o.weights);
  loaded.model->eval();
  exporting::OnnxExportOptions onnx = o.onnx;
  if (o.max_wh_option->count() > 0) onnx.nms.max_wh = o.max_wh;
  const bool dynamic_asked = onnx.dynamic;
  if (onnx.dynamic_batch) onnx.dynamic = false;  // YOLOv7's export.py: --dynamic-batch wins over --dynamic
  // check_img_size: a size that is not a multiple of the largest stride is rounded up, with upstream's warning
  // (each of two sizes, before they are compared).
  std::vector<int64_t> sizes = o.img_sizes.empty() ? std::vector<int64_t>{onnx.img} : o.img_sizes;
  const int64_t s = loaded.model->max_stride();
  for (int64_t& size : sizes)
    if (size % s != 0) {
      const int64_t rounded = (size + s - 1) / s * s;
      std::cout << "WARNING: --img-size " << size << " must be multiple of max stride " << s << ", updating to " << rounded << "\n";
      size = rounded;
    }
  if (sizes.size() == 1) sizes.push_back(sizes[0]);
  // A dynamic graph takes any height and width (traced at the first size); a static one is square here.
  if (sizes[0] != sizes[1] && !onnx.dynamic)
    fail("--img-size ", sizes[0], " ", sizes[1], ": kestrel's static graphs are square (one size, or two equal ones); ",
         onnx.dynamic_batch ? std::string(dynamic_asked ? "--dynamic-batch (which wins over --dynamic, as YOLOv7's)"
                                                        : "--dynamic-batch") +
                                  " fixes the height and width: give --dynamic without it"
                            : std::string("give --dynamic"),
         " for a graph that takes any height and width at run time");
  onnx.img = sizes[0];
  onnx.nms.objectness_only_single_class = models::is_yolov7_family(*loaded.model);  // YOLOv7's NMS rule
  std::error_code same_error;
  if (std::filesystem::equivalent(out, o.weights, same_error))
    fail(out, ": is the weights file being exported; the ONNX file would replace it (give another name with -o)");
  std::map<std::string, std::string> metadata;
  metadata["names"] = python_dict_text(loaded.info.names);  // export.py's str(model.names)
  metadata["imgsz"] = nlohmann::json({sizes[0], sizes[1]}).dump();
  metadata["batch"] = std::to_string(onnx.batch);
  if (onnx.end2end || onnx.include_nms) {
    nlohmann::json nms = {{"backend", onnx.nms.tensorrt() ? "tensorrt" : "onnxruntime"}, {"topk", onnx.nms.topk},
                          {"iou_thres", onnx.nms.iou_thres}, {"conf_thres", onnx.nms.conf_thres}};
    if (onnx.nms.max_wh) nms["max_wh"] = *onnx.nms.max_wh;
    if (onnx.include_nms) nms["box_coding"] = "corners";
    metadata["nms"] = nms.dump();
  }
  // export.py v7.0's console: the model and its output shape, the format's start and success, the closing block.
  const auto& e = onnx;
  const int64_t predictions = exporting::num_predictions(loaded.model->head(), e.img);
  std::cout << "\nPyTorch: starting from " << o.weights << " with output shape (" << e.batch << ", " << predictions << ", "
            << loaded.model->head().num_outputs() << ") (" << mib(o.weights) << ")\n\n"
            << "ONNX: starting export with kestrel's ONNX writer (opset " << e.opset << ")...\n";
  std::cout.flush();
  const auto export_started = std::chrono::steady_clock::now();
  exporting::export_onnx(*loaded.model, out, onnx, metadata);
  const auto seconds = [](std::chrono::steady_clock::time_point since) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1fs", std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count());
    return std::string(text);
  };
  std::cout << "ONNX: export success \u2705 " << seconds(export_started) << ", saved as " << out << " (" << mib(out) << ")\n";
  const std::string b = e.dynamic || e.dynamic_batch ? "batch" : std::to_string(e.batch);
  const std::string hw = e.dynamic ? "height, width" : std::to_string(e.img) + ", " + std::to_string(e.img);
  std::cout << "ONNX: " << (e.half ? "float16" : "float32") << ", input images [" << b << ", " << loaded.model->in_channels()
            << ", " << hw << "], ";
  if (e.include_nms || (e.end2end && e.nms.tensorrt())) {
    std::cout << "TensorRT EfficientNMS_TRT outputs num_dets [" << b << ", 1], det_boxes [" << b << ", " << e.nms.topk
              << ", 4], det_scores [" << b << ", " << e.nms.topk << "], det_classes [" << b << ", " << e.nms.topk
              << "] (TensorRT runs this file, onnxruntime does not: --max-wh N exports NMS for onnxruntime)\n";
  } else if (e.end2end) {
    std::cout << "output " << exporting::kEndToEndOutput << " [detections, 7] (image, x1, y1, x2, y2, class, score)\n";
  } else {
    std::cout << "output " << exporting::output_name(*loaded.model) << " [" << b << ", "
              << (e.dynamic ? "anchors" : std::to_string(predictions)) << ", " << loaded.model->head().num_outputs() << "]\n";
  }
  std::cout << "\nExport complete (" << seconds(started) << ")\nResults saved to "
            << std::filesystem::absolute(out).parent_path().lexically_normal().string()
            << "\nVisualize:       https://netron.app\n";
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto opts = std::make_shared<ExportOptions>();
  auto* cmd = app.add_subcommand("export", "export trained weights for deployment (ONNX, decode included)");
  add_one_weights_option(cmd, opts->weights, "kestrel weights file (.safetensors)",
                         "export.py exports each in turn: run kestrel export once per file");
  cmd->add_option("--include,--format", opts->formats,
                  "export formats: onnx (export.py's others are not written: a warning says how to make each from the "
                  "ONNX file; without onnx, an error)")
      ->capture_default_str();
  // export.py's options for formats kestrel does not write: as export.py, which ignores them for ONNX, they
  // change nothing; a warning says why rather than CLI11's "not expected". --inplace and --data change
  // nothing in kestrel's graph either (the class names come from the weights).
  const std::vector<std::pair<std::string, std::string>> other_options = {
      {"--fp16", "YOLOv7's CoreML float16 option; kestrel writes ONNX (--half: float16 weights, input and output)"},
      {"--int8", "export.py's INT8 quantization (CoreML, TFLite, OpenVINO); kestrel writes a float ONNX graph: quantize "
                 "it with the deployment compiler (trtexec --int8, OpenVINO NNCF)"},
      {"--keras", "a TensorFlow export option; kestrel writes ONNX"},
      {"--nms", "a TensorFlow export option; kestrel writes ONNX (--end2end puts NMS into the ONNX graph)"},
      {"--agnostic-nms", "a TensorFlow export option; kestrel writes ONNX (--end2end --max-wh 0: class-agnostic NMS)"},
      {"--topk-per-class", "a TF.js export option; kestrel writes ONNX (--end2end --topk-all N)"},
      {"--per-tensor", "a TFLite quantization option; kestrel writes ONNX"},
      {"--optimize", "a TorchScript (mobile) option; kestrel writes ONNX"},
      {"--mlmodel", "a CoreML option; kestrel writes ONNX"},
      {"--workspace", "a TensorRT engine option; kestrel writes the ONNX file and trtexec builds the engine "
                      "(--memPoolSize=workspace:4096M)"},
      {"--verbose", "a TensorRT engine option; trtexec builds the engine from kestrel's ONNX file (trtexec --verbose)"},
      {"--cache", "a TensorRT timing-cache option; trtexec builds the engine from kestrel's ONNX file (--timingCacheFile)"}};
  auto ignored_options = std::make_shared<std::vector<std::tuple<std::string, CLI::Option*, std::string>>>();
  for (const auto& [name, why] : other_options) ignored_options->emplace_back(name, cmd->add_option(name)->expected(0, 1)->group(""), why);
  cmd->add_flag("--inplace", "accepted, as export.py's (Detect's in-place decode): no change to kestrel's graph");
  cmd->add_option("--data", "accepted, as export.py's: the class names come from the weights");
  cmd->add_option("--img,--img-size,--imgsz", opts->img_sizes,
                  "square input size (multiple of the largest stride; export.py's two sizes if equal); with --dynamic "
                  "the nominal size (metadata); default 640")
      ->expected(1, 2)->check(CLI::Range(1, 8192));
  cmd->add_flag("--grid", opts->grid, "YOLOv7's flag, accepted: kestrel's graph always includes the decode (grid)");
  // export.py's --simplify runs onnx-simplifier; kestrel writes its graph in that form (constant shapes
  // folded, equal constants shared), and the tests check that onnx-simplifier leaves it unchanged for
  // yolov5n, yolov7-tiny and yolor-p6 (Ghost and C3TR models keep a few nodes it would merge or fold).
  cmd->add_flag("--simplify", "accepted: kestrel's graphs are in onnx-simplifier's form (tested for the YOLOv5/YOLOv7 configs; "
                "Ghost and C3TR models keep a few nodes it would merge)");
  cmd->add_option("--batch-size,--batch", opts->onnx.batch, "batch size of the graph (ignored with --dynamic)")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--opset", opts->onnx.opset, "ONNX opset")->capture_default_str()->check(CLI::Range(11, 21));
  cmd->add_flag("--dynamic", opts->onnx.dynamic,
                "dynamic axes: batch, height and width chosen at run time (multiples of the largest stride)");
  cmd->add_flag("--train", opts->train_mode, "")->group("");  // refused with the reason (run_export)
  cmd->add_flag("--dynamic-batch", opts->onnx.dynamic_batch, "dynamic batch axis only (YOLOv7's), image size fixed");
  cmd->add_flag("--half", opts->onnx.half, "float16 weights, input and output");
  // YOLOv7's export.py names for NMS in the graph; --max-wh picks the variant as there.
  cmd->add_flag("--end2end", opts->onnx.end2end,
                "NMS in the graph: TensorRT's EfficientNMS_TRT (num_dets, det_boxes, det_scores, det_classes), or with "
                "--max-wh ONNX NonMaxSuppression for onnxruntime: output [detections, 7] = image, x1, y1, x2, y2, class, score");
  // YOLOv7's RegisterNMS takes none of the flags below (it keeps 100, 0.45, 0.25: their defaults); kestrel applies them.
  cmd->add_flag("--include-nms", opts->onnx.include_nms,
                "YOLOv7's TensorRT NMS (its utils/add_nms.py): EfficientNMS_TRT on corner boxes and class x objectness "
                "scores, outputs as --end2end's for TensorRT");
  cmd->add_option("--topk-all", opts->onnx.nms.topk, "--end2end / --include-nms: detections kept per image")->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--iou-thres,--iou", opts->onnx.nms.iou_thres, "--end2end / --include-nms: NMS IoU threshold")->capture_default_str()
      ->check(unit_interval());
  cmd->add_option("--conf-thres,--conf", opts->onnx.nms.conf_thres, "--end2end / --include-nms: confidence threshold")->capture_default_str()
      ->check(unit_interval());
  opts->max_wh_option = cmd->add_option("--max-wh", opts->max_wh,
                                         "--end2end: NMS for onnxruntime with this per-class box offset in pixels (0: "
                                         "class-agnostic); not given: NMS for TensorRT");
  cmd->add_option("--out,-o", opts->out, "output file (default: the weights path with .onnx)");
  // export.py needs --device 0 for --half; kestrel writes the same graph on any machine (float16 from fp32).
  cmd->add_option("--device", opts->device, "accepted, as export.py's: kestrel exports on the CPU, --half included");
  cmd->callback([opts, ignored_options] {
    refuse_repeated({"--img", "--img-size", "--imgsz"}, "--img 640 640");  // CLI11 would join the uses' sizes
    refuse_repeated({"--include", "--format"}, "--include onnx engine");
    for (const auto& [name, option, why] : *ignored_options)
      if (option->count() > 0) std::cout << "WARNING: " << name << " ignored: " << why << "\n";
    run_export(*opts);
  });
}

}  // namespace kestrel::app
