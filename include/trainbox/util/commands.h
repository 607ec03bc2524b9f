// trainbox/util/commands.h — the one list of trainbox's commands.
//
// Both CLI programs (`trainbox`, torch-free, and `trainbox-torch`) register their
// subcommands by these names and take the help text from here; `trainbox` execs
// `trainbox-torch` for the ones with needs_torch; the container entrypoint's shorthand
// (`docker run trainbox sample …`) accepts every name but its own. A subcommand that is not
// listed here fails at start-up (cli::command_info throws), so the lists cannot drift.
//
//   if (const CommandInfo* c = find_command(argv[1]); c && c->needs_torch) exec("trainbox-torch", argv);
#pragma once
#include <string_view>

namespace trainbox {

struct CommandInfo {
  const char* name;
  const char* help;
  bool needs_torch;  // lives in trainbox-torch (LibTorch-linked)
};

inline constexpr CommandInfo kCommands[] = {
    {"doctor", "Check the GPU stack (driver, CUDA, cuDNN, NCCL, torch build, GPUs) and explain every problem", false},
    {"smi", "Show what the GPUs are doing (NVML)", false},
    {"entrypoint", "Container start-up: banner and the doctor's warnings, then exec the command", false},
    {"run", "Launch a multi-process job like torchrun: trainbox run --nproc-per-node N -- COMMAND…", false},
    {"data", "Image datasets: `data ls` shows the classes and files trainbox sees, `data pack` writes tar shards",
     false},
    {"dash", "Compare trainbox train runs in the browser: curves overlaid, config differences side by side", false},
    {"tokenize", "A Hugging Face tokenizer on standard input: text to ids, or --decode ids to text", false},
    {"train", "Train a model from a TOML config (default: Fashion-MNIST MLP)", true},
    {"export", "Export a checkpoint to safetensors, PyTorch .pt or ONNX", true},
    {"sample", "Continue a prompt with a gpt checkpoint", true},
    {"bench", "How fast is this box: gemm, attention, memcpy, allreduce, train, dataloader, heartbeat, all", true},
    {"preflight",
     "Under a launcher: do the nodes agree (torch, CUDA, NCCL, driver, GPUs), reach the master, and allreduce "
     "together?",
     true},
    {"smoke", "Real work on the device: alloc, GEMM vs CPU, copies, allreduce (doctor --smoke runs it)", true},
};

constexpr const CommandInfo* find_command(std::string_view name) {
  for (const auto& c : kCommands)
    if (name == c.name) return &c;
  return nullptr;
}

}  // namespace trainbox
