// kestrel: YOLO object detectors (v3, v5, v7) trained on LibTorch. One executable, one subcommand per task.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <c10/util/Exception.h>

#include "commands.h"
#include "argparse_rules.h"
#include "kestrel/core/detached_threads.h"
#include "kestrel/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"kestrel " KESTREL_VERSION ": YOLOv3/v5/v7 training and inference on LibTorch"};
  app.require_subcommand(1);
  kestrel::app::add_train_command(app);
  kestrel::app::add_val_command(app);
  kestrel::app::add_detect_command(app);
  kestrel::app::add_export_command(app);
  kestrel::app::add_env_command(app);
  kestrel::app::add_models_command(app);
  kestrel::app::add_data_command(app);
  kestrel::app::add_bench_command(app);
  kestrel::app::keep_last_values(app);  // argparse's: a flag given twice keeps its last value
  // Command-line errors begin as kestrel's other errors do ("error: ..."), as argparse's end in "error: ...".
  app.failure_message([](const CLI::App* a, const CLI::Error& e) { return "error: " + CLI::FailureMessage::simple(a, e); });
  // CLI11 answers a mistyped subcommand with "A subcommand is required".
  std::string known;
  bool is_known = false;
  for (const CLI::App* sub : app.get_subcommands({})) {
    known += (known.empty() ? "" : ", ") + sub->get_name();
    is_known = is_known || (argc > 1 && sub->check_name(argv[1]));
  }
  if (argc > 1 && argv[1][0] != '-' && !is_known) {
    // Upstream's script names: YOLOv7's test.py and train_aux.py, and any script with its .py.
    std::string script = argv[1];
    if (script.size() > 3 && script.compare(script.size() - 3, 3, ".py") == 0) script.erase(script.size() - 3);
    const std::string ours = script == "test" ? "val" : script == "train_aux" ? "train" : script;
    bool upstream = false;
    for (const CLI::App* sub : app.get_subcommands({})) upstream = upstream || (ours != argv[1] && sub->get_name() == ours);
    std::cerr << "error: unknown subcommand '" << argv[1] << "'"
              << (upstream ? "; upstream's " + script + ".py is kestrel " + ours +
                                 (script == "train_aux" ? " (P6 configs train with the auxiliary-head loss)" : "")
                           : "")
              << " (one of: " << known << "; kestrel --help)\n";
    return 2;
  }
  const int code = [&] {
    try {
      // argparse's abbreviations (--epoch for --epochs), expanded for CLI11, which has none.
      kestrel::app::set_parsed_command_line(kestrel::app::expand_flag_abbreviations(app, {argv, argv + argc}));
      const std::vector<std::string>& args = kestrel::app::parsed_command_line();
      std::vector<const char*> expanded;
      for (const std::string& a : args) expanded.push_back(a.c_str());
      app.parse(static_cast<int>(expanded.size()), expanded.data());
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    } catch (const kestrel::Error& e) {
      std::cerr << "error: " << e.what() << "\n";
      return 1;
    } catch (const c10::Error& e) {
      std::cerr << "error: " << e.what_without_backtrace() << "\n";
      return 1;
    } catch (const std::exception& e) {
      std::cerr << "error: " << e.what() << "\n";
      return 1;
    }
    return 0;
  }();
  // Output that never reached its file (a full disk) is an error, as Python's failed print; a reader that
  // went away (`kestrel models | head`) is not.
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int flush_errno = flushed ? 0 : errno;  // (a stale errno says nothing of an earlier failed write)
  if ((!flushed || std::ferror(stdout)) && flush_errno != EPIPE) {
    std::cerr << "error: writing the standard output failed"
              << (flush_errno != 0 ? std::string(": ") + std::strerror(flush_errno) : std::string()) << "\n";
    if (code == 0) return 1;
  }
  // A stream reader still inside a network read (detect): leave without the static destructors of the
  // libraries it is in, as Python leaves its daemon threads. Everything was written and closed by now.
  if (kestrel::detached_threads_running() > 0) {
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    std::_Exit(code);
  }
  return code;
}
