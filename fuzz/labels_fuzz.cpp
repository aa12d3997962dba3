// parse_labels on arbitrary text: only kestrel::Error naming the file may come out, and a successful
// parse must hold what the reference rules promise (finite, normalised, class < nc, polygon shape).
#include <cmath>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "kestrel/data/labels.h"

using namespace kestrel;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const int nc = 80;
  fuzz::expect_kestrel_errors_only("fuzz.txt", [&] {
    const data::ParsedLabels p = data::parse_labels(text, "fuzz.txt", nc);
    for (const data::LabelRow& r : p.rows) {
      if (!(r.box[0] >= 0 && r.box[0] < nc && r.box[0] == std::floor(r.box[0]))) fuzz::finding("class out of range");
      for (int i = 1; i < 5; ++i)
        if (!(r.box[i] >= 0 && r.box[i] <= 1)) fuzz::finding("box value outside 0..1");
      if (!r.polygon.empty() && (r.polygon.size() < 6 || r.polygon.size() % 2 != 0)) fuzz::finding("bad polygon size");
      for (float v : r.polygon)  // points may lie outside 0..1; the box (checked above) may not
        if (!std::isfinite(v)) fuzz::finding("polygon value not finite");
    }
    if (p.duplicates_removed < 0) fuzz::finding("negative duplicate count");
  });
  return 0;
}
