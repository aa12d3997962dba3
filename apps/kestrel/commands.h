// One function per subcommand: adds it to the CLI with its flags and its action.
#pragma once
#include <CLI/CLI.hpp>

#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "argparse_rules.h"

namespace kestrel::app {

// An integer option's check: "expected an integer" for a value that is not one (CLI11's Range calls 'abc',
// '1e3' and '2.5' "not in range"), and "expected <expected>" for one `allowed` refuses.
inline CLI::Validator integer_where(std::function<bool(long long)> allowed, const std::string& expected) {
  return CLI::Validator(
      [allowed, expected](std::string& s) -> std::string {
        long long v = 0;
        size_t end = 0;
        try {
          v = std::stoll(s, &end);
        } catch (const std::exception&) {
          end = 0;
        }
        if (s.empty() || end != s.size()) return "expected an integer, got '" + s + "'";
        return allowed(v) ? std::string() : "expected " + expected + ", got " + s;
      },
      expected);
}

// A threshold's check: a number in [0, 1] ("nan" and "2" refused at the command line, naming the flag, rather
// than by NMS after the run folder is made).
inline CLI::Validator unit_interval() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        double v = 0;
        size_t end = 0;
        try {
          v = std::stod(s, &end);
        } catch (const std::exception&) {
          end = 0;
        }
        if (s.empty() || end != s.size()) return "expected a number, got '" + s + "'";
        return v >= 0 && v <= 1 ? std::string() : "expected a number in [0, 1], got " + s;
      },
      "in [0, 1]");
}

// A default path in the source tree (the demo dataset, its images) found from any working folder, as upstream's
// scripts find theirs below their repository (ROOT / 'data/...'): `path` where it exists, else the source tree's.
inline std::string default_from_source_tree(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return path;
  const std::filesystem::path in_tree = std::filesystem::path(KESTREL_SOURCE_DIR) / path;
  return std::filesystem::exists(in_tree, ec) ? in_tree.string() : path;
}

// How often this process's command line gives one of `names` (also as --name=value; abbreviations counted
// as the flag they stand for). CLI11 collects the values of every use of a list option where argparse keeps
// the last use: `--img 640 --img 320` would be one pair, so list options given twice are refused
// (refuse_repeated).
inline int times_given(std::initializer_list<std::string> names) {
  int n = 0;
  for (const std::string& arg : parsed_command_line())
    for (const std::string& name : names) n += arg == name || arg.rfind(name + "=", 0) == 0;
  return n;
}

inline void refuse_repeated(std::initializer_list<std::string> names, const std::string& example) {
  if (times_given(names) > 1)
    throw CLI::ValidationError(*names.begin(), "given more than once; give all its values after one " + *names.begin() +
                                                   ", e.g. " + example);
}

// --weights of a command that runs one model. Upstream's scripts take several (detect.py ensembles them,
// export.py exports each in turn); more than one here is an error saying what upstream would have done.
inline CLI::Option* add_one_weights_option(CLI::App* cmd, std::string& weights, const std::string& help,
                                           const std::string& upstream_would) {
  return cmd
      ->add_option_function<std::vector<std::string>>(
          "--weights",
          [&weights, upstream_would](const std::vector<std::string>& files) {
            refuse_repeated({"--weights"}, "--weights a.safetensors");  // joined here, argparse keeps the last use
            if (files.size() > 1)
              throw CLI::ValidationError("--weights", std::to_string(files.size()) + " files given; kestrel takes one (" +
                                                          upstream_would + ")");
            weights = files.front();
          },
          help)
      ->required();
}

void add_env_command(CLI::App& app);
void add_models_command(CLI::App& app);
void add_data_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_val_command(CLI::App& app);
void add_detect_command(CLI::App& app);
void add_export_command(CLI::App& app);

}  // namespace kestrel::app
