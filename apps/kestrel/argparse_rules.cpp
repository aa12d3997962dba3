#include "argparse_rules.h"

#include <set>

namespace kestrel::app {
namespace {
// Flags of YOLOv7's export.py that extend another of its flags (--dynamic, --include): a prefix of both is
// ambiguous there.
const std::set<std::string> kUpstreamExtensions = {"dynamic-batch", "include-nms"};
}  // namespace

std::vector<std::string> expand_flag_abbreviations(CLI::App& app, const std::vector<std::string>& args) {
  // The subcommand the flags belong to: `kestrel bench train ...` -> bench's train.
  CLI::App* command = &app;
  std::string path = "kestrel";
  size_t first = 1;
  for (; first < args.size(); ++first) {
    CLI::App* next = nullptr;
    for (CLI::App* sub : command->get_subcommands({}))
      if (sub->check_name(args[first])) next = sub;
    if (next == nullptr) break;
    command = next;
    path += " " + next->get_name();
  }
  if (command == &app) return args;  // no subcommand: CLI11 says what is missing
  std::vector<const CLI::Option*> options;
  for (const CLI::Option* o : command->get_options({})) options.push_back(o);
  bool help = false;
  for (size_t i = first; i < args.size() && args[i] != "--"; ++i) help = help || args[i] == "-h" || args[i] == "--help";
  std::vector<std::string> out = args;
  for (size_t i = first; i < out.size(); ++i) {
    const std::string& token = out[i];
    if (token == "--") break;
    if (token.size() < 3 || token.rfind("--", 0) != 0) continue;
    const size_t eq = token.find('=');
    const std::string name = token.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const std::string value = eq == std::string::npos ? "" : token.substr(eq);
    std::set<const CLI::Option*> matched;
    std::string full;
    bool exact = false;
    std::string candidates;
    for (const CLI::Option* o : options)
      for (const std::string& lname : o->get_lnames()) {
        if (lname == name) exact = true;
        if (lname.rfind(name, 0) != 0) continue;
        if (matched.insert(o).second) full = lname;
        candidates += (candidates.empty() ? "--" : ", --") + lname;
      }
    if (exact) continue;
    // kestrel's additions (--evolve-population, --resume-evolve) extend upstream's flags: a prefix of
    // upstream's flag that only they make ambiguous (--evol, --resu) means upstream's flag. YOLOv7's own
    // longer flags (kUpstreamExtensions) keep theirs ambiguous, as its argparse says (--cache-images and
    // --cache both cache in RAM: --cach is --cache).
    std::string shortest;
    for (const CLI::Option* o : matched)
      for (const std::string& lname : o->get_lnames())
        if (lname.rfind(name, 0) == 0 && (shortest.empty() || lname.size() < shortest.size())) shortest = lname;
    bool extended_by_all = matched.size() > 1;
    for (const CLI::Option* o : matched) {
      bool extends = false;
      for (const std::string& lname : o->get_lnames())
        extends = extends || (lname.rfind(shortest, 0) == 0 && !kUpstreamExtensions.count(lname));
      extended_by_all = extended_by_all && extends;
    }
    if (extended_by_all) {
      out[i] = "--" + shortest + value;
    } else if (matched.size() == 1) {
      out[i] = "--" + full + value;
    } else if (matched.size() > 1) {
      throw CLI::ValidationError(path, "ambiguous option: --" + name + " could match " + candidates);
    } else if (!help) {
      throw CLI::ValidationError(path, "unknown flag --" + name + " (" + path + " --help lists its flags)");
    }
  }
  return out;
}

namespace {
std::vector<std::string>& parsed_args() {
  static std::vector<std::string> args;
  return args;
}
}  // namespace

const std::vector<std::string>& parsed_command_line() { return parsed_args(); }
void set_parsed_command_line(std::vector<std::string> args) { parsed_args() = std::move(args); }

void keep_last_values(CLI::App& app) {
  for (CLI::Option* o : app.get_options({}))
    if (o->get_items_expected_max() == 1) o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (CLI::App* sub : app.get_subcommands({})) keep_last_values(*sub);
}

}  // namespace kestrel::app
