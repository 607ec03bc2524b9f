// trainbox-torch — the LibTorch-linked half of the trainbox CLI: the commands with needs_torch
// in trainbox/util/commands.h. Users run it through `trainbox <command>`, which execs this program.
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.h"
#include "dispatch.h"
#include <trainbox/models/registry.h>

namespace {

// `trainbox train --help` ends with the registered models (models/registry.h).
std::string models_footer() {
  std::string out = "Models (model.name; every key: trainbox train --config-reference):";
  for (const auto& m : trainbox::models::kModels)
    out += fmt::format("\n  {:<7} {}; keys: {}", m.name, m.summary, m.keys);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = trainbox::cli;
  CLI::App app{"trainbox (LibTorch commands)"};
  app.name("trainbox");
  app.require_subcommand(1);
  const cli::Runners runners = cli::add_commands(app,
                                                 {{"smoke", cli::add_smoke},
                                                  {"preflight", cli::add_preflight},
                                                  {"train", cli::add_train},
                                                  {"export", cli::add_export},
                                                  {"sample", cli::add_sample},
                                                  {"bench", cli::add_bench}},
                                                 /*torch_program=*/true);
  app.get_subcommand("train")->footer(models_footer());
  cli::CliOptions o;
  o.error_file = true;  // a failing command leaves the launcher's error file, as a torchrun worker would
  o.before_parse = cli::maybe_launch_self;  // `train --nproc-per-node N` relaunches under `trainbox run`
  return cli::run_cli(app, runners, argc, argv, o);
}
