// Sharded training (dist.zero_stage > 0) and the unsharded optimizer.pt: a checkpoint written by
// plain DDP or one process (every parameter's whole state, as Optimizer::save writes it) resumed
// into this rank's flat shards. Sharded runs themselves write sharded checkpoints
// (sharded_checkpoint.h). Private to the trainer, like checkpoint_state.h.
//   load_optimizer_shard(ddp, opt, module.parameters(), archive);          // every rank: its slice
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include <trainbox/distributed/ddp.h>
#include <trainbox/train/optim.h>  // also declares torch::serialize::InputArchive/OutputArchive

namespace trainbox::train {

// Reads an unsharded optimizer.pt (from any world size and stage) into this rank's shards.
// Throws DataError naming the entry when a shape does not match the model.
void load_optimizer_shard(const dist::DistributedDataParallel& ddp, Optimizer& opt,
                          const std::vector<torch::Tensor>& module_params, torch::serialize::InputArchive& ar);

}  // namespace trainbox::train
