// argparse's allow_abbrev for kestrel's command line: upstream's scripts accept any unambiguous prefix of a
// long flag (train.py --epoch 3, --noauto), so the same command lines work here.
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace kestrel::app {

// `args` (argv) with each long flag that is not one of its subcommand's own names but the prefix of exactly
// one of its flags (aliases of one flag count once) replaced by that flag's name; "--epoch=3" keeps its value.
// A prefix of several flags is an error naming them (argparse: "ambiguous option"), a flag that is no prefix
// at all an error naming the subcommand's --help. Tokens after "--" are left alone.
std::vector<std::string> expand_flag_abbreviations(CLI::App& app, const std::vector<std::string>& args);

}  // namespace kestrel::app
