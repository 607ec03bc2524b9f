// Subcommands of trainbox-torch (the LibTorch-linked half of the CLI). Like commands.h:
// each registers its options and returns what main() runs. No torch headers here.
#pragma once
#include <functional>

#include <CLI/CLI.hpp>

namespace trainbox::cli {

using Runner = std::function<int()>;

Runner add_train(CLI::App& app);
Runner add_export(CLI::App& app);

}  // namespace trainbox::cli
