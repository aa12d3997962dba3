#include "kestrel/train/autoanchor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <iterator>
#include <numeric>
#include <random>
#include <set>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "kestrel/core/error.h"

namespace kestrel::train {
namespace {

// The loss's ratio metric of one label against one anchor: 1 = same size, 1/anchor_t = the match limit.
double ratio_metric(const BoxSize& s, const BoxSize& a) {
  const double rw = s[0] / a[0], rh = s[1] / a[1];
  return std::min({rw, 1 / rw, rh, 1 / rh});
}

double best_metric(const BoxSize& s, const std::vector<BoxSize>& anchors) {
  double best = 0;
  for (const auto& a : anchors) best = std::max(best, ratio_metric(s, a));
  return best;
}

// Runs body(chunk, begin, end) over fixed 8192-label chunks of [0, n) on LibTorch's intra-op threads.
// Callers keep one partial result per chunk and add them in chunk order, so results do not depend on
// the thread count (AutoAnchor on COCO's 860k labels is ~10^10 ratio evaluations).
constexpr size_t kChunk = 8192;
size_t num_chunks(size_t n) { return (n + kChunk - 1) / kChunk; }
template <typename Body>
void for_chunks(size_t n, const Body& body) {
  at::parallel_for(0, static_cast<int64_t>(num_chunks(n)), 1, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) body(static_cast<size_t>(c), c * kChunk, std::min(n, (c + 1) * kChunk));
  });
}

// Only the fitness the genetic search maximises (anchor_fit without the other statistics).
double search_fitness(const std::vector<BoxSize>& sizes, const std::vector<BoxSize>& anchors, double limit) {
  std::vector<double> part(num_chunks(sizes.size()), 0.0);
  for_chunks(sizes.size(), [&](size_t c, size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const double b = best_metric(sizes[i], anchors);
      if (b > limit) part[c] += b;
    }
  });
  return std::accumulate(part.begin(), part.end(), 0.0) / static_cast<double>(sizes.size());
}

// Best of `restarts` k-means runs, each started from n distinct labels picked at random.
std::vector<BoxSize> kmeans(const std::vector<BoxSize>& points, int n, int restarts, std::mt19937_64& rng) {
  std::vector<BoxSize> best;
  double best_distance = std::numeric_limits<double>::infinity();
  std::vector<size_t> order(points.size());
  for (int r = 0; r < std::max(1, restarts); ++r) {
    std::iota(order.begin(), order.end(), size_t{0});
    std::vector<BoxSize> centres;
    for (int c = 0; c < n; ++c) {  // partial Fisher-Yates: n distinct indices
      const size_t j = c + std::uniform_int_distribution<size_t>(0, order.size() - 1 - c)(rng);
      std::swap(order[c], order[j]);
      centres.push_back(points[order[c]]);
    }
    const double distance = refine_kmeans(points, centres);
    if (distance < best_distance) best_distance = distance, best = centres;
  }
  return best;
}

void sort_by_area(std::vector<BoxSize>& anchors) {
  std::stable_sort(anchors.begin(), anchors.end(),
                   [](const BoxSize& a, const BoxSize& b) { return a[0] * a[1] < b[0] * b[1]; });
}

// The labels the search fits: at least min_label_px on one side (upstream's `wh0[(wh0 >= 2.0).any(1)]`).
std::vector<BoxSize> searchable_sizes(const std::vector<BoxSize>& sizes, const AutoAnchorOptions& o) {
  std::vector<BoxSize> kept;
  std::copy_if(sizes.begin(), sizes.end(), std::back_inserter(kept),
               [&](const BoxSize& s) { return s[0] >= o.min_label_px || s[1] >= o.min_label_px; });
  return kept;
}

std::string format_fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

