// The anchor-based detection head of YOLOv3/v5 (Detect) and YOLOv7 (IDetect: Detect with learned
// implicit offsets before and scales after each output conv, and an anchor_grid buffer; IAuxDetect, the
// P6 models' training head: IDetect on the nl "lead" feature maps plus a plain 1x1 output conv per level
// ("m2") on nl auxiliary feature maps, whose predictions only the training loss reads).
#pragma once
#include <vector>

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>

#include "kestrel/models/layer.h"

namespace kestrel::models {

class Detect : public Layer {
 public:
  // anchors: per level, [w0, h0, w1, h1, ...] in pixels; ch: input channels per level (lead levels, then
  // as many auxiliary ones when `aux`, which needs `implicit`).
  Detect(int64_t nc, const std::vector<std::vector<double>>& anchors, const std::vector<int64_t>& ch, bool implicit,
         bool aux = false);

  at::Tensor forward(const at::Tensor& x) override;  // not used: the head takes one input per level
  // xs[i] [b, ch_i, ny_i, nx_i] -> raw predictions [b, na, ny_i, nx_i, no] (no = nc + 5), as in training.
  // An aux head takes 2 nl maps; in training mode it returns the nl lead levels and then the nl auxiliary
  // ones (upstream's order), in eval mode only the lead levels (the auxiliary convs are not run).
  std::vector<at::Tensor> forward_levels(const std::vector<at::Tensor>& xs);
  // Raw levels -> [b, sum(na * ny_i * nx_i), no]: box centre x, y and w, h in input pixels, then
  // objectness and class probabilities (sigmoid). xy = (2 sigmoid - 0.5 + cell) * stride, wh = (2 sigmoid)^2 * anchor.
  // Only the first nl levels are decoded (an aux head's auxiliary levels are for the loss).
  at::Tensor decode(const std::vector<at::Tensor>& levels) const;

  // Called once by the model after probing strides: orders anchors like the strides, converts them to
  // grid units and sets the output-bias priors (objectness ~8 objects per 640 image, class ~0.6/nc, whose
  // formula is YOLOv7's for a YOLOv7-family model: models::is_yolov7_family; an implicit head is one).
  void initialize(const std::vector<double>& strides, bool yolov7_family = false);
  // AutoAnchor: replaces the anchors with `pixels` [nl, na, 2] (input pixels, level order), re-ordered
  // like the strides if their areas disagree (check_anchor_order) and stored in grid units.
  void set_anchors(const at::Tensor& pixels);
  at::Tensor anchor_pixels() const;  // [nl, na, 2] float on the CPU: anchors() x stride (after initialize)
  void fuse() override;  // folds the implicit layers into the output convs

  // initialize found the config's anchors in reverse stride order and flipped them (upstream's
  // check_anchor_order: "AutoAnchor: Reversing anchor order").
  bool reversed_anchor_order() const { return reversed_anchor_order_; }
  bool implicit() const { return implicit_; }
  bool aux() const { return !m2_.empty(); }  // IAuxDetect
  int64_t nc() const { return nc_; }
  int64_t num_outputs() const { return no_; }    // nc + 5
  int64_t num_levels() const { return nl_; }
  int64_t num_anchors() const { return na_; }    // per level
  const std::vector<double>& strides() const { return strides_; }
  const at::Tensor& anchors() const { return anchors_; }  // [nl, na, 2] in grid units (after initialize)
  const std::vector<torch::nn::Conv2d>& output_convs() const { return m_; }  // for exporters

 private:
  int64_t nc_, no_, nl_, na_;
  bool implicit_;
  bool reversed_anchor_order_ = false;
  bool yolov7_ = false;  // YOLOv7's xy decode order and anchor-order check (initialize's yolov7_family)
  std::vector<double> strides_;
  at::Tensor anchors_;      // buffer "anchors"
  at::Tensor anchor_grid_;  // buffer "anchor_grid" [nl, 1, na, 1, 1, 2], pixels (YOLOv7's heads only)
  std::vector<torch::nn::Conv2d> m_;      // ModuleList "m": 1x1 conv to na * no channels per level
  std::vector<torch::nn::Conv2d> m2_;     // ModuleList "m2" (IAuxDetect): the same on the auxiliary maps
  std::vector<at::Tensor> implicit_add_;  // "ia.i.implicit" [1, ch_i, 1, 1], ~N(0, 0.02)
  std::vector<at::Tensor> implicit_mul_;  // "im.i.implicit" [1, na * no, 1, 1], ~N(1, 0.02)
};

}  // namespace kestrel::models
