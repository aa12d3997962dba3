// kestrel models [CFG ...] [--img S] [--nc N] [--fuse]: build models from YAML and print their layers,
// parameters, GFLOPs and strides. Without CFG: one summary line for every shipped config.
#include <filesystem>
#include <iostream>
#include <memory>

#include "commands.h"
#include "kestrel/core/error.h"
#include "kestrel/models/model_builder.h"
#include "kestrel/models/model_summary.h"

namespace kestrel::app {
namespace {

struct ModelsOptions {
  std::vector<std::string> configs, cfg_flag;  // positional, and yolo.py's --cfg
  int64_t img = 640;
  int nc = 0;
  bool fuse = false;
};

std::vector<std::string> shipped_configs() {
  std::vector<std::string> out;
  // kestrel's own folder (a configs/models of the working folder may hold the user's files), else the working
  // folder's when the binary runs without its source tree.
  for (const auto& dir : {std::filesystem::path(KESTREL_SOURCE_DIR) / "configs/models", std::filesystem::path("configs/models")}) {
    if (!std::filesystem::is_directory(dir)) continue;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".yaml") out.push_back(e.path().string());
    break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

void run_models(const ModelsOptions& o) {
  const bool table = !o.configs.empty();
  const std::vector<std::string> names = table ? o.configs : shipped_configs();
  int failed = 0;
  for (const auto& name : names) {
    std::shared_ptr<models::YoloModel> model;
    try {
      model = models::build_model(models::load_model_config(models::resolve_model_config_path(name)), o.nc);
    } catch (const Error& e) {
      if (names.size() == 1) throw;
      std::cout << std::flush;
      std::cerr << "error: " << e.what() << "\n";  // the others are still listed (yolo.py --test: "Error in ...")
      ++failed;
      continue;
    }
    if (o.fuse) model->fuse();
    const auto stats = models::model_stats(*model, o.img);
    if (table) {
      std::cout << models::format_model_table(*model, stats, o.img) << "\n";
    } else {
      std::printf("%-12s %3lld layers %11lld parameters %7lld buffer elements %4lld state keys  strides ", model->name().c_str(),
                  static_cast<long long>(stats.layers), static_cast<long long>(stats.parameters),
                  static_cast<long long>(stats.buffer_elements), static_cast<long long>(stats.state_keys));
      for (size_t i = 0; i < stats.strides.size(); ++i) std::printf("%s%d", i ? "," : "", static_cast<int>(stats.strides[i]));
      std::printf("  %7.2f GFLOPs@%lld\n", stats.gflops, static_cast<long long>(o.img));
    }
  }
  if (failed > 0) fail(failed, " of ", names.size(), " model configs could not be built (above)");
}

}  // namespace

void add_models_command(CLI::App& app) {
  auto opts = std::make_shared<ModelsOptions>();
  auto* cmd = app.add_subcommand("models", "print layers, parameters, GFLOPs and strides of model configs");
  cmd->add_option("CFG", opts->configs, "model YAML files or shipped names (yolov5s, yolov7 ...); none = all shipped");
  cmd->add_option("--cfg", opts->cfg_flag, "the same, as yolo.py --cfg");
  cmd->add_option("--img,--img-size,--imgsz", opts->img, "image size for GFLOPs")->check(CLI::Range(32, 8192));
  cmd->add_option("--nc", opts->nc, "override the class count")->check(CLI::Range(1, 100000));
  cmd->add_flag("--fuse", opts->fuse, "fuse conv+BN (and RepConv, implicit layers) first, as for inference");
  cmd->callback([opts] {
    opts->configs.insert(opts->configs.end(), opts->cfg_flag.begin(), opts->cfg_flag.end());
    run_models(*opts);
  });
}

}  // namespace kestrel::app
