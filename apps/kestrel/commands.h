// One function per subcommand: adds it to the CLI with its flags and its action.
#pragma once
#include <CLI/CLI.hpp>

namespace kestrel::app {

void add_env_command(CLI::App& app);
void add_models_command(CLI::App& app);
void add_data_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_val_command(CLI::App& app);
void add_detect_command(CLI::App& app);
void add_export_command(CLI::App& app);

}  // namespace kestrel::app
