#include "kestrel/train/train_options.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "kestrel/core/error.h"
#include "kestrel/train/grad_scaler.h"

namespace kestrel::train {
namespace {

// visit(key, field, required) for every saved field, in opt.yaml's order. `required`: present since the
// first state format (a missing one means a damaged file); later additions default when absent.
template <class Options, class Visit>
void for_each_saved_option(Options& o, Visit&& visit) {
  visit("weights", o.weights, true);
  visit("cfg", o.cfg, true);
  visit("data", o.data, true);
  visit("hyp", o.hyp, true);
  visit("epochs", o.epochs, true);
  visit("batch_size", o.batch_size, true);
  visit("imgsz", o.img_size, true);
  visit("imgsz_test", o.img_size_test, false);
  visit("rect", o.rect, true);
  visit("nosave", o.nosave, true);
  visit("noval", o.noval, true);
  visit("noautoanchor", o.noautoanchor, false);
  visit("noplots", o.noplots, false);
  visit("v5_metric", o.v5_metric, false);
  visit("v3_metric", o.v3_metric, false);
  visit("cache", o.cache, true);
  visit("device", o.device, true);
  visit("multi_scale", o.multi_scale, true);
  visit("single_cls", o.single_cls, true);
  visit("sync_bn", o.sync_bn, false);
  visit("optimizer", o.optimizer, true);
  visit("workers", o.workers, true);
  visit("project", o.project, true);
  visit("name", o.name, true);
  visit("exist_ok", o.exist_ok, true);
  visit("cos_lr", o.cos_lr, true);
  visit("linear_lr", o.linear_lr, false);
  visit("label_smoothing", o.label_smoothing, true);
  visit("patience", o.patience, true);
  visit("freeze", o.freeze, true);
  visit("save_period", o.save_period, true);
  visit("seed", o.seed, true);
  visit("amp", o.amp, true);
  visit("loss_scale", o.loss_scale, true);
  visit("check_nans", o.check_nans, true);
  visit("freeze_bn", o.freeze_bn, true);
  visit("quad", o.quad, false);
  visit("image_weights", o.image_weights, false);
  visit("checkpoint", o.checkpoint, false);
  visit("cuda_graph", o.cuda_graph, false);
  visit("channels_last", o.channels_last, false);
  visit("fused_bn_silu", o.fused_bn_silu, false);
  visit("bind_cores", o.bind_cores, false);
  visit("max_grad_norm", o.max_grad_norm, true);
  visit("max_boxes", o.max_boxes, true);
  visit("min_warmup_iterations", o.min_warmup_iterations, true);
}

// Whether a saved value may be read into a field of type T: a whole number within T's range for integer
// fields (and lists of them). nlohmann would truncate 1.5, wrap 2^40 and make 1e300 undefined behaviour.
template <class T>
bool fits(const nlohmann::json& v) {
  if constexpr (std::is_same_v<T, std::vector<int>>) {
    if (v.is_array())
      for (const auto& e : v)
        if (!fits<int>(e)) return false;
    return true;
  } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
    if (v.is_number_integer()) return v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min());
    return !v.is_number();  // not a number: get_to reports the type
  } else {
    return true;
  }
}

}  // namespace

nlohmann::json options_json(const TrainOptions& o) {
  nlohmann::json j = nlohmann::json::object();
  for_each_saved_option(o, [&](const char* key, const auto& field, bool) { j[key] = field; });
  return j;
}

namespace {

// A state file's options bypass the command line's checks (apps/kestrel/cmd_train.cpp): the same ranges
// here, so that an edited or damaged file is refused by name rather than training with --workers 100000.
void check_saved_ranges(const TrainOptions& o, const std::string& source) {
  const auto in_range = [&](const char* key, double value, double low, double high) {
    if (!(value >= low && value <= high))
      fail(source, ": the saved training option '", key, "' is ", value, ", outside [", low, ", ", high, "]");
  };
  in_range("epochs", o.epochs, 1, 100000);
  in_range("batch_size", o.batch_size, 1, 65536);
  in_range("imgsz", o.img_size, 32, 8192);
  if (o.img_size_test != 0) in_range("imgsz_test", o.img_size_test, 32, 8192);
  in_range("workers", o.workers, 0, 1024);
  in_range("label_smoothing", o.label_smoothing, 0, 1);
  // patience: any int. The command line refuses a negative one now, but earlier versions saved them
  // (trained as 0: off), and those runs resume as they trained.
  in_range("max_boxes", o.max_boxes, 1, 100000);
  if (!is_valid_loss_scale(o.loss_scale))  // the command line's rules
    fail(source, ": the saved training option 'loss_scale' is ", o.loss_scale, ", not a positive number a float32 holds");
  if (!std::isfinite(o.max_grad_norm))
    fail(source, ": the saved training option 'max_grad_norm' is ", o.max_grad_norm, ", not a finite number");
  for (const auto& [key, value, allowed] :
       {std::tuple<const char*, std::string, std::vector<std::string>>{"amp", o.amp, {"auto", "fp16", "bf16", "off"}},
        {"cache", o.cache, {"", "ram", "disk", "val"}}})
    if (std::find(allowed.begin(), allowed.end(), value) == allowed.end())
      fail(source, ": the saved training option '", key, "' is '", value, "', not one kestrel writes");
}

}  // namespace

TrainOptions options_from_json(const nlohmann::json& j, const std::string& source) {
  TrainOptions o;
  try {
    for_each_saved_option(o, [&](const char* key, auto& field, bool required) {
      if (!required && !j.contains(key)) return;
      const nlohmann::json& v = j.at(key);
      if (!fits<std::decay_t<decltype(field)>>(v))
        fail(source, ": the saved training option '", key, "' is not a whole number in the range of its type");
      v.get_to(field);
    });
  } catch (const nlohmann::json::exception& e) {
    fail(source, ": the saved training options are incomplete or malformed (", e.what(), ")");
  }
  check_saved_ranges(o, source);
  return o;
}

std::string options_yaml(const TrainOptions& given, const std::string& save_dir) {
  TrainOptions o = given;
  if (o.img_size_test == 0) o.img_size_test = o.img_size;  // the size validation uses (0 in the state: not given)
  std::string out;
  const auto value = [](const nlohmann::json& v) { return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); };
  // In the table's order (nlohmann::json sorts its keys).
  for_each_saved_option(o, [&](const char* key, const auto& field, bool) { out += std::string(key) + ": " + value(field) + "\n"; });
  if (!save_dir.empty()) out += "save_dir: " + value(save_dir) + "\n";  // train.py adds it to opt last, too
  return out;
}

}  // namespace kestrel::train
