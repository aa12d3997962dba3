// AutoAnchor, as YOLOv5/YOLOv7 train.py run it before training (unless --noautoanchor or --resume):
// how well do the model's anchors cover the training labels' box sizes, and if not well enough,
// new anchors from k-means on those sizes refined by a genetic search.
//
// The measure is the ratio metric of the loss's anchor matching: a label of size (w, h) fits an
// anchor (aw, ah) with m = min(w/aw, aw/w, h/ah, ah/h); the loss matches it when m > 1/anchor_t.
// Best possible recall (BPR) = the share of labels whose best anchor (over all levels) fits.
// Label sizes are in pixels of the training image: each image's normalised (w, h) times its shape
// scaled so that the long side is --img (the resize the loader does), for the BPR with a random
// 0.9-1.1 scale per image (upstream's stand-in for the scale augmentation).
//
// Written from the algorithm's description (shared/reference/peers.md); no upstream code.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kestrel/data/dataset_index.h"
#include "kestrel/models/detect.h"

namespace kestrel::train {

using BoxSize = std::array<double, 2>;  // (w, h) in pixels

struct AutoAnchorOptions {
  double anchor_t = 4.0;          // hyp anchor_t: the loss's match limit on max(r, 1/r)
  double min_bpr = 0.98;          // YOLOv5: anchors with BPR > 0.98 are kept without a search
  bool yolov7 = false;            // YOLOv7's autoanchor.py: BPR = min_bpr keeps them too (`if bpr < 0.98`), and
                                  // where k-means cannot run the anchors are kept (no random fallback)
  double scale_jitter = 0.1;      // BPR labels scaled by U(1 - j, 1 + j) per image
  int kmeans_restarts = 30;       // scipy.cluster.vq.kmeans(iter=30): best of 30 seeded runs
  int generations = 1000;         // genetic refinement
  double mutation_prob = 0.9;     // per anchor coordinate
  double mutation_sigma = 0.1;
  double min_label_px = 2.0;      // labels with both sides below this are left out of the search
  uint64_t seed = 0;              // the run's --seed: same labels + seed = same anchors
};

// How well `anchors` (pixels, any number) cover `sizes` (pixels).
struct AnchorFit {
  double bpr = 0;                 // share of labels whose best anchor fits (metric > 1/anchor_t)
  double anchors_per_target = 0;  // mean number of fitting anchors per label
  double fitness = 0;             // mean over labels of best metric, counting 0 where it does not fit
  double mean_best = 0;           // mean over labels of best metric
  double mean_metric = 0;         // mean over every (label, anchor) pair of the metric (upstream's metric_all)
  double mean_past_thr = 0;       // mean of the pairs' metrics above 1/anchor_t (past_thr); NaN when none is
};
AnchorFit anchor_fit(const std::vector<BoxSize>& sizes, const std::vector<BoxSize>& anchors, double anchor_t);

// "w,h, w,h, ..." as upstream prints anchors: each rounded as a float32, halves to even (Python's round).
std::string anchors_text(const std::vector<BoxSize>& anchors);

// Label sizes in pixels at img_size (see above); scale_jitter 0 = no random scale.
std::vector<BoxSize> label_sizes(const std::vector<data::ImageRecord>& records, int img_size, double scale_jitter,
                                 uint64_t seed);

// n anchors for `sizes` (pixels, unjittered): k-means on the sizes divided by their standard deviation,
// then `generations` mutations of all anchors at once, each kept when it raises fitness. Sorted by area.
// Labels smaller than min_label_px on both sides are ignored. Where k-means cannot run (fewer distinct
// sizes than n, or all of one width or height) or its best run ends with fewer than n clusters: YOLOv5's
// random anchors refined by the same search (*random_start set), or for o.yolov7 an empty result (YOLOv7
// keeps its anchors).
std::vector<BoxSize> kmean_anchors(const std::vector<BoxSize>& sizes, int n, int img_size, const AutoAnchorOptions& o,
                                   bool* random_start = nullptr);

// One k-means run from `centres`, as scipy.cluster.vq's _kmeans: Lloyd's iterations until the mean distance
// to the nearest centre changes by no more than 1e-5 either way (a step can raise the mean distance, so the
// change is taken as an absolute value). Ties go to the first centre; a centre left without points is
// dropped, so `centres` can come back shorter. Returns the mean distance measured before the last update.
double refine_kmeans(const std::vector<BoxSize>& points, std::vector<BoxSize>& centres);

struct AutoAnchorResult {
  AnchorFit before, after;          // after == before when no search ran
  bool searched = false;            // BPR was not above min_bpr
  bool replaced = false;            // the searched anchors had a higher BPR and are now the head's
  std::vector<BoxSize> anchors;     // the head's anchors afterwards, pixels, level-major
  std::string report;               // the lines upstream prints
};

// Checks the head's anchors against the training labels and replaces them when a search finds a
// higher BPR: sorted by area, the smallest on the finest stride, stored in grid units (Detect::set_anchors).
AutoAnchorResult check_anchors(models::Detect& head, const std::vector<data::ImageRecord>& records, int img_size,
                               const AutoAnchorOptions& o);

}  // namespace kestrel::train
