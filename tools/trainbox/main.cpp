// trainbox — the command-line entry point.
//
// This binary does not link torch, so `doctor`, `smi` and the launcher start in
// milliseconds and work when LibTorch itself is broken. Commands that need torch (needs_torch
// in trainbox/util/commands.h) live in the sibling program `trainbox-torch`; main() execs it,
// so those commands keep this process's pid (signals, torchrun, Slurm see one process).
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "dispatch.h"
#include <trainbox/util/errors.h>
#include <trainbox/util/process.h>

namespace {

int exec_torch_tool(int argc, char** argv) {
  std::string tool = trainbox::find_sibling_program("trainbox-torch");
  if (tool.empty()) {
    return trainbox::report_error(trainbox::UsageError(
        std::string("'") + argv[1] + "' needs trainbox-torch, which is not installed next to " +
            trainbox::self_exe_dir(),
        "this is the torch-free build (the pip package is one): build the LibTorch half from a checkout with "
        "`make build` (or cmake -DTRAINBOX_WITH_TORCH=ON) and run that build's bin/trainbox (docs/python.md)"));
  }
  std::vector<char*> args;
  args.push_back(const_cast<char*>(tool.c_str()));
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(tool.c_str(), args.data());
  return trainbox::report_error(trainbox::SystemError("cannot run " + tool + ": " + trainbox::errno_text(errno)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2)
    if (const trainbox::CommandInfo* c = trainbox::find_command(argv[1]); c && c->needs_torch)
      return exec_torch_tool(argc, argv);

  CLI::App app{"trainbox — a ready-to-train PyTorch-CUDA environment on LibTorch"};
  app.set_version_flag("--version", std::string("trainbox ") + TRAINBOX_VERSION);
  app.require_subcommand(1);
  std::string torch_commands;
  for (const auto& c : trainbox::kCommands)
    if (c.needs_torch) torch_commands += std::string(torch_commands.empty() ? "" : ", ") + c.name;
  app.footer("Commands that need LibTorch: " + torch_commands +
             " (run `trainbox train --help`).\n"
             "Exit codes: 0 ok, 1 the job or a check failed, 2 usage or bad input.");
  namespace cli = trainbox::cli;
  const cli::Runners runners = cli::add_commands(app,
                                                 {{"doctor", cli::add_doctor},
                                                  {"smi", cli::add_smi},
                                                  {"entrypoint", cli::add_entrypoint},
                                                  {"run", cli::add_run},
                                                  {"data", cli::add_data},
                                                  {"dash", cli::add_dash},
                                                  {"tokenize", cli::add_tokenize}},
                                                 /*torch_program=*/false);
  return cli::run_cli(app, runners, argc, argv, {});
}
