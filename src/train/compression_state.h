// Gradient compression in the trainer (private, like checkpoint_state.h): the config's keys as
// dist::CompressionOptions, and the compression state in a checkpoint.
//   grad_compression.pt   every rank's state (distributed/ddp.h, compression_state()), keyed
//                         "rank<R>.<key>", plus "world_size": PowerSGD's error feedback
//                         ("rank<R>.error.<bucket>") and warm-start Q ("rank<R>.q.<bucket>"),
//                         the step count and the seed draws. Written by rank 0 (gathered),
//                         only when dist.grad_compression != none; its own file, apart from
//                         model.pt/optimizer.pt and any per-rank shard files.
//   auto st = gather_compression_state(*ddp);              // every rank: a collective
//   if (rank0) write_compression_state(dir, st);           // inside CheckpointStore::save
//   auto note = load_compression_state(resume_dir, *ddp);  // every rank, after DDP's construction
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include <trainbox/distributed/compression.h>
#include <trainbox/distributed/ddp.h>
#include <trainbox/train/config.h>

namespace trainbox::train {

inline constexpr const char* kCompressionStateFile = "grad_compression.pt";

dist::CompressionOptions compression_options(const DistConfig& d);

// Rank 0's start-up lines for a run with dist.zero_stage or dist.grad_compression set: what the
// gradient exchange does ("gradient exchange: 2 ranks, dist.zero_stage = 1, dist.grad_compression
// = powersgd (rank 4, from step 1000, …)"), then a note where the figures would surprise: PowerSGD
// whose start_step the run never reaches (every step an fp32 all-reduce), the uncompressed fp32
// all-gather of stages 1 and 2, compression without a gradient exchange (no process group).
// `steps`: the step this run stops at.
std::vector<std::string> gradient_exchange_notes(const DistConfig& d, int world, bool has_group, std::int64_t steps);

using CompressionEntries = std::vector<std::pair<std::string, torch::Tensor>>;
// Collective: rank 0 gets every rank's compression_state() ("rank<R>.<key>", "world_size");
// the other ranks an empty list. Empty everywhere without compression.
CompressionEntries gather_compression_state(dist::DistributedDataParallel& ddp);
// Writes <dir>/grad_compression.pt (nothing for an empty list).
void write_compression_state(const std::string& dir, const CompressionEntries& entries);
// Every rank: its own state from <checkpoint_dir>/grad_compression.pt. Returns a one-line note
// when the state is not used: the checkpoint was written at another world size (the error
// feedback and Q reset; the step count kept) or holds none (compression newly turned on: it
// counts from `step`).
std::optional<std::string> load_compression_state(const std::string& checkpoint_dir, dist::DistributedDataParallel& ddp,
                                                  std::int64_t step);

}  // namespace trainbox::train
