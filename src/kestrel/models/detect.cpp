#include "kestrel/models/detect.h"

#include <cmath>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/utils.h>

#include "kestrel/core/error.h"
#include "kestrel/models/conv_ops.h"
#include "kestrel/models/parameter_budget.h"

namespace kestrel::models {
namespace {

// ImplicitA / ImplicitM of YOLOR: a module holding one parameter named "implicit".
class Implicit : public torch::nn::Module {
 public:
  Implicit(int64_t channels, double mean) {
    charge_parameters("implicit", {channels});
    implicit = register_parameter("implicit", at::empty({1, channels, 1, 1}).normal_(mean, 0.02));
  }
  at::Tensor implicit;
};

// Anchor order must follow stride order (small anchors on the fine level), as upstream's
// check_anchor_order, on anchors in pixels [nl, na, 2]. YOLOv5 compares the mean anchor area of the last
// and first level, and keeps equal ones; YOLOv7 the area of the very last anchor and the very first, and
// reverses when the signs differ, equal areas (sign 0) included.
bool anchors_in_reverse_stride_order(const at::Tensor& anchors, const std::vector<double>& strides, bool yolov7) {
  const auto sign = [](double v) { return (v > 0) - (v < 0); };
  const double ds = strides.back() - strides.front();
  if (yolov7) {
    const at::Tensor area = anchors.prod(-1).reshape(-1);  // [nl * na]
    return sign((area[-1] - area[0]).item<double>()) != sign(ds);
  }
  const at::Tensor area = anchors.prod(-1).mean(-1);  // [nl]
  const double da = (area[-1] - area[0]).item<double>();
  return da != 0 && sign(da) != sign(ds);
}

}  // namespace

Detect::Detect(int64_t nc, const std::vector<std::vector<double>>& anchors, const std::vector<int64_t>& ch, bool implicit,
               bool aux)
    : nc_(nc), no_(nc + 5), nl_(static_cast<int64_t>(anchors.size())), implicit_(implicit) {
  if (anchors.empty()) fail("the detection head needs at least one anchor level");
  if (aux && !implicit) fail("an auxiliary head is an IDetect with auxiliary outputs (IAuxDetect)");
  if (static_cast<int64_t>(ch.size()) != (aux ? 2 : 1) * nl_)
    fail("the detection head reads ", ch.size(), " feature maps but has ", nl_, " anchor levels",
         aux ? " (IAuxDetect reads a lead and an auxiliary map per level)" : "");
  na_ = static_cast<int64_t>(anchors[0].size() / 2);
  std::vector<double> flat;
  for (const auto& level : anchors) {
    if (level.size() % 2 != 0 || static_cast<int64_t>(level.size() / 2) != na_ || na_ == 0)
      fail("every anchor level needs the same number of (w, h) pairs");
    flat.insert(flat.end(), level.begin(), level.end());
  }
  at::Tensor a = at::tensor(flat, at::kFloat).view({nl_, na_, 2});
  anchors_ = register_buffer("anchors", a);
  if (implicit_) anchor_grid_ = register_buffer("anchor_grid", a.clone().view({nl_, 1, na_, 1, 1, 2}));

  auto m = register_module("m", torch::nn::ModuleList());
  torch::nn::ModuleList ia{nullptr}, im{nullptr};
  if (implicit_) {
    ia = register_module("ia", torch::nn::ModuleList());
    im = register_module("im", torch::nn::ModuleList());
  }
  for (int64_t i = 0; i < nl_; ++i) {
    m_.push_back(make_conv2d(torch::nn::Conv2dOptions(ch[i], no_ * na_, 1)));
    m->push_back(m_.back());
    if (implicit_) {
      auto add = std::make_shared<Implicit>(ch[i], 0.0);
      auto mul = std::make_shared<Implicit>(no_ * na_, 1.0);
      ia->push_back(add);
      im->push_back(mul);
      implicit_add_.push_back(add->implicit);
      implicit_mul_.push_back(mul->implicit);
    }
  }
  if (aux) {
    auto m2 = register_module("m2", torch::nn::ModuleList());
    for (int64_t i = 0; i < nl_; ++i) {
      m2_.push_back(make_conv2d(torch::nn::Conv2dOptions(ch[nl_ + i], no_ * na_, 1)));
      m2->push_back(m2_.back());
    }
  }
}

at::Tensor Detect::forward(const at::Tensor& x) { fail("Detect reads one feature map per level; use forward_levels"); }

std::vector<at::Tensor> Detect::forward_levels(const std::vector<at::Tensor>& xs) {
  const int64_t inputs = (aux() ? 2 : 1) * nl_;
  if (static_cast<int64_t>(xs.size()) != inputs) fail("Detect: expected ", inputs, " feature maps, got ", xs.size());
  // [b, na * no, ny, nx] -> [b, na, ny, nx, no]
  const auto to_level = [&](const at::Tensor& x) {
    return x.view({x.size(0), na_, no_, x.size(2), x.size(3)}).permute({0, 1, 3, 4, 2}).contiguous();
  };
  std::vector<at::Tensor> out;
  out.reserve(xs.size());
  for (int64_t i = 0; i < nl_; ++i) {
    at::Tensor x = xs[i];
    if (!implicit_add_.empty()) x = x + implicit_add_[i];
    x = run_conv(*m_[i], x);
    if (!implicit_mul_.empty()) x = x * implicit_mul_[i];
    out.push_back(to_level(x));
  }
  if (aux() && is_training())
    for (int64_t i = 0; i < nl_; ++i) out.push_back(to_level(run_conv(*m2_[i], xs[nl_ + i])));
  return out;
}

at::Tensor Detect::decode(const std::vector<at::Tensor>& levels) const {
  if (strides_.empty()) fail("Detect::decode before initialize()");
  if (static_cast<int64_t>(levels.size()) < nl_) fail("Detect::decode: expected ", nl_, " levels, got ", levels.size());
  std::vector<at::Tensor> out;
  for (int64_t i = 0; i < nl_; ++i) {
    const at::Tensor& p = levels[i];  // [b, na, ny, nx, no]
    const int64_t b = p.size(0), ny = p.size(2), nx = p.size(3);
    auto opts = p.options();
    at::Tensor anchor_px = (anchors_[i] * strides_[i]).to(opts).view({1, na_, 1, 1, 2});  // pixels
    at::Tensor y = p.sigmoid();
    // The cell offset in each upstream's order, which rounds differently where sigmoid < 0.25: YOLOv5
    // (2 s + (cell - 0.5)) * stride, its grid in the model's dtype; YOLOv7 (2 s - 0.5 + cell) * stride,
    // its grid float32 (in fp16 the sum is float32, stored back as half).
    const auto cells = [&](const at::TensorOptions& o) {
      auto yx = at::meshgrid({at::arange(ny, o), at::arange(nx, o)}, "ij");
      return at::stack({yx[1], yx[0]}, 2).view({1, 1, ny, nx, 2});
    };
    at::Tensor xy = yolov7_
                        ? (((y.narrow(4, 0, 2) * 2 - 0.5).to(at::kFloat) + cells(opts.dtype(at::kFloat))) * strides_[i])
                              .to(p.scalar_type())
                        : (y.narrow(4, 0, 2) * 2 + (cells(opts) - 0.5)) * strides_[i];
    at::Tensor wh = (y.narrow(4, 2, 2) * 2).pow(2) * anchor_px;
    out.push_back(at::cat({xy, wh, y.narrow(4, 4, no_ - 4)}, 4).view({b, na_ * ny * nx, no_}));
  }
  return at::cat(out, 1);
}

void Detect::initialize(const std::vector<double>& strides, bool yolov7_family) {
  if (static_cast<int64_t>(strides.size()) != nl_) fail("Detect: ", strides.size(), " strides for ", nl_, " levels");
  strides_ = strides;
  yolov7_ = yolov7_family || implicit_;
  torch::NoGradGuard no_grad;
  reversed_anchor_order_ = anchors_in_reverse_stride_order(anchors_, strides_, yolov7_);
  if (reversed_anchor_order_) {
    anchors_.copy_(anchors_.flip(0));
    if (anchor_grid_.defined()) anchor_grid_.copy_(anchor_grid_.flip(0));
  }
  // YOLOv7's plain Detect registers anchor_grid too (pixels, in stride order), which YOLOv5's does not: its
  // state dict, `kestrel models`' counts and exported state dicts have it (load_state_dict fills it from the
  // anchors for files written before).
  if (yolov7_family && !implicit_ && !anchor_grid_.defined())
    anchor_grid_ = register_buffer("anchor_grid", anchors_.clone().view({nl_, 1, na_, 1, 1, 2}));
  for (int64_t i = 0; i < nl_; ++i) {
    anchors_[i].div_(strides_[i]);
    // bias [na * no] viewed [na, no]: objectness prior ~8 objects per 640x640 image at this stride,
    // class prior 0.6 / nc (YOLOv7's models/yolo.py writes nc - 0.99 for all its heads, plain Detect too, where
    // YOLOv5 writes nc - 0.99999).
    // An aux head's auxiliary convs get the same priors (upstream _initialize_aux_biases).
    for (auto* conv : {&m_[i], aux() ? &m2_[i] : nullptr}) {
      if (conv == nullptr) continue;
      at::Tensor bias = (*conv)->bias.view({na_, no_});
      bias.select(1, 4).add_(std::log(8.0 / std::pow(640.0 / strides_[i], 2)));
      bias.narrow(1, 5, nc_).add_(std::log(0.6 / (static_cast<double>(nc_) - (yolov7_family || implicit_ ? 0.99 : 0.99999))));
    }
  }
}

void Detect::set_anchors(const at::Tensor& pixels) {
  if (strides_.empty()) fail("Detect::set_anchors before initialize()");
  if (pixels.dim() != 3 || pixels.size(0) != nl_ || pixels.size(1) != na_ || pixels.size(2) != 2)
    fail("Detect::set_anchors: expected anchors [", nl_, ", ", na_, ", 2], got ", pixels.sizes());
  torch::NoGradGuard no_grad;
  at::Tensor p = pixels.detach().to(at::kCPU, at::kFloat).contiguous();
  if (anchors_in_reverse_stride_order(p, strides_, yolov7_)) p = p.flip(0);
  const at::Tensor stride = at::tensor(strides_, at::kFloat).view({nl_, 1, 1});
  anchors_.copy_(p / stride);  // copy_ keeps the buffer's device and dtype (and every alias of it)
  if (anchor_grid_.defined()) anchor_grid_.copy_(p.view({nl_, 1, na_, 1, 1, 2}));
}

at::Tensor Detect::anchor_pixels() const {
  if (strides_.empty()) fail("Detect::anchor_pixels before initialize()");
  return anchors_.detach().to(at::kCPU, at::kFloat) * at::tensor(strides_, at::kFloat).view({nl_, 1, 1});
}

void Detect::fuse() {
  if (implicit_add_.empty()) return;
  torch::NoGradGuard no_grad;
  for (int64_t i = 0; i < nl_; ++i) {
    auto& conv = *m_[i];
    const int64_t c_out = conv.weight.size(0), c_in = conv.weight.size(1);
    // conv(x + a) * m = (W x + W a + b) * m  ->  W' = W * m, b' = (b + W a) * m
    at::Tensor wa = at::matmul(conv.weight.view({c_out, c_in}), implicit_add_[i].view({c_in, 1})).view({c_out});
    at::Tensor scale = implicit_mul_[i].view({c_out});
    conv.bias.set_data((conv.bias + wa) * scale);
    conv.weight.set_data(conv.weight * scale.view({c_out, 1, 1, 1}));
  }
  implicit_add_.clear();
  implicit_mul_.clear();
  unregister_module("ia");
  unregister_module("im");
}

}  // namespace kestrel::models
