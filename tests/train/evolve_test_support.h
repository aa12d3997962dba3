// The trainings both evolution schemes' tests run: yolov5n on the demo data on the CPU, one epoch at 64
// px (a second or two each), evolving `hyp` into `project`.
#pragma once
#include <string>

#include "kestrel/train/trainer.h"

namespace kestrel::train::test_evolve {

inline TrainOptions tiny_evolve_options(const std::string& hyp, const std::string& project) {
  TrainOptions o;
  o.cfg = "yolov5n";
  o.data = "data/demo/demo.yaml";
  o.hyp = hyp;
  o.project = project;
  o.device = "cpu";
  o.img_size = 64;
  o.batch_size = 16;
  o.epochs = 1;
  o.workers = 1;
  o.quiet = true;
  o.noautoanchor = true;
  return o;
}

}  // namespace kestrel::train::test_evolve
