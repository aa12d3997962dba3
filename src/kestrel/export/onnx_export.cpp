#include "kestrel/export/onnx_export.h"

#include <torch/utils.h>

#include "kestrel/core/error.h"
#include "kestrel/export/onnx_detect.h"
#include "kestrel/export/onnx_graph.h"
#include "kestrel/export/onnx_layers.h"
#include "kestrel/models/model_family.h"

namespace kestrel::exporting {
namespace {

void check_options(const models::YoloModel& model, const OnnxExportOptions& o) {
  if (o.opset < 11 || o.opset > 21) fail("--opset ", o.opset, ": kestrel writes opsets 11 to 21");
  if (o.batch < 1) fail("--batch-size ", o.batch, ": must be at least 1");
  if (o.end2end && o.include_nms)
    fail("--include-nms and --end2end: choose one (--end2end writes the plugin on centre boxes, or with --max-wh ONNX's "
         "NonMaxSuppression; --include-nms YOLOv7's RegisterNMS plugin on corner boxes)");
  if (o.include_nms && o.nms.max_wh)
    fail("--max-wh selects --end2end's NMS for onnxruntime; --include-nms writes TensorRT's plugin");
  if (o.end2end || o.include_nms) {
    if (o.nms.topk < 1) fail("--topk-all ", o.nms.topk, ": must be at least 1");
    if (!(o.nms.iou_thres >= 0 && o.nms.iou_thres <= 1)) fail("--iou-thres ", o.nms.iou_thres, ": must be in [0, 1]");
    if (!(o.nms.conf_thres >= 0 && o.nms.conf_thres <= 1)) fail("--conf-thres ", o.nms.conf_thres, ": must be in [0, 1]");
    if (o.nms.max_wh && !(*o.nms.max_wh >= 0)) fail("--max-wh ", *o.nms.max_wh, ": must be 0 (class-agnostic) or more");
  }
  const int64_t s = model.max_stride();
  if (o.img <= 0 || o.img % s != 0) {
    const int64_t below = o.img / s * s, above = below + s;
    fail("--img ", o.img, ": must be a positive multiple of the model's largest stride ", s, " (",
         model.name(), "), e.g. ", below > 0 ? std::to_string(below) + " or " : "", above);
  }
}


}  // namespace

int64_t num_predictions(const models::Detect& head, int64_t img) {
  int64_t n = 0;
  for (double s : head.strides()) {
    const int64_t cells = img / static_cast<int64_t>(s);
    n += head.num_anchors() * cells * cells;
  }
  return n;
}

std::string output_name(const models::YoloModel& model) {
  return models::is_yolov7_family(model) ? "output" : "output0";
}

void export_onnx(models::YoloModel& model, const std::string& path, const OnnxExportOptions& o,
                 const std::map<std::string, std::string>& metadata) {
  check_options(model, o);
  torch::NoGradGuard no_grad;
  model.fuse();

  OnnxGraph g(model.name(), o.opset, o.half);
  OnnxLayers layers(g);
  const std::string input = "images", output = output_name(model);
  const int64_t ch = model.in_channels(), no = model.head().num_outputs();
  const Dim batch = o.dynamic || o.dynamic_batch ? Dim{"batch"} : Dim{o.batch};
  if (o.dynamic) g.add_input(input, {batch, ch, "height", "width"});
  else g.add_input(input, {batch, ch, o.img, o.img});

  // The body, in layer order; outputs are kept by index for later `from` references. Only the layers the
  // head's lead maps depend on: an IAuxDetect model's auxiliary branches feed the training loss alone.
  const auto& info = model.layer_info();
  const size_t body = model.layers().size() - 1;
  const int64_t lead_maps = model.head().num_levels();
  const std::vector<bool>& needed = model.inference_layers();
  std::vector<std::string> outs(body + 1);
  std::string previous = input;
  auto source = [&](int f, size_t i) { return f < 0 || f == static_cast<int>(i) - 1 ? previous : outs.at(f); };
  for (size_t i = 0; i < body; ++i) {
    if (!needed[i]) continue;
    std::vector<std::string> xs;
    for (int f : info[i].from) xs.push_back(source(f, i));
    outs[i] = layers.layer(*model.layers()[i], xs, "model." + std::to_string(i), info[i].module);
    previous = outs[i];
  }

  // The head: output convs (implicit layers folded by fuse()) to [b, na * no, ny, nx], then the decode.
  const auto& head = model.head();
  const std::string prefix = "model." + std::to_string(body);
  std::vector<std::string> raw;
  for (size_t i = 0; i < static_cast<size_t>(lead_maps); ++i) {
    const std::string x = source(info[body].from[i], body);
    raw.push_back(layers.conv2d(*head.output_convs().at(i), x, prefix + ".m." + std::to_string(i)));
  }
  if (o.end2end || o.include_nms) {
    const std::string decoded = decode_detections(g, head, raw, prefix, {o.dynamic, o.img}, g.fresh("decoded"));
    if (o.include_nms || o.nms.tensorrt()) {
      if (o.include_nms) append_include_nms_trt(g, decoded, head.nc(), o.nms);
      else append_efficient_nms_trt(g, decoded, head.nc(), o.nms);
      using T = OnnxGraph::ElemType;
      g.add_output(kTensorRtOutputs[0], {batch, 1}, T::int32);
      g.add_output(kTensorRtOutputs[1], {batch, o.nms.topk, 4});
      g.add_output(kTensorRtOutputs[2], {batch, o.nms.topk});
      g.add_output(kTensorRtOutputs[3], {batch, o.nms.topk}, T::int32);
    } else {
      g.add_output(append_nms(g, decoded, head.nc(), o.nms, kEndToEndOutput), {"detections", 7});
    }
  } else {
    decode_detections(g, head, raw, prefix, {o.dynamic, o.img}, output);
    if (o.dynamic) g.add_output(output, {batch, "anchors", no});
    else g.add_output(output, {batch, num_predictions(head, o.img), no});
  }

  std::map<std::string, std::string> props = metadata;
  props["stride"] = std::to_string(model.max_stride());
  props["model"] = model.name();
  g.set_metadata(props);
  g.save(path);
}

}  // namespace kestrel::exporting
