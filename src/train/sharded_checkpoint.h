// Sharded checkpoints (dist.zero_stage >= 1; docs/distributed.md, "Sharded checkpoints"):
// each rank writes its own slice of every flat bucket — no rank ever holds the whole optimizer
// state — and a resume at any world size and stage rebuilds its own layout from the saved one
// with the same flat-bucket math as DDP (distributed/ddp.h, BucketShard). Private to the trainer.
//
// A checkpoint dir step_N/ of a sharded run holds
//   rank_<r>.params.pt  rank r's slice of each bucket's flat parameters ("param.<b>")
//   rank_<r>.optim.pt   its slice of each optimizer state ("exp_avg.<b>", "step.<b>", …), "lr",
//                       and the rank-local entries ("local.<name>", see RankLocalEntries)
//   rank_<r>.json       {"rank", "world_size", "step", "shard_sizes", "local"}: what verify() checks
//   buffers.pt          (rank 0) the module's buffers and the parameters DDP does not train, by name
//   rng.pt state.json config.toml   (rank 0) as in an unsharded checkpoint
//   MANIFEST.json       every file's SHA-256 and, under "sharding", the flat layout (sharding_json)
//   COMPLETE
//
// Collective contract: write_rank_shard on every rank into CheckpointStore::staging_dir(step);
// rank 0 commits after every rank reported success (trainer.cpp, FitLoop::save_sharded).
//   write_rank_shard(store.staging_dir(step), ddp, opt, step, {});          // every rank
//   if (rank0) store.save_staged(step, [&](auto& d) { write_sharded_rest(d, …); }, hook, sharding_json(ddp, opt,
//   step)); if (is_sharded_checkpoint(dir)) load_sharded_optimizer_rng(dir, ddp_or_null, opt, module);
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include <trainbox/distributed/ddp.h>
#include <trainbox/train/optim.h>

#include "checkpoint_state.h"

namespace trainbox::train {

// Rank-local state: one tensor per name that only the rank that wrote it can use (not a slice
// of anything). The extension point for per-rank state such as gradient compression's
// error-feedback residuals: pass them to write_rank_shard, read them back with
// read_rank_local — at the same world size only (a resume at another world size gets none, and
// the owner starts that state afresh; say so in its docs).
using RankLocalEntries = std::vector<std::pair<std::string, torch::Tensor>>;

// Whether checkpoint `dir` is sharded (its MANIFEST.json has a "sharding" layout).
bool is_sharded_checkpoint(const std::string& dir);

// The layout for the manifest (MANIFEST.json "sharding"), from rank 0's DDP: per bucket the
// parameters (name, shape, dtype, offset, numel), numel, padded and shard size; the world size,
// the stage, the step and the optimizer-state names saved.
std::string sharding_json(const dist::DistributedDataParallel& ddp, const Optimizer& opt, std::int64_t step);

// Every rank: its rank_<r>.params.pt, rank_<r>.optim.pt and rank_<r>.json into `dir`, each
// written through io::DurableFile (fsync'ed). `between` (fault injection) runs after the
// parameters file, before the optimizer file.
void write_rank_shard(const std::string& dir, const dist::DistributedDataParallel& ddp, const Optimizer& opt,
                      std::int64_t step, const RankLocalEntries& local, const std::function<void()>& between = {});

// Rank 0: buffers.pt (buffers and untrained parameters), rng.pt, state.json, config.toml.
void write_sharded_rest(const std::string& dir, torch::nn::Module& module, const dist::DistributedDataParallel& ddp,
                        const CheckpointState& state, const std::string& config_toml);

// The module's whole weights from a sharded checkpoint: each rank file read once, its slices
// copied into the parameters they belong to (peak extra memory: one rank's parameter shard),
// then buffers.pt. Every name and shape is checked before anything is copied (DataError).
void load_sharded_module(const std::string& dir, torch::nn::Module& module, const torch::Device& device);

// The optimizer state and the CPU generator (rank 0's rng.pt) from a sharded checkpoint, into
// `ddp`'s layout when it is sharded (this rank reads only the saved ranges its shards need),
// else into every parameter's whole state (plain DDP, or one process: ddp may be null).
// `module`'s parameters, in order, are what an unsharded optimizer was built on.
void load_sharded_optimizer_rng(const std::string& dir, const dist::DistributedDataParallel* ddp, Optimizer& opt,
                                torch::nn::Module& module);

// This rank's rank-local entries, when the checkpoint was written at world size `world`; else none.
RankLocalEntries read_rank_local(const std::string& dir, int rank, int world);

}  // namespace trainbox::train