double refine_kmeans(const std::vector<BoxSize>& points, std::vector<BoxSize>& centres) {
  struct Partial {
    std::vector<BoxSize> sums;
    std::vector<size_t> counts;
    double distance = 0;
  };
  double previous = std::numeric_limits<double>::infinity();
  for (int iteration = 0; iteration < 1000; ++iteration) {
    const size_t k = centres.size();
    std::vector<Partial> parts(num_chunks(points.size()), Partial{std::vector<BoxSize>(k, BoxSize{0, 0}), std::vector<size_t>(k, 0), 0});
    for_chunks(points.size(), [&](size_t c, size_t begin, size_t end) {
      Partial& part = parts[c];
      for (size_t i = begin; i < end; ++i) {
        const BoxSize& p = points[i];
        size_t nearest = 0;
        double d2 = std::numeric_limits<double>::infinity();
        for (size_t j = 0; j < k; ++j) {
          const double dx = p[0] - centres[j][0], dy = p[1] - centres[j][1], e = dx * dx + dy * dy;
          if (e < d2) d2 = e, nearest = j;
        }
        part.distance += std::sqrt(d2);
        part.sums[nearest][0] += p[0], part.sums[nearest][1] += p[1];
        ++part.counts[nearest];
      }
    });
    double distance = 0;
    std::vector<BoxSize> sums(k, BoxSize{0, 0});
    std::vector<size_t> counts(k, 0);
    for (const Partial& part : parts) {
      distance += part.distance;
      for (size_t j = 0; j < k; ++j) sums[j][0] += part.sums[j][0], sums[j][1] += part.sums[j][1], counts[j] += part.counts[j];
    }
    distance /= static_cast<double>(points.size());
    std::vector<BoxSize> kept;  // scipy keeps only the centres with members (code_book[has_members])
    for (size_t j = 0; j < k; ++j)
      if (counts[j]) kept.push_back({sums[j][0] / counts[j], sums[j][1] / counts[j]});
    centres = std::move(kept);
    if (std::abs(previous - distance) <= 1e-5) return distance;
    previous = distance;
  }
  return previous;
}


std::string anchors_text(const std::vector<BoxSize>& anchors) {
  std::string out;
  // upstream: '%i' % round(x) of numpy float32 values, half to even
  const auto rounded = [](double v) { return static_cast<long>(std::nearbyint(static_cast<float>(v))); };
  for (const auto& a : anchors) out += cat(out.empty() ? "" : ", ", rounded(a[0]), ",", rounded(a[1]));
  return out;
}

AnchorFit anchor_fit(const std::vector<BoxSize>& sizes, const std::vector<BoxSize>& anchors, double anchor_t) {
  AnchorFit f;
  if (sizes.empty() || anchors.empty()) return f;
  const double limit = 1 / anchor_t;
  double past_thr_sum = 0;
  int64_t past_thr = 0;
  for (const auto& s : sizes) {
    double best = 0;
    int fitting = 0;
    for (const auto& a : anchors) {
      const double m = ratio_metric(s, a);
      best = std::max(best, m);
      fitting += m > limit;
      f.mean_metric += m;
      if (m > limit) past_thr_sum += m;
    }
    past_thr += fitting;
    f.anchors_per_target += fitting;
    f.bpr += best > limit;
    f.fitness += best > limit ? best : 0;
    f.mean_best += best;
  }
  const double n = static_cast<double>(sizes.size());
  f.bpr /= n, f.anchors_per_target /= n, f.fitness /= n, f.mean_best /= n;
  f.mean_metric /= n * static_cast<double>(anchors.size());
  f.mean_past_thr = past_thr > 0 ? past_thr_sum / static_cast<double>(past_thr) : std::nan("");
  return f;
}

std::vector<BoxSize> label_sizes(const std::vector<data::ImageRecord>& records, int img_size, double scale_jitter,
                                 uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> jitter(1 - scale_jitter, 1 + scale_jitter);
  std::vector<BoxSize> sizes;
  for (const auto& r : records) {
    // One draw per image (also for images without labels), so a label's scale does not depend on the others'.
    const double scale = scale_jitter > 0 ? jitter(rng) : 1.0;
    const double longest = std::max(r.width, r.height);
    if (longest <= 0) continue;
    const double sw = img_size * r.width / longest * scale, sh = img_size * r.height / longest * scale;
    for (const auto& row : r.rows) sizes.push_back({row.box[3] * sw, row.box[4] * sh});
  }
  return sizes;
}

