// build_model(): the YAML rows -> modules, following upstream parse_model's channel and repeat rules.
#include "kestrel/models/model_builder.h"

#include <cfenv>
#include <cmath>
#include <functional>
#include <iomanip>
#include <map>
#include <numeric>
#include <optional>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "kestrel/core/error.h"
#include "kestrel/core/python_repr.h"
#include "kestrel/models/common.h"
#include "kestrel/models/csp_blocks.h"
#include "kestrel/models/ghost_blocks.h"
#include "kestrel/models/parameter_budget.h"
#include "kestrel/models/transformer_blocks.h"
#include "kestrel/models/yolo_model.h"
#include "kestrel/models/yolov7_blocks.h"

namespace kestrel::models {
namespace {

// Python's round(): halves to even (nearbyint under the default rounding mode).
int round_half_even(double x) { return static_cast<int>(std::nearbyint(x)); }
// math.ceil(x / divisor) * divisor, saturated at 2^62 (the callers bound widths far below): a width of 9e18
// times a width_multiple would overflow the integer conversion (undefined behaviour).
int64_t make_divisible(double x, int64_t divisor) {
  const double steps = std::ceil(x / divisor);
  constexpr double kSaturate = 4611686018427387904.0;  // 2^62
  return steps * divisor >= kSaturate ? static_cast<int64_t>(kSaturate) : static_cast<int64_t>(steps) * divisor;
}

// A scalar as Python prints it inside upstream's argument list (after parse_model's eval): None, True and
// False, numbers as written, an activation as torch's repr (nn.LeakyReLU(0.1) -> LeakyReLU(negative_slope=0.1)),
// other text quoted ('nearest').
std::string python_scalar(const std::string& text) {
  if (text == "True" || text == "true") return "True";
  if (text == "False" || text == "false") return "False";
  if (text == "None") return text;
  // a number as Python prints it after eval: ints as ints (+1 -> 1), floats as repr (0.50 -> 0.5, 2. -> 2.0, 1e-3 -> 0.001)
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (!text.empty() && *end == '\0' && std::isfinite(value)) {
    const bool integer = text.find_first_not_of("+-0123456789") == std::string::npos;
    return integer && std::abs(value) < 9e15 ? std::to_string(static_cast<int64_t>(value)) : python_float_repr(value);
  }
  if (text.find('(') != std::string::npos) {
    try {
      return Activation::parse(text).repr();
    } catch (const Error&) {  // not one kestrel builds: the builder says so where it reads it
    }
  }
  return python_str_repr(text);
}

// Stops after about `limit` characters ("..."): YAML aliases can make a short file's value gigabytes long.
// `python`: scalars as python_scalar (the layer table), else as written (messages).
void render_into(const YAML::Node& node, std::string& out, size_t limit, bool python) {
  if (out.size() > limit) return;
  if (node.IsSequence()) {
    out += "[";
    for (size_t i = 0; i < node.size() && out.size() <= limit; ++i) {
      if (i) out += ", ";
      render_into(node[i], out, limit, python);
    }
    out += "]";
  } else if (node.IsNull()) {
    out += "None";
  } else {
    const std::string text = node.Scalar().substr(0, limit);
    out += python ? python_scalar(text) : text;
  }
}

std::string render(const YAML::Node& node, bool python = false) {
  constexpr size_t kLimit = 200;
  std::string out;
  render_into(node, out, kLimit, python);
  if (out.size() > kLimit) out = out.substr(0, kLimit) + "...";
  return out;
}

// Reads one layer's argument list with upstream's names (nc, anchors, None, True/False).
class Args {
 public:
  Args(const LayerSpec& spec, int index, const ModelConfig& cfg) : spec_(spec), index_(index), cfg_(cfg) {}

