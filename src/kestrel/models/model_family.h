// Which upstream a model comes from, for the few behaviours where YOLOv5 and YOLOv7 differ outside the
// network itself: test-time augmentation (YOLOv7 keeps every level of every pass) and the validation
// metric (YOLOv7's test.py, eval/ap_metrics.h). YOLOv3 uses YOLOv5's code upstream, so it counts as YOLOv5.
#pragma once

namespace kestrel::models {

class YoloModel;

// A model with YOLOv7's IDetect head, or (its deploy configs end in a plain Detect) any of the layers only
// YOLOv7 uses: MP, SP, SPPCSPC, RepConv, ReOrg, DownC, and the cfg/baseline/ blocks (csp_blocks.h). YOLOv7's
// baseline yolov3(-spp).yaml have none of them and count as YOLOv5, as their architecture is YOLOv5's.
bool is_yolov7_family(const YoloModel& model);

}  // namespace kestrel::models
