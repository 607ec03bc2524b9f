// Sharded training (dist.zero_stage > 0) and the unsharded optimizer.pt: a checkpoint written by
// plain DDP or one process (every parameter's whole state, as Optimizer::save writes it) resumed
// into this rank's flat shards. Sharded runs themselves write sharded checkpoints
// (sharded_checkpoint.h); gather_optimizer_state, the consolidated form they used to write, is
// kept for a user who wants one file (docs/distributed.md, "Sharded checkpoints"). Private to
// the trainer, like checkpoint_state.h.
//   load_optimizer_shard(ddp, opt, module.parameters(), archive);          // every rank: its slice
//   auto full = gather_optimizer_state(ddp, opt, module.parameters());   // every rank: a collective
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include <trainbox/distributed/ddp.h>
#include <trainbox/train/optim.h>  // also declares torch::serialize::InputArchive/OutputArchive

namespace trainbox::train {

using ArchiveEntries = std::vector<std::pair<std::string, torch::Tensor>>;

// Collective (every rank, in step): all-gathers each bucket's shard of every state tensor and
// returns, on rank 0 only, the whole state keyed as Optimizer::save keys it ("exp_avg.<i>" for
// parameter i of module_params, "step.<i>", "lr"): one full copy on rank 0 at save time. Other
// ranks get an empty list.
ArchiveEntries gather_optimizer_state(dist::DistributedDataParallel& ddp, const Optimizer& opt,
                                      const std::vector<torch::Tensor>& module_params);
void write_entries(torch::serialize::OutputArchive& ar, const ArchiveEntries& entries);
// Reads an unsharded optimizer.pt (from any world size and stage) into this rank's shards.
// Throws DataError naming the entry when a shape does not match the model.
void load_optimizer_shard(const dist::DistributedDataParallel& ddp, Optimizer& opt,
                          const std::vector<torch::Tensor>& module_params, torch::serialize::InputArchive& ar);

}  // namespace trainbox::train
