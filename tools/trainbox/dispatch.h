// The one parse-and-run of both CLI programs (main.cpp: `trainbox`, torch-free;
// torch_main.cpp: `trainbox-torch`). Each main builds its CLI::App, registers its commands
// with add_commands, and hands over to run_cli, which decides every exit code:
//   0/1/2 from the command itself; 2 with "see `trainbox CMD --help`" for a CLI11 parse error;
//   a trainbox::Error's own code with its one line and fix (util/errors.h); 1 and
//   "trainbox: internal error: …" (first line only) for any other exception.
// Nothing escapes: std::terminate is never the answer to a bad argument. No torch headers.
//
//   auto runners = cli::add_commands(app, {{"doctor", cli::add_doctor}}, /*torch_program=*/false);
//   return cli::run_cli(app, runners, argc, argv, {});
#pragma once
#include <initializer_list>
#include <map>

#include <CLI/CLI.hpp>

#include "commands.h"

namespace trainbox::cli {

// A subcommand by its util/commands.h name and the function that registers its options.
struct CommandEntry {
  const char* name;
  Runner (*add)(CLI::App& sub);
};
using Runners = std::map<CLI::App*, Runner>;

// Registers each command as a subcommand of `app` (add_command: the name must be listed for
// this program in util/commands.h) and returns what to run for each.
Runners add_commands(CLI::App& app, std::initializer_list<CommandEntry> commands, bool torch_program);

struct CliOptions {
  // trainbox-torch: a failing command also leaves the launcher's error file
  // (TORCHELASTIC_ERROR_FILE, util/errors.h), as a torchrun worker would.
  bool error_file = false;
  // Runs first, under the same error handling; >= 0 is the exit code, -1 carries on to the
  // parse. trainbox-torch: maybe_launch_self (`train --nproc-per-node N`).
  int (*before_parse)(int argc, char** argv) = nullptr;
};

// Parses argv, runs the chosen subcommand's runner and returns the process exit code.
int run_cli(CLI::App& app, const Runners& runners, int argc, char** argv, const CliOptions& o);

}  // namespace trainbox::cli
