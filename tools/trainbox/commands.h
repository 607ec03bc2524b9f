// The CLI's subcommands. Each registers its options on a CLI11 sub-app and returns the
// function main() runs when that subcommand is chosen (dispatch.h runs it). Which program
// holds which command — the torch-free `trainbox` or `trainbox-torch` — is needs_torch in
// trainbox/util/commands.h. No torch headers here.
#pragma once
#include <functional>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>

#include <trainbox/util/commands.h>

namespace trainbox::cli {

using Runner = std::function<int()>;

// A subcommand registered under its name in util/commands.h, with the help text from there.
// A name missing from that list is a programming error: the CLI would dispatch it nowhere.
inline CLI::App* add_command(CLI::App& app, const char* name, bool torch_program) {
  const CommandInfo* c = find_command(name);
  if (!c || c->needs_torch != torch_program)
    throw std::logic_error(std::string("command '") + name +
                           "' is not listed for this program in trainbox/util/commands.h");
  return app.add_subcommand(c->name, c->help);
}

Runner add_doctor(CLI::App& app);
Runner add_smi(CLI::App& app);
Runner add_run(CLI::App& app);
Runner add_entrypoint(CLI::App& app);
Runner add_data(CLI::App& app);
Runner add_dash(CLI::App& app);
Runner add_tokenize(CLI::App& app);

// trainbox-torch
Runner add_train(CLI::App& app);
Runner add_export(CLI::App& app);
Runner add_sample(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_preflight(CLI::App& app);
Runner add_smoke(CLI::App& app);
// For `train --nproc-per-node N`: execs `trainbox run --standalone --nproc-per-node N --
// trainbox train <the other args>`; returns -1 when the option is absent.
int maybe_launch_self(int argc, char** argv);

}  // namespace trainbox::cli
