// Image-space augmentations of one Sample, with YOLOv5 v7.0 / YOLOv7 semantics: resize, letterbox,
// HSV jitter, random perspective (rotation, scale, shear, translation, perspective), flips, mixup and
// copy-paste. Boxes (pixels, xyxy) and polygons follow every geometric change.
//
// All randomness comes from a caller-supplied std::mt19937, turned into numbers with Python's own
// formulas (random.random, random.uniform, random.randrange, random.sample, random.choices, random.shuffle), so one seed gives one
// result on every platform, and the draws equal Python's for the same generator state.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include <opencv2/core.hpp>

#include "kestrel/data/banded_warp.h"
#include "kestrel/data/hyp.h"
#include "kestrel/data/sample.h"

namespace kestrel::data {

// Where YOLOv7's random_perspective differs from YOLOv5's: scale drawn from [1 - scale, 1.1 + scale]
// instead of [1 - scale, 1 + scale], and box candidates need an aspect ratio below 20 instead of 100.
enum class Dialect { yolov5, yolov7 };

// ---- random numbers (Python's formulas on the MT19937 stream) ----------------------------------

double random_unit(std::mt19937& rng);                         // [0, 1), 53 bits: random.random()
double uniform(std::mt19937& rng, double lo, double hi);       // random.uniform(lo, hi)
int random_below(std::mt19937& rng, int n);                    // [0, n): random.randrange(n)
// A mosaic partner among n images: any image, or with a weighted draw (--image-weights) one of its entries
// (random.choices(dataset.indices)); one random_unit either way, so the stream does not depend on it.
size_t draw_partner(std::mt19937& rng, int n, const std::vector<int64_t>* weighted_draw);
void python_shuffle(std::vector<size_t>& items, std::mt19937& rng);  // random.shuffle(items)
std::vector<int> sample_indices(std::mt19937& rng, int n, int k);  // random.sample(range(n), k)
double beta(std::mt19937& rng, double a, double b);            // Beta(a, b) from two gamma draws

// Fails (naming `where`) unless the image is non-empty CV_8UC3 and there are no polygons or one per box.
void check_sample(const Sample& sample, const char* where);

// The labels part of check_sample alone (for samples whose image is painted later): no polygons or one per box.
void check_labels(const Sample& sample, const char* where);

// ---- resize and letterbox -----------------------------------------------------------------------

// Upstream load_image: scales so that the long side is img_size; the short side is ceil(side * r).
// INTER_LINEAR when augmenting or enlarging, INTER_AREA when shrinking for evaluation.
// Returns `img` itself (not a copy) when it already has that long side.
cv::Mat resize_long_side(const cv::Mat& img, int img_size, bool augment);
// The size resize_long_side gives an image of `size`.
cv::Size long_side_size(cv::Size size, int img_size);

// resize_long_side on the image; boxes and polygons scale by the same per-axis factors.
Sample resize_sample(const Sample& sample, int img_size, bool augment);

// Boxes and polygons of `sample`: x -> x * scale.x + offset.x, y -> y * scale.y + offset.y.
void map_labels(Sample& sample, cv::Point2d scale, cv::Point2d offset);

struct LetterboxOptions {
  bool auto_pad = true;     // upstream `auto`: pad only to the next multiple of `stride` (minimum rectangle)
  bool scale_fill = false;  // stretch to new shape exactly, no padding (when auto_pad is false)
  bool scale_up = true;     // false: only shrink (better val mAP)
  int stride = 32;
  int pad_value = 114;      // grey, all three channels
};

struct Letterbox {
  cv::Mat image;
  cv::Point2d ratio;  // (w, h) scale factors, new / old
  cv::Point2d pad;    // (dw, dh): padding per side as upstream returns it (may end in .5)
};

// Resizes keeping the aspect ratio into (new_height, new_width), then pads with grey; the half
// padding is split round(d - 0.1) before, round(d + 0.1) after, as upstream.
Letterbox letterbox(const cv::Mat& img, int new_height, int new_width, const LetterboxOptions& options = {});

// Maps boxes and polygons into the letterboxed image: x * ratio + pad (upstream uses the float pad).
void letterbox_labels(Sample& sample, const Letterbox& lb);

// ---- colour --------------------------------------------------------------------------------------

// Multiplies H, S, V by gains (hue modulo 180, saturation and value clipped to 255) through
// look-up tables, in place. `img` is CV_8UC3 BGR.
void apply_hsv_gains(cv::Mat& img, cv::Vec3d gains);

// Gains uniform in [1 - g, 1 + g] per channel. With all gains 0, YOLOv5's returns at once (no draw);
// YOLOv7's has no such shortcut: the image still makes the 8-bit BGR -> HSV -> BGR round trip, which moves
// some pixels by a level or more (the three draws it makes are not reproduced: they change nothing).
void augment_hsv(cv::Mat& img, double hgain, double sgain, double vgain, std::mt19937& rng,
                 Dialect dialect = Dialect::yolov5);

// ---- geometry ------------------------------------------------------------------------------------

// One draw of random_perspective, in upstream's terms. The matrix is T * S * R * P * C:
// C moves the input centre to the origin, P is the perspective row, R = getRotationMatrix2D(angle,
// centre (0, 0), scale), S shears, T moves the origin to (translate_x * out_w, translate_y * out_h).
struct PerspectiveParams {
  double perspective_x = 0, perspective_y = 0;  // P[2][0], P[2][1]
  double degrees = 0;                           // counter-clockwise as seen on screen (y down)
  double scale = 1;
  double shear_x_degrees = 0, shear_y_degrees = 0;  // S[0][1] = tan(shear_x), S[1][0] = tan(shear_y)
  double translate_x = 0.5, translate_y = 0.5;      // fraction of the output size
};

cv::Matx33d perspective_matrix(const PerspectiveParams& params, cv::Size input, cv::Size output);

// Draws in upstream's order: perspective x, y, angle, scale, shear x, y, translation x, y.
PerspectiveParams draw_perspective(const AugmentOptions& options, std::mt19937& rng, Dialect dialect);

// Warps image, boxes and polygons into `output` (grey 114 outside the source). Boxes come from
// their 4 transformed corners, or, when polygons exist, from the polygon resampled to 1000 points
// and transformed (points outside the output ignored); then clipped to the output and filtered with
// box_candidate against the input box times params.scale (area_thr 0.1, or 0.01 with polygons).
// Kept polygons are the resampled, transformed ones, not clipped; polygons without a non-zero point
// (upstream's test for "has segments") are dropped, and the boxes warp by their corners.
void apply_perspective(Sample& sample, const PerspectiveParams& params, cv::Size output,
                       Dialect dialect = Dialect::yolov5);

// apply_perspective to an `input`-sized image that is never materialised whole: `paint` fills the
// rectangles of it that the warp reads, a band of output rows at a time (banded_warp.h); the
// projective warp has it paint the whole input once. sample.image is ignored and becomes the output;
// boxes and polygons are in input pixels. Same result as apply_perspective on the painted input.
void apply_perspective_painted(Sample& sample, cv::Size input, const InputPainter& paint,
                               const PerspectiveParams& params, cv::Size output, Dialect dialect = Dialect::yolov5);

// draw_perspective + apply_perspective into (w + 2 * border.x, h + 2 * border.y); a negative
// border (mosaic) makes the output smaller than the input.
void random_perspective(Sample& sample, const AugmentOptions& options, cv::Point border, std::mt19937& rng,
                        Dialect dialect = Dialect::yolov5);

struct CandidateThresholds {
  double wh_thr = 2;      // pixels: width and height must exceed it
  double ar_thr = 100;    // aspect ratio must stay below it (YOLOv7: 20)
  double area_thr = 0.1;  // area after / area before must exceed it
};

// Whether a box that was `before` and became `after` through augmentation is kept.
bool box_candidate(const Box& before, const Box& after, const CandidateThresholds& thresholds = {});

void flip_lr(Sample& sample);  // mirror left-right: x -> w - x
void flip_ud(Sample& sample);  // mirror up-down: y -> h - y

// Boxes clamped to [0, width - margin] x [0, height - margin]; polygons are left as they are.
void clip_boxes(Sample& sample, float margin);
// YOLOv5's clip of the boxes before its flips (xyxy2xywhn(clip=True, eps=1E-3)), which mirror the clipped
// boxes: a box that touches the left edge flips to end exactly at the right one.
constexpr float kYolov5ClipMargin = 1e-3f;

// Upstream order: up-down with probability flipud, then left-right with probability fliplr
// (one draw each, always, so the stream does not depend on the probabilities).
void random_flips(Sample& sample, const AugmentOptions& options, std::mt19937& rng);

// ---- mixing --------------------------------------------------------------------------------------

// a = a * ratio + b * (1 - ratio), truncated to uint8; boxes concatenated; polygons concatenated when
// both samples have them, dropped otherwise. Images must have the same size.
void mixup(Sample& a, const Sample& b, double ratio);

// ratio ~ Beta(alpha, alpha): YOLOv5 uses 32, YOLOv7 8.
void mixup(Sample& a, const Sample& b, std::mt19937& rng, double alpha);

// Intersection of `box` with `other`, over the area of `other` (upstream bbox_ioa, eps 1e-7).
double box_ioa(const Box& box, const Box& other);

// YOLOv5 v7.0 copy-paste: round(probability * n) random instances are mirrored left-right; each whose
// mirrored box covers under 30% of every existing box (pasted ones included) is pasted with its
// polygon mask and added as a box and polygon. Needs polygons; a no-op without them.
void copy_paste(Sample& sample, double probability, std::mt19937& rng);

}  // namespace kestrel::data
