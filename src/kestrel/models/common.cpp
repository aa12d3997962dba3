#include "kestrel/models/common.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <regex>

#include <ATen/ATen.h>

#include "kestrel/core/error.h"
#include "kestrel/core/python_repr.h"
#include "kestrel/models/batch_norm_silu.h"
#include "kestrel/models/conv_ops.h"

namespace kestrel::models {

// ---- Activation ------------------------------------------------------------------------------

at::Tensor Activation::operator()(const at::Tensor& x) const {
  switch (kind) {
    case Kind::SiLU: return at::silu(x);
    case Kind::LeakyReLU: return at::leaky_relu(x, slope);
    case Kind::ReLU: return at::relu(x);
    case Kind::Hardswish: return at::hardswish(x);
    case Kind::Sigmoid: return at::sigmoid(x);
    case Kind::Identity: return x;
  }
  return x;
}

std::string Activation::repr() const {
  const std::string flag = inplace ? "inplace=True" : "";
  switch (kind) {
    case Kind::SiLU: return "SiLU(" + flag + ")";
    case Kind::LeakyReLU: return "LeakyReLU(negative_slope=" + python_float_repr(slope) + (inplace ? ", " + flag : "") + ")";
    case Kind::ReLU: return "ReLU(" + flag + ")";
    case Kind::Hardswish: return "Hardswish()";  // torch shows no inplace for it
    case Kind::Sigmoid: return "Sigmoid()";
    case Kind::Identity: return "Identity()";
  }
  return "?";
}

namespace {

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

// A torch.nn activation as a model YAML writes it (upstream eval()s it): nn.Name(arguments), each positional
// or by keyword, as the torch class takes them: LeakyReLU(negative_slope=0.01, inplace=False), SiLU, ReLU and
// Hardswish (inplace=False), Sigmoid() without any; Identity ignores its arguments. inplace changes nothing here.
Activation Activation::parse(const std::string& text) {
  // std::regex recurses once per character: a bound keeps a crafted config from overflowing the stack
  constexpr size_t kMaxLength = 256;
  if (text.size() > kMaxLength)
    fail("activation '", text.substr(0, 40), "...' is ", text.size(), " characters long; at most ", kMaxLength);
  static const std::regex call(R"(^\s*(torch\.nn\.|nn\.)?(\w+)\s*\((.*)\)\s*$)");
  std::smatch m;
  if (!std::regex_match(text, m, call)) fail("activation '", text, "' is not of the form nn.Name(...)");
  const std::string name = m[2];
  // Upstream eval()s the text where `nn` and `torch` are names: without the prefix its `activation:` key stops
  // with a NameError, and a layer's argument silently becomes nn.Identity (no activation). Refused here.
  if (!m[1].matched)
    fail("activation '", text, "' lacks the nn. prefix: upstream's eval cannot read it (a layer then gets no activation, "
         "nn.Identity, the activation: key a NameError); write nn.", name, "(...), or None for no activation");
  Activation a;
  std::vector<std::string> parameters{"inplace"};
  if (name == "SiLU") a.kind = Kind::SiLU;
  else if (name == "LeakyReLU") {
    a.kind = Kind::LeakyReLU;
    parameters = {"negative_slope", "inplace"};
  } else if (name == "ReLU") a.kind = Kind::ReLU;
  else if (name == "Hardswish") a.kind = Kind::Hardswish;
  else if (name == "Sigmoid") {
    a.kind = Kind::Sigmoid;
    parameters.clear();
  } else if (name == "Identity") {
    a.kind = Kind::Identity;
    return a;
  } else
    fail("unsupported activation '", text, "' (kestrel has nn.SiLU, nn.LeakyReLU, nn.ReLU, nn.Hardswish, nn.Sigmoid, nn.Identity)");
  std::vector<std::string> arguments;
  std::string rest = m[3];
  for (size_t comma; (comma = rest.find(',')) != std::string::npos; rest = rest.substr(comma + 1))
    arguments.push_back(trimmed(rest.substr(0, comma)));
  arguments.push_back(trimmed(rest));
  if (arguments.back().empty()) arguments.pop_back();  // "()" has none; Python allows a trailing comma
  static const std::regex keyword(R"(^(\w+)\s*=\s*(.*)$)");
  std::vector<std::string> given;
  bool saw_keyword = false;
  for (size_t i = 0; i < arguments.size(); ++i) {
    std::string key, value = arguments[i];
    if (std::smatch k; std::regex_match(arguments[i], k, keyword)) {
      key = k[1];
      value = trimmed(k[2]);
      saw_keyword = true;
    } else if (saw_keyword) {
      fail("activation '", text, "': a positional argument follows a keyword argument");
    } else if (i < parameters.size()) {
      key = parameters[i];
    } else {
      fail("activation '", text, "': nn.", name, " takes ", parameters.size(), " argument", parameters.size() == 1 ? "" : "s");
    }
    if (std::find(parameters.begin(), parameters.end(), key) == parameters.end())
      fail("activation '", text, "': nn.", name, " has no argument '", key, "'");
    if (std::find(given.begin(), given.end(), key) != given.end())
      fail("activation '", text, "': argument '", key, "' given twice");
    given.push_back(key);
    if (key == "inplace" && value != "True" && value != "False")
      fail("activation '", text, "': inplace must be True or False, got '", value, "'");
    if (key == "inplace") a.inplace = value == "True";
    if (key == "negative_slope") {
      char* end = nullptr;
      a.slope = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !std::isfinite(a.slope))
        fail("activation '", text, "': negative_slope must be a finite number, got '", value, "'");
    }
  }
  return a;
}

// ---- Conv ------------------------------------------------------------------------------------

Conv::Conv(const ConvOptions& o) : act_(o.act) {
  // At most 64, as the kernel (conv_ops' bound): a larger padding only adds zeros, and a typo of 1000
  // would allocate gigabytes before the stride check could say so.
  if (o.p < -1 || o.p > 64) fail("convolution: padding must be in [0, 64] (or None: automatic), got ", o.p);
  // v7.0's autopad: the dilated kernel's extent d(k-1)+1, halved (rounded down): 1 for an even k = 2.
  const int64_t pad = o.p >= 0 ? o.p : (o.d * (o.k - 1) + 1) / 2;
  conv = register_module("conv", make_conv2d(torch::nn::Conv2dOptions(o.c1, o.c2, o.k)
                                                       .stride(o.s).padding(pad).groups(o.g).dilation(o.d).bias(false)));
  bn = register_module("bn", make_batch_norm(o.c2));
}

at::Tensor Conv::forward(const at::Tensor& x) {
  at::Tensor y = run_conv(*conv, x);
  // Training statistics only (eval mode uses the running ones), and not across ranks (SyncBN).
  if (fused_bn_silu_ && bn && act_.kind == Activation::Kind::SiLU && bn->is_training() && !bn->synchronised() &&
      batch_norm_silu_supports(y))
    return batch_norm_silu(*bn, y);
  return act_(bn ? bn->forward(y) : y);
}

int set_fused_batch_norm_silu(torch::nn::Module& module, bool on) {
  int n = 0;
  for (const auto& m : module.modules(/*include_self=*/true))
    if (auto* conv = dynamic_cast<Conv*>(m.get())) {
      conv->set_fused_batch_norm_silu(on);
      n += conv->has_batch_norm() && conv->activation().kind == Activation::Kind::SiLU;
    }
  return n;
}

void Conv::fuse() {
  if (!bn) return;
  conv = replace_module("conv", fold_batch_norm(*conv, *bn));
  unregister_module("bn");
  bn = nullptr;
}

// ---- Bottleneck, C3 --------------------------------------------------------------------------

Bottleneck::Bottleneck(int64_t c1, int64_t c2, bool shortcut, int64_t g, double e, Activation act)
    : add_(shortcut && c1 == c2) {
  const auto c_ = static_cast<int64_t>(c2 * e);
  cv1 = register_module("cv1", std::make_shared<Conv>(ConvOptions{c1, c_, 1, 1, -1, 1, 1, act}));
  cv2 = register_module("cv2", std::make_shared<Conv>(ConvOptions{c_, c2, 3, 1, -1, g, 1, act}));
}

at::Tensor Bottleneck::forward(const at::Tensor& x) {
  at::Tensor y = cv2->forward(cv1->forward(x));
  return add_ ? x + y : y;
}

void Bottleneck::fuse() {
  cv1->fuse();
  cv2->fuse();
}

C3Convs::C3Convs(torch::nn::Module& owner, int64_t c1, int64_t c2, int64_t c_, const Activation& act)
    : cv1(owner.register_module("cv1", std::make_shared<Conv>(ConvOptions{c1, c_, 1, 1, -1, 1, 1, act}))),
      cv2(owner.register_module("cv2", std::make_shared<Conv>(ConvOptions{c1, c_, 1, 1, -1, 1, 1, act}))),
      cv3(owner.register_module("cv3", std::make_shared<Conv>(ConvOptions{2 * c_, c2, 1, 1, -1, 1, 1, act}))) {}

void C3Convs::fuse() const {
  for (auto* c : {cv1.get(), cv2.get(), cv3.get()}) c->fuse();
}

C3::C3(int64_t c1, int64_t c2, int64_t n, bool shortcut, int64_t g, double e, Activation act)
    : convs_(*this, c1, c2, static_cast<int64_t>(c2 * e), act) {
  const auto hidden = static_cast<int64_t>(c2 * e);
  auto list = register_module("m", torch::nn::ModuleList());
  for (int64_t i = 0; i < n; ++i) {
    m_.push_back(std::make_shared<Bottleneck>(hidden, hidden, shortcut, g, 1.0, act));
    list->push_back(m_.back());
  }
}

at::Tensor C3::forward(const at::Tensor& x) {
  at::Tensor y = convs_.cv1->forward(x);
  for (auto& b : m_) y = b->forward(y);
  return convs_.merge(y, x);
}

void C3::fuse() {
  convs_.fuse();
  for (auto& b : m_) b->fuse();
}

// ---- SPP, SPPF, Focus ------------------------------------------------------------------------

SPP::SPP(int64_t c1, int64_t c2, std::vector<int64_t> ks, Activation act) : ks_(std::move(ks)) {
  const int64_t c_ = c1 / 2;
  cv1 = register_module("cv1", std::make_shared<Conv>(ConvOptions{c1, c_, 1, 1, -1, 1, 1, act}));
  cv2 = register_module("cv2", std::make_shared<Conv>(
                                   ConvOptions{c_ * static_cast<int64_t>(ks_.size() + 1), c2, 1, 1, -1, 1, 1, act}));
}

at::Tensor SPP::forward(const at::Tensor& x) {
  at::Tensor y = cv1->forward(x);
  std::vector<at::Tensor> parts{y};
  for (int64_t k : ks_) parts.push_back(at::max_pool2d(y, {k, k}, {1, 1}, {k / 2, k / 2}));
  return cv2->forward(at::cat(parts, 1));
}

void SPP::fuse() {
  cv1->fuse();
  cv2->fuse();
}

SPPF::SPPF(int64_t c1, int64_t c2, int64_t k, Activation act) : k_(k) {
  const int64_t c_ = c1 / 2;
  cv1 = register_module("cv1", std::make_shared<Conv>(ConvOptions{c1, c_, 1, 1, -1, 1, 1, act}));
  cv2 = register_module("cv2", std::make_shared<Conv>(ConvOptions{c_ * 4, c2, 1, 1, -1, 1, 1, act}));
}

at::Tensor SPPF::forward(const at::Tensor& x) {
  at::Tensor y0 = cv1->forward(x);
  auto pool = [&](const at::Tensor& t) { return at::max_pool2d(t, {k_, k_}, {1, 1}, {k_ / 2, k_ / 2}); };
  at::Tensor y1 = pool(y0), y2 = pool(y1), y3 = pool(y2);
  return cv2->forward(at::cat({y0, y1, y2, y3}, 1));
}

void SPPF::fuse() {
  cv1->fuse();
  cv2->fuse();
}

Focus::Focus(ConvOptions o) {
  o.c1 *= 4;
  conv = register_module("conv", std::make_shared<Conv>(o));
}

at::Tensor space_to_depth(const at::Tensor& x) {
  using at::indexing::Slice;
  return at::cat({x.index({Slice(), Slice(), Slice(0, {}, 2), Slice(0, {}, 2)}),
                  x.index({Slice(), Slice(), Slice(1, {}, 2), Slice(0, {}, 2)}),
                  x.index({Slice(), Slice(), Slice(0, {}, 2), Slice(1, {}, 2)}),
                  x.index({Slice(), Slice(), Slice(1, {}, 2), Slice(1, {}, 2)})},
                 1);
}

at::Tensor Focus::forward(const at::Tensor& x) { return conv->forward(space_to_depth(x)); }

void Focus::fuse() { conv->fuse(); }

// ---- parameter-free layers -------------------------------------------------------------------

at::Tensor Concat::forward_inputs(const std::vector<at::Tensor>& xs) { return at::cat(xs, dim_); }

at::Tensor Upsample::forward(const at::Tensor& x) {
  return at::upsample_nearest2d(x, c10::nullopt, std::vector<double>{scale_, scale_});
}

at::Tensor MaxPool::forward(const at::Tensor& x) { return at::max_pool2d(x, {k_, k_}, {s_, s_}, {p_, p_}); }

at::Tensor ZeroPad::forward(const at::Tensor& x) { return at::constant_pad_nd(x, pad_, 0); }

Repeat::Repeat(const std::vector<std::shared_ptr<Layer>>& layers) : layers_(layers) {
  for (size_t i = 0; i < layers_.size(); ++i) register_module(std::to_string(i), layers_[i]);
}

at::Tensor Repeat::forward(const at::Tensor& x) {
  at::Tensor y = x;
  for (auto& layer : layers_) y = layer->forward(y);
  return y;
}

void Repeat::fuse() {
  for (auto& layer : layers_) layer->fuse();
}

}  // namespace kestrel::models
