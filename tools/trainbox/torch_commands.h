// Subcommands of trainbox-torch (the LibTorch-linked half of the CLI). Like commands.h:
// each registers its options and returns what main() runs. No torch headers here.
#pragma once
#include <functional>

#include <CLI/CLI.hpp>

namespace trainbox::cli {

using Runner = std::function<int()>;

Runner add_train(CLI::App& app);
Runner add_export(CLI::App& app);
Runner add_bench(CLI::App& app);
// For `train --nproc-per-node N`: execs `trainbox run --standalone --nproc-per-node N --
// trainbox train <the other args>`; returns -1 when the option is absent.
int maybe_launch_self(int argc, char** argv);

}  // namespace trainbox::cli
