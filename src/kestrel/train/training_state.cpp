#include "kestrel/train/training_state.h"

#include <filesystem>
#include <limits>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "kestrel/core/error.h"
#include "kestrel/core/json_number.h"
#include "kestrel/core/safetensors.h"
#include "kestrel/train/train_options.h"

namespace kestrel::train {
namespace {

constexpr const char* kStateFormat = "kestrel-train-state-1";
// Paths that are not UTF-8 (JSON cannot hold them) get U+FFFD rather than failing the save.
constexpr auto kReplace = nlohmann::json::error_handler_t::replace;

// The file's tensor groups, in file order.
struct Group {
  const char* prefix;
  models::NamedTensors TrainingState::*tensors;
};
constexpr Group kGroups[] = {{"model/", &TrainingState::model},
                             {"ema/", &TrainingState::ema},
                             {"optimizer/", &TrainingState::optimizer},
                             {"scaler/", &TrainingState::scaler}};

// A whole number of the progress within [min, T's max]: nlohmann would truncate 1.5, wrap 2^40 and
// make 1e300 undefined behaviour.
template <class T>
T whole(const nlohmann::json& p, const char* key, int64_t min) {
  const nlohmann::json& v = p.at(key);
  const auto max = static_cast<int64_t>(std::numeric_limits<T>::max());
  const std::optional<int64_t> x = json_whole_number(v, min, max);
  if (!x)
    throw std::out_of_range(cat("'", key, "' must be a whole number from ", min, " to ", max, ", not ",
                                v.is_number() ? v.dump() : std::string(v.type_name())));
  return static_cast<T>(*x);
}

// A real number of the progress: JSON has no NaN or infinity (nlohmann writes them as null), and a loss sum
// that an fp16 overflow made infinite (a step the loss scaler skipped) must still resume.
double real(const nlohmann::json& v) {
  if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
  return v.get<double>();
}
template <size_t N>
std::array<double, N> reals(const nlohmann::json& v) {
  if (!v.is_array() || v.size() != N) throw std::out_of_range(cat("expected a list of ", N, " numbers, not ", json_shown(v)));
  std::array<double, N> out;
  for (size_t i = 0; i < N; ++i) out[i] = real(v[i]);
  return out;
}

}  // namespace

std::string training_state_path(const std::string& resume) {
  namespace fs = std::filesystem;
  return fs::is_directory(resume) ? (fs::path(resume) / "weights" / "last.state.safetensors").string() : resume;
}

std::string latest_training_state(const std::string& project) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string newest;
  fs::file_time_type newest_time;
  for (fs::recursive_directory_iterator it(project, fs::directory_options::skip_permission_denied, ec), end; !ec && it != end;
       it.increment(ec)) {
    const fs::path& p = it->path();
    if (p.filename() != "last.state.safetensors" || p.parent_path().filename() != "weights") continue;
    const fs::file_time_type t = fs::last_write_time(p, ec);
    if (!ec && (newest.empty() || t > newest_time)) newest = p.string(), newest_time = t;
    ec.clear();
  }
  if (newest.empty()) fail("--resume: no run to resume under ", project, " (no */weights/last.state.safetensors); name a run folder");
  return newest;
}

TrainingState read_training_state(const std::string& path) {
  SafetensorsContents file = load_safetensors(path);
  const auto& m = file.metadata;
  if (!m.count("format") || m.at("format") != kStateFormat)
    fail(path, ": not a kestrel training state (pass a run's weights/last.state.safetensors)");
  TrainingState s;
  for (auto& [key, t] : file.tensors) {
    // Weights files are checked alike (models/weights_file.cpp): resuming NaN would train NaN and save it.
    if (t.is_floating_point() && !at::isfinite(t).all().item<bool>())
      fail(path, ": tensor ", key, " holds NaN or infinite values (a damaged file, or a run that diverged: start a new run ",
           "with --weights from its best.safetensors or an epoch<N>.safetensors)");
    for (const Group& g : kGroups)
      if (key.rfind(g.prefix, 0) == 0) (s.*g.tensors).emplace_back(key.substr(std::string(g.prefix).size()), t);
  }
  if (m.count("model_yaml") != m.count("model_name")) fail(path, ": 'model_yaml' and 'model_name' come together in the metadata");
  if (m.count("model_yaml")) s.model_yaml = m.at("model_yaml"), s.model_name = m.at("model_name");
  if (!m.count("options")) fail(path, ": the training options are missing");
  if (!m.count("progress")) fail(path, ": the training progress is missing");
  nlohmann::json options;
  try {
    options = nlohmann::json::parse(m.at("options"));
  } catch (const std::exception& e) {
    fail(path, ": malformed training options (", e.what(), ")");
  }
  s.options = options_from_json(options, path);
  try {
    const nlohmann::json p = nlohmann::json::parse(m.at("progress"));
    Progression& g = s.progression;
    g.epoch = whole<int>(p, "epoch", 0);
    g.next_batch = whole<int64_t>(p, "next_batch", 0);
    g.last_opt_step = whole<int64_t>(p, "last_opt_step", -1);
    g.best_fitness = real(p.at("best_fitness"));
    g.best_epoch = whole<int>(p, "best_epoch", 0);
    g.loss_sum = reals<3>(p.at("loss_sum"));
    g.loss_count = whole<int64_t>(p, "loss_count", 0);
    g.maps.clear();
    if (p.contains("maps"))
      for (const nlohmann::json& v : p.at("maps")) g.maps.push_back(real(v));
    s.ema_updates = whole<int64_t>(p, "ema_updates", 0);
    s.world_size = p.contains("world_size") ? whole<int>(p, "world_size", 1) : 1;
  } catch (const std::exception& e) {
    fail(path, ": malformed training progress (", e.what(), ")");
  }
  return s;
}

void write_training_state(const std::string& path, const TrainingState& s) {
  models::NamedTensors tensors;
  for (const Group& g : kGroups)
    for (const auto& [name, t] : s.*g.tensors) tensors.emplace_back(g.prefix + name, t);
  const Progression& p = s.progression;
  const nlohmann::json progress = {{"epoch", p.epoch},          {"next_batch", p.next_batch},
                                   {"last_opt_step", p.last_opt_step}, {"best_fitness", p.best_fitness},
                                   {"best_epoch", p.best_epoch}, {"loss_sum", p.loss_sum},
                                   {"loss_count", p.loss_count}, {"ema_updates", s.ema_updates}, {"maps", p.maps},
                                   {"world_size", s.world_size}};
  std::map<std::string, std::string> metadata = {
      {"format", kStateFormat}, {"options", options_json(s.options).dump(-1, ' ', false, kReplace)}, {"progress", progress.dump()}};
  if (!s.model_yaml.empty()) metadata["model_yaml"] = s.model_yaml, metadata["model_name"] = s.model_name;
  save_safetensors(path, tensors, metadata);
}

}  // namespace kestrel::train