std::vector<BoxSize> kmean_anchors(const std::vector<BoxSize>& all_sizes, int n, int img_size, const AutoAnchorOptions& o,
                                   bool* random_start) {
  if (n < 1) fail("AutoAnchor: need at least one anchor, got ", n);
  if (random_start) *random_start = false;
  std::mt19937_64 rng(o.seed);
  const std::vector<BoxSize> sizes = searchable_sizes(all_sizes, o);

  // k-means on whitened sizes (divided by their population standard deviation per axis), scaled back. It
  // cannot run with fewer distinct sizes than anchors (scipy samples n of them, or drops empty clusters
  // and upstream's assert fails) or with a spread of 0 (whitening divides by it: scipy refuses infinities).
  const std::set<BoxSize> distinct(sizes.begin(), sizes.end());
  BoxSize mean{0, 0}, sd{0, 0};
  for (const auto& s : sizes) mean[0] += s[0], mean[1] += s[1];
  for (double& v : mean) v /= std::max<size_t>(sizes.size(), 1);
  for (const auto& s : sizes) sd[0] += (s[0] - mean[0]) * (s[0] - mean[0]), sd[1] += (s[1] - mean[1]) * (s[1] - mean[1]);
  for (double& v : sd) v = std::sqrt(v / std::max<size_t>(sizes.size(), 1));
  const bool kmeans_runs = static_cast<int>(distinct.size()) >= n && sd[0] > 0 && sd[1] > 0;
  std::vector<BoxSize> k;
  if (kmeans_runs) {
    std::vector<BoxSize> whitened;
    for (const auto& s : sizes) whitened.push_back({s[0] / sd[0], s[1] / sd[1]});
    k = kmeans(whitened, n, o.kmeans_restarts, rng);
    for (auto& a : k) a = {a[0] * sd[0], a[1] * sd[1]};
  }
  // The best run may have lost clusters (two starts on equal sizes): upstream's `assert n == len(k)` fails.
  if (static_cast<int>(k.size()) != n) {
    // YOLOv7's kmean_anchors has no fallback: the error reaches its check_anchors, which keeps the anchors.
    if (o.yolov7) return {};
    k.clear();
    if (random_start) *random_start = true;
    // YOLOv5's fallback: sorted random sizes up to img_size.
    std::vector<double> v(2 * static_cast<size_t>(n));
    for (double& x : v) x = std::uniform_real_distribution<double>(0, 1)(rng);
    std::sort(v.begin(), v.end());
    for (int i = 0; i < n; ++i) k.push_back({v[2 * i] * img_size, v[2 * i + 1] * img_size});
  }
  sort_by_area(k);

  // Genetic refinement: mutate every coordinate with probability mutation_prob by a factor
  // 1 + r * N(0, sigma) (r ~ U(0, 1) per generation, factor clipped to [0.3, 3]); keep improvements.
  const double limit = 1 / o.anchor_t;
  double f = sizes.empty() ? 0.0 : search_fitness(sizes, k, limit);
  std::uniform_real_distribution<double> unit(0, 1);
  std::normal_distribution<double> normal(0, 1);
  std::vector<double> factor(2 * k.size());
  for (int g = 0; g < o.generations && !sizes.empty(); ++g) {  // no label: nothing to fit (upstream: NaN fitness)
    bool unchanged = true;
    while (unchanged) {
      const double r = unit(rng);
      for (double& x : factor) {
        const bool mutate = unit(rng) < o.mutation_prob;
        const double z = normal(rng);
        x = mutate ? std::clamp(1 + r * z * o.mutation_sigma, 0.3, 3.0) : 1.0;
        unchanged = unchanged && x == 1.0;
      }
    }
    std::vector<BoxSize> kg = k;
    for (size_t i = 0; i < kg.size(); ++i)
      for (int c = 0; c < 2; ++c) kg[i][c] = std::max(kg[i][c] * factor[2 * i + c], o.min_label_px);
    const double fg = search_fitness(sizes, kg, limit);
    if (fg > f) f = fg, k = std::move(kg);
  }
  sort_by_area(k);
  return k;
}

