// argparse's rules for kestrel's command line (CLI11 has neither): upstream's scripts accept any unambiguous
// prefix of a long flag (train.py --epoch 3, --noauto), and a flag given twice keeps its last value, so the
// same command lines work here.
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace kestrel::app {

// `args` (argv) with each long flag that is not one of its subcommand's own names but the prefix of exactly
// one of its flags (aliases of one flag count once) replaced by that flag's name; "--epoch=3" keeps its value.
// A prefix of several flags is an error naming them (argparse: "ambiguous option") unless one of them is a
// prefix of all the others: kestrel's longer flags extend upstream's, whose scripts lack them (--evol:
// --evolve, not --evolve-population; but YOLOv7's --dyn stays ambiguous: its export.py has --dynamic and
// --dynamic-batch). A flag that is no prefix at all is an error naming the subcommand's --help (unless --help
// is asked for: argparse prints the help then).
// Tokens after "--" are left alone.
std::vector<std::string> expand_flag_abbreviations(CLI::App& app, const std::vector<std::string>& args);

// Every single-value option of `app` and its subcommands keeps the last of its values (CLI11: "At Most 1
// required but received 2"). List options (--img 640 640, --freeze ...) are not touched: CLI11 joins their
// uses, which the commands refuse (refuse_repeated). Call after every option is added.
void keep_last_values(CLI::App& app);

// The command line as parsed, abbreviations expanded (main sets it): the commands count their list flags in it.
const std::vector<std::string>& parsed_command_line();
void set_parsed_command_line(std::vector<std::string> args);

}  // namespace kestrel::app
