#include "kestrel/models/model_family.h"

#include "kestrel/models/yolo_model.h"

namespace kestrel::models {

bool is_yolov7_family(const YoloModel& model) {
  if (model.head().implicit()) return true;
  for (const auto& layer : model.layer_info())
    for (const char* module : {"MP", "SP", "SPPCSPC", "RepConv", "ReOrg", "DownC", "Stem", "Res", "ResX", "BottleneckCSPA",
                               "BottleneckCSPB", "BottleneckCSPC", "ResCSPA", "ResCSPB", "ResCSPC", "ResXCSPA",
                               "ResXCSPB", "ResXCSPC"})
      if (layer.module == module) return true;
  return false;
}

}  // namespace kestrel::models