AutoAnchorResult check_anchors(models::Detect& head, const std::vector<data::ImageRecord>& records, int img_size,
                               const AutoAnchorOptions& o) {
  AutoAnchorResult result;
  const int64_t nl = head.num_levels(), na = head.num_anchors();
  const at::Tensor px = head.anchor_pixels();  // [nl, na, 2]
  for (int64_t i = 0; i < nl; ++i)
    for (int64_t j = 0; j < na; ++j)
      result.anchors.push_back({px[i][j][0].item<double>(), px[i][j][1].item<double>()});
  const std::vector<BoxSize> jittered = label_sizes(records, img_size, o.scale_jitter, o.seed);
  if (jittered.empty()) {
    result.report = "AutoAnchor: no labels in the training split, anchors left as they are\n";
    return result;
  }
  result.before = result.after = anchor_fit(jittered, result.anchors, o.anchor_t);
  result.report = cat("AutoAnchor: ", format_fixed(result.before.anchors_per_target, 2), " anchors/target, ",
                      format_fixed(result.before.bpr, 3), " Best Possible Recall (BPR). ");
  // Upstream's BPR is a float32 mean, compared with 0.98 as float32 (bpr > 0.98 / YOLOv7's bpr < 0.98).
  const auto f32 = [](double v) { return static_cast<float>(v); };
  if (o.yolov7 ? f32(result.before.bpr) >= f32(o.min_bpr) : f32(result.before.bpr) > f32(o.min_bpr)) {
    result.report += "Current anchors are a good fit to dataset\n";
    return result;
  }
  result.report += "Anchors are a poor fit to dataset, attempting to improve...\n";
  result.searched = true;
  const std::vector<BoxSize> sizes = label_sizes(records, img_size, 0.0, o.seed);
  const auto tiny = std::count_if(sizes.begin(), sizes.end(), [](const BoxSize& s) { return s[0] < 3 || s[1] < 3; });
  if (tiny)
    result.report += cat("AutoAnchor: WARNING: Extremely small objects found: ", tiny, " of ", sizes.size(),
                         " labels are <3 pixels in size\n");
  const std::vector<BoxSize> searched = searchable_sizes(sizes, o);  // kmean_anchors' own, to name their count
  bool random_start = false;
  const std::vector<BoxSize> k = kmean_anchors(sizes, static_cast<int>(nl * na), img_size, o, &random_start);
  if (random_start)
    result.report += cat("AutoAnchor: WARNING k-means cannot place ", nl * na, " anchors among ", searched.size(),
                         " labels of at least ", o.min_label_px, " px, switching strategies from kmeans to random init\n");
  if (k.empty()) {  // YOLOv7: its k-means raised, check_anchors printed the error and kept the anchors
    result.report += cat("AutoAnchor: k-means cannot place ", nl * na, " anchors among ", searched.size(),
                         " labels of at least ", o.min_label_px, " px with these sizes; original anchors kept\n");
    return result;
  }
  const AnchorFit found = anchor_fit(jittered, k, o.anchor_t);  // compared with `before`, both jittered
  // Shown as upstream's kmean_anchors: the search's labels (at least min_label_px on a side) and its fitness
  // (upstream's progress bar), then print_results: the statistics on every label without the jitter.
  const AnchorFit shown = anchor_fit(sizes, k, o.anchor_t);
  const double fitness = searched.empty() ? 0.0 : search_fitness(searched, k, 1 / o.anchor_t);
  const auto nan_or = [](double v, int digits) { return std::isnan(v) ? std::string("nan") : format_fixed(v, digits); };
  result.report += cat("AutoAnchor: Running kmeans for ", k.size(), " anchors on ", searched.size(), " points...\n",
                       "AutoAnchor: Evolving anchors with Genetic Algorithm: fitness = ", format_fixed(fitness, 4), ": ",
                       o.generations, " generations\n", "AutoAnchor: thr=", format_fixed(1 / o.anchor_t, 2), ": ",
                       format_fixed(shown.bpr, 4), " best possible recall, ", format_fixed(shown.anchors_per_target, 2),
                       " anchors past thr\n", "AutoAnchor: n=", k.size(), ", img_size=", img_size, ", metric_all=",
                       format_fixed(shown.mean_metric, 3), "/", format_fixed(shown.mean_best, 3), "-mean/best, past_thr=",
                       nan_or(shown.mean_past_thr, 3), "-mean: ", anchors_text(k), "\n");
  if (!(f32(found.bpr) > f32(result.before.bpr))) {
    result.report += "AutoAnchor: Done (original anchors better than new anchors, proceeding with original anchors)\n";
    return result;
  }
  // Smallest anchors on the finest level: levels taken in stride order (usually their own order).
  std::vector<int64_t> levels(nl);
  std::iota(levels.begin(), levels.end(), int64_t{0});
  const auto& strides = head.strides();
  std::stable_sort(levels.begin(), levels.end(), [&](int64_t a, int64_t b) { return strides[a] < strides[b]; });
  at::Tensor pixels = at::empty({nl, na, 2}, at::kFloat);
  for (int64_t r = 0; r < nl; ++r)
    for (int64_t j = 0; j < na; ++j)
      for (int c = 0; c < 2; ++c) pixels[levels[r]][j][c] = k[r * na + j][c];
  head.set_anchors(pixels);
  const at::Tensor now = head.anchor_pixels();
  result.anchors.clear();
  for (int64_t i = 0; i < nl; ++i)
    for (int64_t j = 0; j < na; ++j) result.anchors.push_back({now[i][j][0].item<double>(), now[i][j][1].item<double>()});
  result.after = anchor_fit(jittered, result.anchors, o.anchor_t);
  result.replaced = true;
  result.report += "AutoAnchor: Done (optional: update model *.yaml to use these anchors in the future)\n";
  return result;
}

}  // namespace kestrel::train
