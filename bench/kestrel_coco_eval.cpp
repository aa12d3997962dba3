// kestrel's COCO evaluator alone: reads a COCO annotation JSON and a COCO results JSON, prints the 12
// summary numbers as pycocotools does, and the seconds taken to read the files and to evaluate. Built as
// build/kestrel_coco_eval; used by bench/coco_eval_scale.sh against pycocotools on the same files.
#include <chrono>
#include <cstdio>
#include <exception>

#include "kestrel/eval/coco_eval.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s ANNOTATIONS.json RESULTS.json\n", argv[0]);
    return 2;
  }
  try {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    const auto annotations = kestrel::eval::read_coco_annotations(argv[1]);
    const auto detections = kestrel::eval::read_coco_results(argv[2], annotations);
    const auto read = clock::now();
    const auto summary = kestrel::eval::evaluate_coco(annotations, detections);
    const auto done = clock::now();
    std::printf("%s\nread %.2f s, evaluate %.2f s\n", kestrel::eval::format_coco_summary(summary).c_str(),
                std::chrono::duration<double>(read - start).count(), std::chrono::duration<double>(done - read).count());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
