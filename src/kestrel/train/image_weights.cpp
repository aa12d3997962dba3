#include "kestrel/train/image_weights.h"

#include <numeric>

#include <ATen/ATen.h>

#include "kestrel/core/error.h"

namespace kestrel::train {
namespace {

int class_of(const data::LabelRow& row, int nc, const std::string& image) {
  const int c = static_cast<int>(row.box[0]);
  if (c < 0 || c >= nc) fail(image, ": class ", c, " outside 0..", nc - 1);
  return c;
}

}  // namespace

std::vector<double> class_frequency_weights(const std::vector<data::ImageRecord>& records, int nc) {
  std::vector<double> counts(static_cast<size_t>(nc), 0.0);
  for (const auto& r : records)
    for (const auto& row : r.rows) counts[static_cast<size_t>(class_of(row, nc, r.image))] += 1;
  std::vector<double> w(counts.size());
  for (size_t c = 0; c < counts.size(); ++c) w[c] = 1.0 / (counts[c] > 0 ? counts[c] : 1.0);
  const double sum = std::accumulate(w.begin(), w.end(), 0.0);
  for (double& x : w) x /= sum;
  return w;
}

std::vector<double> image_sampling_weights(const std::vector<data::ImageRecord>& records, int nc,
                                           const std::vector<double>& maps) {
  if (!maps.empty() && maps.size() != static_cast<size_t>(nc)) fail("image weights: ", maps.size(), " class mAPs for ", nc, " classes");
  std::vector<double> cw = class_frequency_weights(records, nc);
  for (size_t c = 0; c < cw.size(); ++c) {
    const double miss = 1.0 - (maps.empty() ? 0.0 : maps[c]);
    cw[c] *= miss * miss;
  }
  std::vector<double> iw;
  iw.reserve(records.size());
  for (const auto& r : records) {
    double w = 0;
    for (const auto& row : r.rows) w += cw[static_cast<size_t>(class_of(row, nc, r.image))];
    iw.push_back(w);
  }
  return iw;
}

std::vector<double> class_maps(const eval::ApPerClass& metrics, int nc) {
  std::vector<double> maps(static_cast<size_t>(nc), metrics.map);
  if (!metrics.classes.defined() || metrics.classes.numel() == 0) return maps;
  const at::Tensor classes = metrics.classes.to(at::kCPU), ap = metrics.ap.to(at::kCPU).mean(1);  // ap [classes, 10]
  for (int64_t i = 0; i < classes.numel(); ++i) {
    const int64_t c = classes[i].item<int64_t>();
    if (c >= 0 && c < nc) maps[static_cast<size_t>(c)] = ap[i].item<double>();
  }
  return maps;
}

}  // namespace kestrel::train
