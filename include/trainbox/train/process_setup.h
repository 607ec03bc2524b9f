// trainbox/train/process_setup.h — the process-wide settings a training process wants, made
// once and explicitly by the program's main. `trainbox train`, `trainbox bench` and
// `trainbox preflight` call configure_process() before any work; a program of your own calls
// it if it wants the same. The library itself (Trainer, ProcessGroup, DDP) never changes
// process-global state — the environment, the allocator — behind its caller's back.
//
// Each setting can be turned off, and none replaces a choice already made in the environment
// (the user's own variable wins):
//   malloc          glibc's mmap and trim thresholds raised to 1 GiB (mallopt). Training frees
//                   and reallocates the same large activation and gradient buffers every step;
//                   above the mmap threshold (at most 32 MiB, adjusted dynamically) each is a
//                   fresh mmap, faulted in page by page again — on a VM that cost more than the
//                   convolutions (the cnn at batch 512 trained 2x faster on a 2-core VM with it
//                   off). In the heap a freed block is reused by the next step; peak RSS stays
//                   what a step needs but is no longer returned between steps. Skipped when
//                   GLIBC_TUNABLES names glibc.malloc, MALLOC_MMAP_THRESHOLD_ or
//                   MALLOC_TRIM_THRESHOLD_ is set, or TRAINBOX_MALLOC=default.
//                   With map_large_allocations (dist.zero_stage >= 2) the mmap threshold is
//                   2 MiB instead: every block of 2 MiB or more is mapped on its own, so a
//                   freed tensor's memory leaves the process at once. Stages 2 and 3 allocate
//                   and free gradient buckets (stage 3 whole units) every step to hold less;
//                   under the heap policy freed ones stay resident (a stage-3 rank with 544 MiB
//                   of tensors peaked at 1.4-1.7 GiB RSS, 0.94 GiB mapped). Its cost, every
//                   large tensor faulted in afresh each step (a CPU GPT with 4 MiB attention
//                   matrices stepped about 14 % slower), is why other jobs keep the heap.
//   CUBLAS_WORKSPACE_CONFIG=:4096:8   with deterministic_cublas (train.deterministic): torch
//                   refuses every cuBLAS call under deterministic algorithms without a fixed
//                   workspace, and cuBLAS takes it from this variable alone, when its first
//                   handle is made. The Trainer refuses a deterministic CUDA run without it.
//   TORCH_NCCL_BLOCKING_WAIT=1   ProcessGroupNCCL reads it once, in its constructor. Its Options
//                   (torch 2.11: is_high_priority_stream, config, split_from, split_color) have
//                   no such field, and a timeout passed to each wait() blocks too but leaves the
//                   watchdog's asynchronous error handling on, which tears the process down
//                   (SIGABRT naming no rank) in a race with that wait; only the variable turns it
//                   off. With it a failed or timed-out collective is a DistError naming the rank
//                   and the operation (docs/distributed.md).
//   NCCL_SOCKET_IFNAME==<iface>   the interface that routes to MASTER_ADDR, when that is not a
//                   loopback address (a multi-machine job). NCCL reads the variable at its first
//                   communicator and ncclConfig_t has no field for it. (Gloo gets the same choice
//                   through its device options in ProcessGroup::init: no variable there.)
// Call it first thing in main, before torch makes a CUDA context, a cuBLAS handle or a process
// group, and before other threads start (setenv is not thread-safe). Calling it again changes
// nothing that the first call or the user already set.
//
//   const auto done = trainbox::train::configure_process(trainbox::train::process_setup_for(cfg));
//   for (const auto& line : done.describe()) std::fprintf(stderr, "%s\n", line.c_str());
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <trainbox/train/config.h>

namespace trainbox::train {

// map_large_allocations' mmap threshold: a small model's activations (1 MiB) stay in the heap.
inline constexpr std::int64_t kMappedAllocationBytes = 2 << 20;

struct ProcessSetupOptions {
  bool keep_large_allocations = true;  // mallopt, see above
  bool map_large_allocations = false;  // with it: blocks >= kMappedAllocationBytes mapped (ZeRO 2/3)
  bool deterministic_cublas = false;   // CUBLAS_WORKSPACE_CONFIG=:4096:8
  bool nccl_blocking_wait = true;      // TORCH_NCCL_BLOCKING_WAIT=1
  bool nccl_socket_interface = true;   // NCCL_SOCKET_IFNAME==<the interface routing to MASTER_ADDR>
};

// What a job with this config wants: the defaults, deterministic_cublas for train.deterministic,
// and map_large_allocations for dist.zero_stage >= 2.
ProcessSetupOptions process_setup_for(const Config& config);

// What configure_process() did.
struct ProcessSetup {
  bool large_allocations_kept = false;                           // mallopt was called
  bool large_allocations_mapped = false;                         // with the 2 MiB mmap threshold
  std::vector<std::pair<std::string, std::string>> environment;  // variables it set (name, value), in order
  std::vector<std::string> left_alone;  // settings it skipped because the environment already decides them
  // One line per change: "malloc: blocks up to 1 GiB stay in the heap", "set NCCL_SOCKET_IFNAME==eth0".
  std::vector<std::string> describe() const;
};

ProcessSetup configure_process(const ProcessSetupOptions& options = {});

}  // namespace trainbox::train
