// What a training checkpoint holds, and the one place that reads and writes it (private to
// the trainer; the directory's atomic life cycle is CheckpointStore's, train/checkpoint.h).
//   model.pt      the module's parameters and buffers (torch::serialize, by name)
//   optimizer.pt  the optimizer's state
//   rng.pt        the CPU generator's state (dropout, anything random in the step)
//   state.json    position (epoch, next batch, step, samples), loss scale, lr, the data's
//                 sample shape and classes (what rebuilds a built-in model), user entries
//   config.toml   the resolved config of the run
// A sharded run (dist.zero_stage > 0) writes rank_<r>.* and buffers.pt instead of model.pt and
// optimizer.pt (sharded_checkpoint.h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <trainbox/models/models.h>
#include <trainbox/train/config.h>
#include <trainbox/train/optim.h>

namespace torch::nn {
class Module;
}
namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace trainbox::train {

struct Position {
  std::int64_t epoch = 0;  // 0-based epoch to continue in
  std::int64_t batch = 0;  // next batch index within that epoch
  std::int64_t step = 0;   // optimizer steps done
  std::int64_t samples = 0;
};

// How the job that wrote a checkpoint split its steps: what an elastic resume at another world
// size needs to continue at the same sample. 0 in checkpoints written before these were kept.
struct DataLayout {
  std::int64_t world_size = 0;
  std::int64_t global_batch = 0;  // samples per optimizer step over all ranks
  std::int64_t cursor = 0;        // samples of the epoch consumed over all ranks (= batch × micro × world)
};

struct CheckpointState {
  Position pos;
  DataLayout layout;
  std::vector<double> scaler;  // GradScaler::state()
  double lr = 0;
  std::vector<std::int64_t> sample_shape;
  std::int64_t classes = 0;
  nlohmann::json extra = nlohmann::json::object();  // Trainer::checkpoint_meta entries
};

// Fills checkpoint directory `dir` (CheckpointStore::save's temporary dir).
void write_checkpoint(const std::string& dir, torch::nn::Module& module, const Optimizer& opt,
                      const CheckpointState& state, const std::string& config_toml);
// The same with optimizer.pt's entries written by `write_optimizer` (sharded training: the
// state gathered to rank 0, train/zero_state.h).
void write_checkpoint(const std::string& dir, torch::nn::Module& module,
                      const std::function<void(torch::serialize::OutputArchive&)>& write_optimizer,
                      const CheckpointState& state, const std::string& config_toml);
// rng.pt, state.json and config.toml: what rank 0 writes into every checkpoint, sharded or not.
void write_checkpoint_rest(const std::string& dir, const CheckpointState& state, const std::string& config_toml);
// state.json, parsed once. Throws DataError naming the file.
CheckpointState read_checkpoint_state(const std::string& dir);
// model.pt, or a sharded checkpoint's rank files and buffers.pt (sharded_checkpoint.h), consolidated.
void load_checkpoint_module(const std::string& dir, torch::nn::Module& module, const torch::Device& device);
// The optimizer's state and the CPU generator.
// rng.pt: the CPU generator rank 0 saved, restored on this rank (every checkpoint kind has it).
void load_checkpoint_rng(const std::string& dir);
void load_checkpoint_optimizer_rng(const std::string& dir, Optimizer& opt, const torch::Device& device);
// The same with optimizer.pt read by `read_optimizer` (sharded training: this rank's slice).
void load_checkpoint_optimizer_rng(const std::string& dir,
                                   const std::function<void(torch::serialize::InputArchive&)>& read_optimizer,
                                   const torch::Device& device);

// A built-in model rebuilt from a checkpoint (its config.toml and state.json) with its weights,
// on `device`: export and sample. Throws DataError for a missing or incomplete checkpoint.
struct CheckpointModel {
  std::string dir;                 // the checkpoint read (<run_dir>/checkpoints/step_N)
  std::vector<std::string> notes;  // damaged ones skipped for an older one, an unverified old format
  Config config;
  CheckpointState state;
  std::shared_ptr<models::Model> model;
};
// For export and sample: a run dir, `latest` or step_N, as resolve_checkpoint names them; the
// caller says which step it read and every note (a fallback past a damaged checkpoint above all).
CheckpointModel load_checkpoint_model(const std::string& named, const torch::Device& device);

}  // namespace trainbox::train
