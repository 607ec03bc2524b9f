// Sharded training (dist.zero_stage > 0) and the unsharded optimizer.pt: a checkpoint written by
// plain DDP or one process (every parameter's whole state, as Optimizer::save writes it) resumed
// into this rank's flat shards. Sharded runs themselves write sharded checkpoints
// (sharded_checkpoint.h). Private to the trainer, like checkpoint_state.h.
//   load_optimizer_shard(ddp, opt, module.parameters(), archive);          // every rank: its slice
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include <trainbox/distributed/ddp.h>
#include <trainbox/train/optim.h>  // also declares torch::serialize::InputArchive/OutputArchive

namespace trainbox::train {

// This rank's optimizer shards filled from a source of whole-parameter state (a checkpoint of
// any world size and stage): step_of(name, p) gives the step count of the bucket whose first
// parameter is p (an index into ddp.parameters()); range(name, p, lo, hi) the elements
// [lo, hi) of parameter p's state `name`, flat. The padding is zeroed.
using ShardStepSource = std::function<torch::Tensor(const std::string& name, int param)>;
using ShardRangeSource =
    std::function<torch::Tensor(const std::string& name, int param, std::int64_t lo, std::int64_t hi)>;
void fill_optimizer_shards(const dist::DistributedDataParallel& ddp, Optimizer& opt, const ShardStepSource& step_of,
                           const ShardRangeSource& range);
// Reads an unsharded optimizer.pt (from any world size and stage) into this rank's shards.
// Throws DataError naming the entry when a shape does not match the model.
void load_optimizer_shard(const dist::DistributedDataParallel& ddp, Optimizer& opt,
                          const std::vector<torch::Tensor>& module_params, torch::serialize::InputArchive& ar);

}  // namespace trainbox::train
