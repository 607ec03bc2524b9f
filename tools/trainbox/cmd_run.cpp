// trainbox run — torchrun's options in, RunConfig out, then the launcher (no torch linked).
//
//   trainbox run --nproc-per-node 4 -- trainbox train cfg.toml
//   trainbox run --standalone --nproc-per-node 2 python3 train.py --lr 0.1   (no -- needed)
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "train_args.h"
#include <trainbox/launch/launcher.h>
#include <trainbox/launch/run_config.h>
#include <trainbox/util/errors.h>

namespace trainbox::cli {

namespace {
// What the parse fills: the options' text and switches land in `args` (launch::run_options()
// names each slot); resolve_run_config() parses them, falls back to PET_*/Slurm/Kubeflow, validates.
struct RunCli {
  launch::RunArgs args;
  bool help_markdown = false;
  std::string command_placeholder;
};
}  // namespace

Runner add_run(CLI::App& app) {
  auto o = std::make_shared<RunCli>();
  // Every option from its one declaration (launch/run_config.h): names, help with its default
  // and variables; the parse files each given one under its flag (RunArgs::given).
  for (const auto& opt : launch::run_options()) {
    const std::string flag(opt.flag());
    if (opt.toggle) {
      app.add_flag_callback(
          std::string(opt.names), [o, flag] { o->args.set(flag); }, opt.help_text());
      continue;
    }
    app.add_option_function<std::string>(
           std::string(opt.names), [o, flag](const std::string& text) { o->args.set(flag, text); }, opt.help_text())
        ->type_name(std::string(opt.value_hint));
  }
  app.add_flag("--help-markdown", o->help_markdown,
               "Print the options as docs/distributed.md's table (Markdown) and exit");
  // The command is everything from the first positional (or after --) on, options included:
  // prefix_command() hands it over untouched. The always-rejecting positional below only
  // exists so that "--" is accepted here rather than passed to the parent app.
  app.add_option("COMMAND", o->command_placeholder, "The program to run and its arguments, after --")
      ->check(CLI::Validator([](std::string&) { return std::string("taken by prefix_command"); }, "", ""));
  app.validate_positionals();
  app.prefix_command();
  app.footer(
      "Workers get torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, "
      "TORCHELASTIC_*).\nExit code: the first failing worker's (128+signal if killed) on every node, 0 when all "
      "succeed, 2 for bad options or a failed rendezvous, 125 when a node of a c10d job is lost.");

  CLI::App* self = &app;
  return [o, self] {
    if (o->help_markdown) {
      std::cout << launch::run_options_markdown();
      return kExitOk;
    }
    launch::RunArgs args = o->args;
    std::vector<std::string> rest = self->remaining();
    if (!rest.empty() && rest.front() != "--" && rest.front().size() > 1 && rest.front()[0] == '-')
      throw UsageError("unknown option " + rest.front(),
                       "see `trainbox run --help`; put the command after --, e.g. trainbox run -- python3 train.py");
    if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
    args.command = std::move(rest);
    args.worker_keys = train_worker_keys;  // a `trainbox train` worker: its config's keys in the job digest
    return launch::launch(launch::resolve_run_config(args));
  };
}

}  // namespace trainbox::cli
