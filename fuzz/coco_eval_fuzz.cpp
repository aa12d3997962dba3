// COCO annotation and result JSON loading, then the evaluation. Input: an annotation file, optionally
// followed by "\n@@\n" and a result file (detections). Only kestrel::Error naming the file may come out,
// and the 12 summary numbers must be -1 or within 0..1.
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_util.h"
#include "kestrel/eval/coco_eval.h"

using namespace kestrel;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find("\n@@\n");
  const std::string annotations = input.substr(0, split);
  const std::string results = split == std::string::npos ? std::string("[]") : input.substr(split + 4);
  const std::string ann_path = fuzz::scratch_file("ann", ".json");
  const std::string res_path = fuzz::scratch_file("res", ".json");
  fuzz::write_file(ann_path, reinterpret_cast<const uint8_t*>(annotations.data()), annotations.size());
  fuzz::write_file(res_path, reinterpret_cast<const uint8_t*>(results.data()), results.size());
  eval::CocoAnnotations ann;
  bool have_annotations = false;
  fuzz::expect_kestrel_errors_only(ann_path, [&] {
    ann = eval::read_coco_annotations(ann_path);
    have_annotations = true;
  });
  if (!have_annotations) return 0;
  fuzz::expect_kestrel_errors_only(res_path, [&] {
    const auto detections = eval::read_coco_results(res_path, ann);
    const eval::CocoSummary s = eval::evaluate_coco(ann, detections);
    for (double v : s.stats)
      if (!(v == -1.0 || (v >= 0 && v <= 1 + 1e-9))) fuzz::finding("summary number outside 0..1 and not -1");
    (void)eval::format_coco_summary(s);
  });
  return 0;
}
