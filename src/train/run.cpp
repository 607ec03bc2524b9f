// `trainbox train` and `trainbox export`: the built-in models and datasets, named by the
// config, handed to the Trainer.
#include <trainbox/train/run.h>

#include <cstdio>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/data/dataset.h>
#include <trainbox/data/text.h>
#include <trainbox/dist/worker_env.h>
#include <trainbox/models/models.h>
#include <trainbox/models/weights.h>
#include <trainbox/train/trainer.h>

#include "checkpoint_state.h"

namespace trainbox::train {
TrainSummary run_training(const TrainOptions& o) {
  // Everything that can be wrong with the input — config, data, model, initial weights — is
  // found here, before the Trainer touches the run dir: a bad input leaves nothing behind.
  validate(o.config);
  const Config& cfg = o.config;
  data::Splits splits = data::load_splits(cfg.data, static_cast<std::uint64_t>(cfg.train.seed), cfg.model.block_size);
  torch::manual_seed(static_cast<std::uint64_t>(cfg.train.seed));  // initialisation depends on the seed alone
  models::InputShape shape;
  if (splits.sample_shape.size() == 3) shape = {splits.sample_shape[0], splits.sample_shape[1], splits.sample_shape[2]};
  std::shared_ptr<models::Model> model = models::make_model(cfg.model, shape, splits.classes);
  if (!cfg.model.init_from.empty()) {
    auto r = models::load_weights(*model, cfg.model.init_from);
    if (!o.quiet)
      std::fprintf(stderr, "trainbox train: initial weights from %s (%zu tensors%s)\n", cfg.model.init_from.c_str(),
                   r.tensors, r.hugging_face_layout ? ", Hugging Face GPT-2 layout: Conv1D weights transposed" : "");
  }

  Trainer trainer(o);
  trainer.model(model).data(splits);
  TrainSummary sum = trainer.fit();
  if (auto h = data::unigram_entropy(*splits.train)) sum.unigram_loss = *h;
  if (cfg.checkpoint.export_safetensors && dist::WorkerEnv::from_environment().rank == 0)
    models::save_weights(*model, o.run_dir + "/model.safetensors", {{"trainbox_model", cfg.model.name}});
  return sum;
}

void export_checkpoint(const std::string& checkpoint, const std::string& out) {
  // A GPU run's checkpoint exports on a machine without one: load to the CPU.
  CheckpointModel m = load_checkpoint_model(checkpoint, torch::kCPU);
  models::save_weights(*m.model, out, {{"trainbox_model", m.config.model.name}});
}

}  // namespace trainbox::train
