// The torch-free CLI's subcommands. Each registers its options on a CLI11 sub-app and
// returns the function main() runs when that subcommand is chosen.
#pragma once
#include <functional>

#include <CLI/CLI.hpp>

namespace trainbox::cli {

using Runner = std::function<int()>;

Runner add_doctor(CLI::App& app);
Runner add_smi(CLI::App& app);
Runner add_run(CLI::App& app);

}  // namespace trainbox::cli