  std::string where() const { return cat(cfg_.source, ":", spec_.line, ": layer ", index_, " (", spec_.module, ")"); }
  size_t size() const { return spec_.args.size(); }
  bool has(size_t i) const { return i < size() && !is_none(i); }
  bool is_none(size_t i) const {
    const YAML::Node n = spec_.args[i];
    return n.IsNull() || (n.IsScalar() && n.Scalar() == "None");
  }
  void at_most(size_t n, const char* signature) const {
    if (size() > n) fail(where(), ": takes at most ", n, " arguments ", signature, ", got ", size());
  }
  void at_least(size_t n, const char* signature) const {
    if (size() < n) fail(where(), ": needs at least ", n, " arguments ", signature, ", got ", size());
  }
  bool is_string(size_t i) const {
    const YAML::Node n = spec_.args[i];
    if (!n.IsScalar()) return false;
    const std::string& s = n.Scalar();
    return !s.empty() && !std::isdigit(static_cast<unsigned char>(s[0])) && s[0] != '-' && s != "True" &&
           s != "False" && s != "true" && s != "false" && s != "nc" && s != "None";
  }
  // An explicit None means the default only where upstream's parameter defaults to None (a Conv's padding:
  // autopad; MaxPool2d's stride: the kernel): integer_or_none. Elsewhere the module fails on it upstream
  // (nn.Conv2d(stride=None), Upsample without size or scale), so it is an error here too.
  void reject_none(size_t i) const {
    if (i < size() && is_none(i)) fail(where(), ": argument ", i + 1, " is None, which this module does not take there");
  }
  int64_t integer(size_t i, int64_t fallback) const {
    reject_none(i);
    return integer_or_none(i, fallback);
  }
  int64_t integer_or_none(size_t i, int64_t fallback) const {
    if (!has(i)) return fallback;
    const YAML::Node n = spec_.args[i];
    if (n.IsScalar() && n.Scalar() == "nc") return cfg_.nc;
    try {
      return n.as<int64_t>();
    } catch (const YAML::Exception&) {
      fail(where(), ": argument ", i + 1, " must be an integer, got '", render(n), "'");
    }
  }
  // A kernel size: an integer, or a list of two equal ones (YOLOv7's baseline yolov3.yaml writes [1, 1]).
  int64_t square(size_t i, int64_t fallback) const {
    reject_none(i);
    if (!has(i) || spec_.args[i].IsScalar()) return integer(i, fallback);
    const std::vector<int64_t> hw = int_list(i, {});
    if (hw.size() != 2 || hw[0] != hw[1])
      fail(where(), ": argument ", i + 1, " must be an integer or [k, k] (only square kernels), got '", render(spec_.args[i]), "'");
    return hw[0];
  }
  double real(size_t i, double fallback) const {
    reject_none(i);
    if (!has(i)) return fallback;
    try {
      return spec_.args[i].as<double>();
    } catch (const YAML::Exception&) {
      fail(where(), ": argument ", i + 1, " must be a number, got '", render(spec_.args[i]), "'");
    }
  }
  // A width ratio (the hidden channels int(c2 * e)): int(c2 * nan) fails in upstream's Python; here an
  // infinite or enormous ratio would overflow the integer conversion.
  double ratio(size_t i, double fallback) const {
    const double value = real(i, fallback);
    if (!(std::abs(value) <= 1e6))
      fail(where(), ": argument ", i + 1, " must be a finite number of at most 1e6, got '", render(spec_.args[i]), "'");
    return value;
  }
  bool boolean(size_t i, bool fallback) const {  // None is falsy, as in upstream's `shortcut and c1 == c2`
    if (i < size() && is_none(i)) return false;
    if (!has(i)) return fallback;
    const std::string s = spec_.args[i].IsScalar() ? spec_.args[i].Scalar() : "";
    if (s == "True" || s == "true") return true;
    if (s == "False" || s == "false") return false;
    fail(where(), ": argument ", i + 1, " must be True or False, got '", render(spec_.args[i]), "'");
  }
  std::vector<int64_t> int_list(size_t i, std::vector<int64_t> fallback) const {
    reject_none(i);
    if (!has(i)) return fallback;
    const YAML::Node n = spec_.args[i];
    if (n.IsScalar()) return {integer(i, 0)};
    std::vector<int64_t> out;
    try {
      for (const auto& v : n) out.push_back(v.as<int64_t>());
    } catch (const YAML::Exception&) {
      fail(where(), ": argument ", i + 1, " must be a list of integers, got '", render(n), "'");
    }
    return out;
  }
  // True -> the default activation, False -> Identity, "nn.X(...)" -> that activation.
  // None too -> Identity (upstream: `act if isinstance(act, nn.Module) else nn.Identity()`).
  Activation activation(size_t i, const Activation& fallback) const {
    if (i < size() && is_none(i)) return Activation{Activation::Kind::Identity};
    if (!has(i)) return fallback;
    if (is_string(i)) {
      try {
        return Activation::parse(spec_.args[i].Scalar());
      } catch (const Error& e) {
        fail(where(), ": ", e.what());
      }
    }
    return boolean(i, true) ? fallback : Activation{Activation::Kind::Identity};
  }
  const YAML::Node node(size_t i) const { return spec_.args[i]; }
  std::string rest_from(size_t i) const {
    std::string s;
    for (size_t k = i; k < size(); ++k) s += ", " + render(spec_.args[k], /*python=*/true);
    return s;
  }

