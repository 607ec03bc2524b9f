// The CLI's subcommands. Each registers its options on a CLI11 sub-app and returns the
// function main() runs when that subcommand is chosen. doctor, smi and run are in the
// torch-free `trainbox`; train, export, sample and bench in `trainbox-torch`. No torch headers here.
#pragma once
#include <functional>

#include <CLI/CLI.hpp>

namespace trainbox::cli {

using Runner = std::function<int()>;

Runner add_doctor(CLI::App& app);
Runner add_smi(CLI::App& app);
Runner add_run(CLI::App& app);
Runner add_entrypoint(CLI::App& app);

// trainbox-torch
Runner add_train(CLI::App& app);
Runner add_export(CLI::App& app);
Runner add_sample(CLI::App& app);
Runner add_bench(CLI::App& app);
// For `train --nproc-per-node N`: execs `trainbox run --standalone --nproc-per-node N --
// trainbox train <the other args>`; returns -1 when the option is absent.
int maybe_launch_self(int argc, char** argv);

}  // namespace trainbox::cli
