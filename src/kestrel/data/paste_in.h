// YOLOv7's paste-in augmentation (hyp key `paste_in`): with that probability a training sample gets
// object cut-outs pasted into free places. Written from the behaviour of YOLOv7's utils/datasets.py
// (load_samples, sample_segments, pastein), not from its code.
//
// Upstream, per training sample, after the mosaic (or letterbox + perspective), mixup and the HSV
// jitter, and before the flips:
//  1. objects: while fewer than 30 are collected, a side 4-mosaic canvas (2s x 2s, random centre,
//     4 random images, no perspective) is built and half of its objects (round(0.5 n), Python's
//     half-to-even rounding, drawn with random.sample) are cut out: the crop is the object's box
//     truncated to integers and clipped to the canvas, the mask its polygon filled (points truncated),
//     the pixels the canvas inside the mask (0 outside). The loop stops early when the first
//     canvas gives none.
//  2. pastein: for each of 20 scales (0.75 x2, 0.5 x4, 0.25 x4, 0.125 x4, 0.0625 x6 of the image
//     side), skipped with probability 0.2; else a box of randint(1, int(h s)) x randint(1, int(w s))
//     around a random point (x in randint(0, w), minus half the width, and likewise y), cut by the
//     image. It is used when it is more than 20 px on each side and covers under 30% of every existing
//     box (intersection over the existing box's area; boxes pasted before count). A random object is
//     scaled to fit it (aspect kept, size truncated to integers, top-left aligned, INTER_LINEAR for
//     pixels and mask) and pasted where the scaled mask is non-zero, if it is more than 10 px on
//     each side and the mask covers more than 20 px; its label is the scaled crop's box, not the
//     tight mask box.
//
// Where kestrel differs (deliberately):
//  - Upstream turns a 0 channel value inside an object into 255 (its cut-out keeps the mask's 255
//    where the image is 0); kestrel keeps the object's own pixels.
//  - Upstream's mask is its cut-out itself (sample_segments keeps two views of one array, then writes the
//    pixels into it), so it pastes each channel where the scaled cut-out is non-zero and counts those
//    channel values (> 60); kestrel pastes where the scaled outline is non-zero and counts pixels (> 20).
//    They differ on the soft edge only, where a dark object pixel blends to 0 in a channel: upstream keeps
//    the background's value of that channel (408 of 526,566 pasted channel values on coco128's objects).
//  - At most 32 side mosaics per sample (upstream loops until 30 objects, which can take thousands of
//    mosaics when few images have polygons).
//  - Side mosaics ignore the boxes of images without polygons (kestrel keeps polygons only for images
//    where every row has one); upstream mixes them up, its box and polygon lists then misalign.
//  - Pasted objects also get their polygon (scaled), so a sample keeps one polygon per box.
//  - All draws come from the sample's own generator (random_unit/random_below on the MT19937 stream),
//    so the same seed gives the same sample, but not upstream's numbers.
#pragma once
#include <cstddef>
#include <functional>
#include <random>
#include <vector>

#include <opencv2/core.hpp>

#include "kestrel/data/banded_warp.h"
#include "kestrel/data/sample.h"

namespace kestrel::data {

// One cut-out: the object's pixels and outline in its own crop.
struct PasteObject {
  float cls = 0;
  cv::Mat image;    // CV_8UC3, the source's pixels inside the outline, 0 outside
  cv::Mat mask;     // CV_8U, same size: 255 inside the outline (filled polygon), 0 outside
  Polygon polygon;  // the outline in the crop's pixels
};

// Upstream sample_segments: round(probability * n) distinct objects of `canvas` (which must have one
// polygon per box; none without polygons) in random.sample order; those whose truncated, clipped box
// is empty are skipped.
std::vector<PasteObject> cut_objects(const Sample& canvas, double probability, std::mt19937& rng);

// The same from a canvas that is not materialised: `labels` (boxes and polygons, image ignored) of a
// canvas of `size` whose pixels `paint` fills for any rectangle (banded_warp.h's contract); only the
// crops of the objects cut are painted.
std::vector<PasteObject> cut_objects(const Sample& labels, cv::Size size, const InputPainter& paint,
                                     double probability, std::mt19937& rng);

// The objects for one paste-in: side 4-mosaic canvases of img_size tiles (load(i) gives image i of
// n_images, resized so that its long side is img_size, as for the mosaic) until `wanted` objects,
// at most `max_mosaics` canvases, none when the first canvas has none. Per canvas: its centre, then
// four random images, then cut_objects(canvas, 0.5) (the canvas painted only where objects are cut).
// weighted_draw (--image-weights): the three images after the first come from it (draw_partner).
std::vector<PasteObject> collect_paste_objects(const std::function<Sample(size_t)>& load, size_t n_images,
                                               int img_size, std::mt19937& rng,
                                               const std::vector<int64_t>* weighted_draw = nullptr, size_t wanted = 30,
                                               int max_mosaics = 32);

// Whether a paste box is usable: more than 20 px on each side and under 30% of every box of `sample`
// covered by it.
bool paste_box_free(const Sample& sample, const cv::Rect& box);

// Scales `object` to fit `box` (aspect kept, top-left aligned) and pastes its masked pixels, adding its
// box (the scaled crop) and polygon, unless it would be 10 px or less on a side or its scaled mask
// 20 px or less. Does not check paste_box_free. Returns whether it pasted.
bool paste_object(Sample& sample, const PasteObject& object, const cv::Rect& box);

// Upstream pastein with `objects`; a no-op (no draws) without objects. `sample.image` is CV_8UC3.
void paste_in(Sample& sample, const std::vector<PasteObject>& objects, std::mt19937& rng);

}  // namespace kestrel::data