 private:
  const LayerSpec& spec_;
  int index_;
  const ModelConfig& cfg_;
};

// The anchors per level when 'anchors' is a number; `where` names the file (or its head row).
int64_t anchors_per_level(const YAML::Node& anchors, const std::string& where) {
  try {
    return anchors.as<int64_t>();
  } catch (const YAML::Exception&) {
    fail(where, ": 'anchors' must be a list of [w, h, ...] lists or an integer, got '", anchors.Scalar(), "'");
  }
}

std::string render_strides(const std::vector<double>& strides) {
  std::string out;
  for (double s : strides) out += (out.empty() ? "" : ", ") + cat(std::setprecision(4), s);
  return out;
}

// Anchors from the config (a list per level, or an int = anchors per level) in pixels.
std::vector<std::vector<double>> read_anchors(const YAML::Node& node, size_t levels, const Args& args) {
  constexpr int64_t kMaxAnchorsPerLevel = 64;  // upstream's configs have 3; a bound keeps a typo from allocating
  std::vector<std::vector<double>> anchors;
  if (node.IsScalar()) {
    // Upstream's placeholder when only a count is given: [0, 1, ..., 2k - 1] per level (AutoAnchor replaces it).
    const int64_t k = anchors_per_level(node, args.where());
    if (k < 1 || k > kMaxAnchorsPerLevel)
      fail(args.where(), ": anchors per level must be in [1, ", kMaxAnchorsPerLevel, "], got ", k);
    std::vector<double> level(static_cast<size_t>(2 * k));
    for (size_t i = 0; i < level.size(); ++i) level[i] = static_cast<double>(i);
    return std::vector<std::vector<double>>(levels, level);
  }
  if (!node.IsSequence()) fail(args.where(), ": 'anchors' must be a list of [w, h, ...] lists or an integer");
  try {
    for (const auto& level : node) {
      std::vector<double> wh;
      for (const auto& v : level) {
        const double x = v.as<double>();
        // a width or height: the loss divides by it and takes its logarithm, in float32 (1e300 is inf there)
        if (!std::isfinite(x) || x <= 0 || x > 1e6)
          fail(args.where(), ": anchor sizes must be pixels in (0, 1e6], got ", x);
        wh.push_back(x);
      }
      if (wh.size() > 2 * kMaxAnchorsPerLevel)
        fail(args.where(), ": at most ", kMaxAnchorsPerLevel, " anchors per level, got ", wh.size() / 2);
      anchors.push_back(wh);
    }
  } catch (const YAML::Exception&) {
    fail(args.where(), ": 'anchors' must be lists of numbers");
  }
  if (anchors.size() != levels)
    fail(args.where(), ": ", anchors.size(), " anchor levels but the head reads ", levels, " feature maps");
  return anchors;
}

struct Built {
  std::shared_ptr<Layer> layer;
  int64_t c2;
  std::string arguments;
};

using Factory = std::function<Built(const Args&, int64_t c1, int64_t c2, int64_t n, const Activation&)>;

// A CspBlock row: [c2, shortcut, g, e], the repeat count passed in (n).
std::pair<Factory, bool> csp_factory(CspSplit split, CspUnit unit, bool shortcut, int64_t groups) {
  return {[=](const Args& a, int64_t c1, int64_t c2, int64_t n, const Activation& act) {
            a.at_most(4, "[c2, shortcut, g, e]");
            return Built{std::make_shared<CspBlock>(split, unit, c1, c2, n, a.boolean(1, shortcut), a.integer(2, groups),
                                                    a.ratio(3, 0.5), act),
                         c2, ""};
          },
          true};
}

// Res / ResX rows: [c2, shortcut, g, e].
std::pair<Factory, bool> res_factory(int64_t groups) {
  return {[=](const Args& a, int64_t c1, int64_t c2, int64_t, const Activation& act) {
            a.at_most(4, "[c2, shortcut, g, e]");
            return Built{std::make_shared<ResBottleneck>(c1, c2, a.boolean(1, true), a.integer(2, groups), a.ratio(3, 0.5), act),
                         c2, ""};
          },
          false};
}

// Modules whose first argument is the output width (scaled by width_multiple). C3 and SPPCSPC take
// the repeat count as their third constructor argument instead of being repeated.
const std::map<std::string, std::pair<Factory, bool>>& width_modules() {
  static const std::map<std::string, std::pair<Factory, bool>> table = {
      {"Conv", {[](const Args& a, int64_t c1, int64_t c2, int64_t, const Activation& act) {
                  a.at_most(7, "[c2, k, s, p, g, d|act, act]");
                  ConvOptions o{c1, c2, a.square(1, 1), a.integer(2, 1), a.integer_or_none(3, -1), a.integer(4, 1), 1, act};
                  // YOLOv5 Conv(c1, c2, k, s, p, g, d, act); YOLOv7 Conv(c1, c2, k, s, p, g, act).
                  if (a.size() > 5 && a.is_string(5)) {
                    o.act = a.activation(5, act);
                  } else {
                    o.d = a.integer(5, 1);
                    o.act = a.activation(6, act);
                  }
                  return Built{std::make_shared<Conv>(o), c2, ""};
                }, false}},
      {"Focus", {[](const Args& a, int64_t c1, int64_t c2, int64_t, const Activation& act) {
                   a.at_most(6, "[c2, k, s, p, g, act]");
                   ConvOptions o{c1, c2, a.integer(1, 1), a.integer(2, 1), a.integer_or_none(3, -1), a.integer(4, 1), 1, a.activation(5, act)};
                   return Built{std::make_shared<Focus>(o), c2, ""};
                 }, false}},
      {"Bottleneck", {[](const Args& a, int64_t c1, int64_t c2, int64_t, const Activation& act) {
                        a.at_most(4, "[c2, shortcut, g, e]");
                        return Built{std::make_shared<Bottleneck>(c1, c2, a.boolean(1, true), a.integer(2, 1), a.ratio(3, 0.5), act), c2, ""};
                      }, false}},
      {"C3", {[](const Args& a, int64_t c1, int64_t c2, int64_t n, const Activation& act) {
                a.at_most(4, "[c2, shortcut, g, e]");
                return Built{std::make_shared<C3>(c1, c2, n, a.boolean(1, true), a.integer(2, 1), a.ratio(3, 0.5), act), c2, ""};
              }, true}},
      {"SPP", {[](const Args& a, int64_t c1, int64_t c2, int64_t, const Activation& act) {
                 a.at_most(2, "[c2, [k1, k2, ...]]");
                 return Built{std::make_shared<SPP>(c1, c2, a.int_list(1, {5, 9, 13}), act), c2, ""};
               }, false}},
      {"SPPF", {[](const Args& a, int64_t c1, int64_t c2, int64_t, const Activation& act) {
                  a.at_most(2, "[c2, k]");
                  return Built{std::make_shared<SPPF>(c1, c2, a.integer(1, 5), act), c2, ""};
                }, false}},
      {"SPPCSPC", {[](const Args& a, int64_t c1, int64_t c2, int64_t n, const Activation& act) {
                     a.at_most(5, "[c2, shortcut, g, e, [k1, k2, ...]]");
                     return Built{std::make_shared<SPPCSPC>(c1, c2, n, a.boolean(1, false), a.integer(2, 1), a.ratio(3, 0.5),
                                                            a.int_list(4, {5, 9, 13}), act),
                                  c2, ""};
                   }, true}},
      // YOLOv5's hub modules: DWConv (a Conv with groups gcd(c1, c2)) and the Ghost blocks.
      {"DWConv", {[](const Args& a, int64_t c1, int64_t c2, int64_t, const Activation& act) {
                    a.at_most(5, "[c2, k, s, d, act]");
                    ConvOptions o{c1, c2, a.integer(1, 1), a.integer(2, 1), -1, std::gcd(c1, c2), a.integer(3, 1),
                                  a.activation(4, act)};
                    return Built{std::make_shared<Conv>(o), c2, ""};
                  }, false}},
      {"GhostConv", {[](const Args& a, int64_t c1, int64_t c2, int64_t, const Activation& act) {
                       a.at_most(5, "[c2, k, s, g, act]");
                       return Built{std::make_shared<GhostConv>(c1, c2, a.integer(1, 1), a.integer(2, 1), a.integer(3, 1),
                                                                a.activation(4, act)),
                                    c2, ""};
                     }, false}},
      {"GhostBottleneck", {[](const Args& a, int64_t c1, int64_t c2, int64_t, const Activation& act) {
                             a.at_most(3, "[c2, k, s]");
                             const int64_t s = a.integer(2, 1);
                             if (s != 1 && s != 2) fail(a.where(), ": GhostBottleneck's stride is 1 or 2");
                             return Built{std::make_shared<GhostBottleneck>(c1, c2, a.integer(1, 3), s, act), c2, ""};
                           }, false}},
      {"C3Ghost", {[](const Args& a, int64_t c1, int64_t c2, int64_t n, const Activation& act) {
                     a.at_most(4, "[c2, shortcut, g, e]");  // shortcut and g: unused, as upstream
                     return Built{std::make_shared<C3Ghost>(c1, c2, n, a.ratio(3, 0.5), act), c2, ""};
                   }, true}},
      {"C3TR", {[](const Args& a, int64_t c1, int64_t c2, int64_t n, const Activation& act) {
                  a.at_most(4, "[c2, shortcut, g, e]");  // shortcut and g: unused, as upstream
                  return Built{std::make_shared<C3TR>(c1, c2, n, a.ratio(3, 0.5), act), c2, ""};
                }, true}},
      // YOLOv7's parser hands DownC the repeat count, which it ignores: [c2, k] after it.
      {"DownC", {[](const Args& a, int64_t c1, int64_t c2, int64_t, const Activation& act) {
                   a.at_most(2, "[c2, k]");
                   const int64_t k = a.integer(1, 2);
                   if (k < 1) fail(a.where(), ": the pool size k must be >= 1");
                   return Built{std::make_shared<DownC>(c1, c2, k, act), c2, ""};
                 }, true}},
      // YOLOv7's cfg/baseline/ blocks (models/csp_blocks.h): [c2, shortcut, g, e] after the repeat count, with
      // upstream's defaults (BottleneckCSPB alone has no shortcut; ResX* use 32 groups).
      {"BottleneckCSPA", csp_factory(CspSplit::A, CspUnit::Darknet, true, 1)},
      {"BottleneckCSPB", csp_factory(CspSplit::B, CspUnit::Darknet, false, 1)},
      {"BottleneckCSPC", csp_factory(CspSplit::C, CspUnit::Darknet, true, 1)},
      {"ResCSPA", csp_factory(CspSplit::A, CspUnit::Res, true, 1)},
      {"ResCSPB", csp_factory(CspSplit::B, CspUnit::Res, true, 1)},
      {"ResCSPC", csp_factory(CspSplit::C, CspUnit::Res, true, 1)},
      {"ResXCSPA", csp_factory(CspSplit::A, CspUnit::ResX, true, 32)},
      {"ResXCSPB", csp_factory(CspSplit::B, CspUnit::ResX, true, 32)},
      {"ResXCSPC", csp_factory(CspSplit::C, CspUnit::ResX, true, 32)},
      {"Res", res_factory(1)},
      {"ResX", res_factory(32)},
      // Stem(c1, c2, k, s, p, g, act): upstream ignores all but c2.
      {"Stem", {[](const Args& a, int64_t c1, int64_t c2, int64_t, const Activation& act) {
                  a.at_most(6, "[c2, k, s, p, g, act] (all but c2 unused, as upstream)");
                  return Built{std::make_shared<Stem>(c1, c2, act), c2, ""};
                }, false}},
      {"RepConv", {[](const Args& a, int64_t c1, int64_t c2, int64_t, const Activation& act) {
                     a.at_most(6, "[c2, k, s, p, g, act]");
                     return Built{std::make_shared<RepConv>(c1, c2, a.integer(1, 3), a.integer(2, 1), a.integer_or_none(3, -1),
                                                            a.integer(4, 1), a.activation(5, act)),
                                  c2, ""};
                   }, false}},
  };
  return table;
}

// Modules that keep their input's channel count.
Built build_passthrough(const std::string& module, const Args& a, int64_t c1) {
  if (module == "nn.Upsample" || module == "Upsample") {
    a.at_most(3, "[size, scale_factor, mode]");
    if (a.has(0)) fail(a.where(), ": only scale_factor upsampling is supported (size must be None)");
    if (a.size() > 2 && a.node(2).Scalar() != "nearest") fail(a.where(), ": only 'nearest' upsampling is supported");
    // upstream's configs scale by 2; a huge factor allocated gigabytes in the stride probe, NaN overflowed there
    const double scale = a.real(1, 2.0);
    if (!(scale > 0 && scale <= 64)) fail(a.where(), ": scale_factor must be in (0, 64], got ", scale);
    return {std::make_shared<Upsample>(scale), c1, ""};
  }
  if (module == "nn.MaxPool2d" || module == "MaxPool2d") {
    a.at_least(1, "[k, s, p]");
    a.at_most(3, "[k, s, p]");
    const int64_t k = a.integer(0, 1);
    return {std::make_shared<MaxPool>(k, a.integer_or_none(1, k), a.integer(2, 0)), c1, ""};
  }
  if (module == "MP") {
    a.at_most(1, "[k]");
    const int64_t k = a.integer(0, 2);
    return {std::make_shared<MaxPool>(k, k, 0), c1, ""};
  }
  if (module == "SP") {
    a.at_most(2, "[k, s]");
    const int64_t k = a.integer(0, 3);
    return {std::make_shared<MaxPool>(k, a.integer(1, 1), k / 2), c1, ""};
  }
  if (module == "nn.ZeroPad2d" || module == "ZeroPad2d") {
    a.at_least(1, "[padding]");
    a.at_most(1, "[padding]");
    std::vector<int64_t> pad = a.int_list(0, {});
    if (pad.size() == 1) pad = {pad[0], pad[0], pad[0], pad[0]};
    if (pad.size() != 4) fail(a.where(), ": padding is an integer or [left, right, top, bottom]");
    return {std::make_shared<ZeroPad>(pad), c1, ""};
  }
  if (module == "ReOrg") {
    a.at_most(0, "[]");
    return {std::make_shared<ReOrg>(), 4 * c1, ""};
  }
  std::string known;  // the width modules' table, then the rest (those above, the joins, the heads)
  for (const auto& entry : width_modules()) known += entry.first + ", ";
  fail(a.where(), ": unknown module '", module, "' (kestrel knows ", known,
       "nn.Upsample, nn.MaxPool2d, nn.ZeroPad2d, MP, SP, ReOrg, Concat, Shortcut, Detect, IDetect, IAuxDetect)");
}

// A width module (width_modules' entry): its first argument, the output width, scaled by width_multiple
// (a head-sized width, na x (nc + 5), is left as written, as upstream), then n copies, or n passed in as
// the module's depth where it takes one (n is 1 afterwards).
Built build_width_layer(const Args& args, const std::pair<Factory, bool>& entry, const ModelConfig& cfg, int64_t c1, int& n,
                        const Activation& act) {
  args.at_least(1, "(the first is the output width)");
  const int64_t na = cfg.anchors.IsSequence() && cfg.anchors.size() ? cfg.anchors[0].size() / 2
                     : cfg.anchors.IsScalar()                      ? anchors_per_level(cfg.anchors, cfg.source)
                                                                   : 3;
  int64_t c2 = args.integer(0, 0);
  if (c2 < 1) fail(args.where(), ": the output width must be >= 1");
  if (c2 != na * (cfg.nc + 5)) c2 = make_divisible(c2 * cfg.width_multiple, cfg.channel_multiple);
  // Upstream's widest layer has 1,280 channels (yolov7-e6e). A width in the millions (a typo in the width
  // or width_multiple) stays under the parameter budget after a 3-channel input, but its 128 x 128 map in
  // the 256 x 256 stride probe needs hundreds of gigabytes, or minutes of computing.
  constexpr int64_t kMaxWidth = 65536;
  if (c2 > kMaxWidth)
    fail(args.where(), ": output width ", c2, " (after width_multiple ", cfg.width_multiple, ") exceeds ", kMaxWidth,
         " channels");
  const auto& [factory, takes_repeats] = entry;
  if (takes_repeats) {
    Built built = factory(args, c1, c2, n, act);
    built.arguments = cat("[", c1, ", ", c2, ", ", n, args.rest_from(1), "]");
    n = 1;
    return built;
  }
  std::vector<std::shared_ptr<Layer>> copies;
  for (int r = 0; r < n; ++r) copies.push_back(factory(args, r == 0 ? c1 : c2, c2, 1, act).layer);
  return {n > 1 ? std::make_shared<Repeat>(copies) : copies[0], c2, cat("[", c1, ", ", c2, args.rest_from(1), "]")};
}

// Concat (of channels) and Shortcut (a sum): no weights; in_ch are the widths of the rows they read.
Built build_join(const Args& args, const std::string& module, const std::vector<int64_t>& in_ch, int n) {
  // upstream would chain n of them (nn.Sequential), which fails on the first one's single tensor
  if (n > 1) fail(args.where(), ": a repeat count > 1 is not supported for this module");
  args.at_most(1, "[dimension]");
  const int64_t c2 = module == "Shortcut" ? in_ch[0] : std::accumulate(in_ch.begin(), in_ch.end(), int64_t{0});
  if (module == "Concat" && args.integer(0, 1) != 1) fail(args.where(), ": only channel concatenation (dimension 1) is supported");
  return {module == "Concat" ? std::shared_ptr<Layer>(std::make_shared<Concat>(1)) : std::make_shared<Shortcut>(), c2,
          args.size() ? cat("[", args.integer(0, 1), "]") : "[]"};
}

// Detect, IDetect or IAuxDetect (which reads a lead and an auxiliary map per level) on the maps of widths
// in_ch; `nc_origin` says where the model's nc came from, for the message when the row's differs.
std::shared_ptr<Detect> build_head(const Args& args, const std::string& module, const std::vector<int64_t>& in_ch, int n,
                                   const ModelConfig& cfg, const char* nc_origin, std::string& arguments) {
  const bool aux = module == "IAuxDetect";
  if (aux && in_ch.size() % 2 != 0)
    fail(args.where(), ": IAuxDetect reads a lead and an auxiliary feature map per level, but 'from' lists ", in_ch.size());
  if (n > 1) fail(args.where(), ": a repeat count > 1 is not supported for the detection head");
  args.at_least(2, "[nc, anchors]");
  args.at_most(2, "[nc, anchors]");
  const int64_t head_nc = args.node(0).IsScalar() && args.node(0).Scalar() == "nc" ? cfg.nc : args.integer(0, cfg.nc);
  // A number in place of `nc` that differs from the model's classes would train a head that never sees
  // the other classes (upstream's loss fails with an IndexError where the head has fewer).
  if (head_nc != cfg.nc)
    fail(args.where(), ": the head's class count ", head_nc, " is not the model's nc ", cfg.nc, nc_origin,
         "; write nc, as upstream's configs do");
  const YAML::Node anchor_node = args.node(1).IsScalar() && args.node(1).Scalar() == "anchors" ? cfg.anchors : args.node(1);
  if (!anchor_node) fail(args.where(), ": the head needs anchors but the file has no 'anchors' key");
  auto head = std::make_shared<Detect>(head_nc, read_anchors(anchor_node, in_ch.size() / (aux ? 2 : 1), args), in_ch,
                                       module != "Detect", aux);
  std::string chs;
  for (auto c : in_ch) chs += (chs.empty() ? "" : ", ") + std::to_string(c);
  // anchors: k (a count) is shown as upstream's placeholder lists, [0, 1, ..., 2k - 1] per level
  // per input map (upstream's `* len(f)`)
  std::string anchors_text = render(anchor_node, /*python=*/true);
  if (anchor_node.IsScalar()) {
    std::string level;
    for (int64_t i = 0; i < 2 * anchors_per_level(anchor_node, args.where()); ++i) level += (i ? ", " : "") + std::to_string(i);
    anchors_text.clear();
    for (size_t m = 0; m < in_ch.size(); ++m) anchors_text += (m ? ", [" : "[[") + level + "]";
    anchors_text += "]";
  }
  arguments = cat("[", head_nc, ", ", anchors_text, ", [", chs, "]]");
  return head;
}

}  // namespace

std::shared_ptr<YoloModel> build_model(const ModelConfig& config, int nc) {
  // A config from --cfg has no weights file to bound it (load_model_weights builds under the file's own
  // budget): a typo such as number 100000000 or width_multiple 99 would allocate until the system kills the
  // process. 1e9 values (4 GB in float32) is over six times upstream's largest model (yolov7-e6e, 164 M).
  std::optional<ParameterBudget> cap;
  if (!parameter_budget_active()) cap.emplace(int64_t{1'000'000'000});
  ModelConfig cfg = config;
  if (nc > 0) cfg.nc = nc;
  Activation default_act;
  if (!cfg.activation.empty()) {
    try {
      default_act = Activation::parse(cfg.activation);
    } catch (const Error& e) {
      fail(cfg.source, ": 'activation': ", e.what());
    }
  }
  std::vector<std::shared_ptr<Layer>> layers;
  std::vector<LayerInfo> info;
  std::shared_ptr<Detect> head;
  std::vector<int64_t> ch;  // output channels per layer

  const int count = static_cast<int>(cfg.layers.size());
  for (int i = 0; i < count; ++i) {
    const LayerSpec& spec = cfg.layers[i];
    const Args args(spec, i, cfg);
    LayerInfo row;
    for (int f : spec.from) row.from.push_back(f < 0 ? i + f : f);  // layer 0's -1 stays -1: the image
    std::vector<int64_t> in_ch;  // widths of the rows read
    for (int f : row.from) in_ch.push_back(f < 0 ? int64_t{cfg.ch} : ch[f]);
    int n = spec.number > 1 ? std::max(round_half_even(spec.number * cfg.depth_multiple), 1) : spec.number;
    // The written number is at most 1000; depth_multiple (at most 100) could still make 100,000 modules of
    // one row (minutes and gigabytes for a 2 KB file). Upstream's deepest row is 9 x 1.33 = 12.
    if (n > 1000)
      fail(args.where(), ": ", spec.number, " x depth_multiple ", cfg.depth_multiple, " = ", n,
           " repeats; at most 1000 per row");
    row.module = spec.module;
    if (head) fail(args.where(), ": the detection head must be the last layer");

    Built built;
    // LibTorch checks the layer arguments it is given (groups dividing the widths, kernel and stride >= 1)
    // with c10::Error: name the config line it comes from.
    try {
      const auto& table = width_modules();
      if (auto it = table.find(spec.module); it != table.end()) {
        built = build_width_layer(args, it->second, cfg, in_ch[0], n, default_act);
      } else if (spec.module == "Concat" || spec.module == "Shortcut") {
        built = build_join(args, spec.module, in_ch, n);
      } else if (spec.module == "Detect" || spec.module == "IDetect" || spec.module == "IAuxDetect") {
        if (i != count - 1) fail(args.where(), ": the detection head must be the last layer");
        head = build_head(args, spec.module, in_ch, n, cfg, nc > 0 && nc != config.nc ? " (the dataset's)" : "", built.arguments);
        built.layer = head;
        built.c2 = 0;
      } else {
        built = build_passthrough(spec.module, args, in_ch[0]);  // an unknown module is named first
        if (n > 1) fail(args.where(), ": a repeat count > 1 is not supported for this module");
        built.arguments = "[" + args.rest_from(0).substr(args.size() ? 2 : 0) + "]";
      }
    } catch (const c10::Error& e) {
      fail(args.where(), ": ", e.what_without_backtrace());
    } catch (const Error& e) {  // a layer's own check (make_conv2d's, Detect's ...); the builder's name the file already
      const std::string message = e.what();
      if (message.rfind(cfg.source, 0) == 0) throw;
      fail(args.where(), ": ", message);
    }
    if (spec.from.size() > 1 && spec.module != "Concat" && spec.module != "Shortcut" && !head)
      fail(args.where(), ": this module reads one input, but 'from' lists ", spec.from.size());
    row.number = n;
    row.arguments = built.arguments;
    row.out_channels = built.c2;
    ch.push_back(built.c2);
    layers.push_back(built.layer);
    info.push_back(row);
  }
  if (!head) fail(cfg.source, ": the last layer must be the detection head (Detect, IDetect or IAuxDetect)");
  std::shared_ptr<YoloModel> model;
  try {
    model = std::make_shared<YoloModel>(cfg.name(), cfg.ch, layers, info, head);  // runs a probe image through
  } catch (const c10::Error& e) {
    fail(cfg.source, ": the network cannot run a 256 x 256 probe image (layers whose feature maps do not line "
                     "up?): ", e.what_without_backtrace());
  }
  // Each level's stride is 256 / its grid size: a padding or stride that breaks the halvings (a Conv with
  // padding 64) gives 256 / 12 = 21.3, and grids that no image size fills (upstream would go on with it).
  for (double stride : model->head().strides())
    if (stride != std::floor(stride))
      fail(cfg.source, ": the detection levels' strides are ", render_strides(model->head().strides()),
           " (256 / their grid sizes on a 256 x 256 probe), not whole numbers: a layer's stride or padding does not "
           "halve the feature maps as the head's inputs need");
  return model;
}

}  // namespace kestrel::models
