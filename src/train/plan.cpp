// `trainbox train --plan`: the job's model and one real batch, measured (train/memory_plan.h).
#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/data/dataset.h>
#include <trainbox/distributed/worker_env.h>
#include <trainbox/models/models.h>
#include <trainbox/train/amp.h>
#include <trainbox/train/device.h>
#include <trainbox/train/machine_choices.h>
#include <trainbox/train/memory_plan.h>
#include <trainbox/train/memory_stats.h>
#include <trainbox/train/step.h>
#include <trainbox/util/cpu_features.h>
#include <trainbox/util/errors.h>

namespace trainbox::train {
namespace {

bool has_blocks(const std::string& model) { return model == "gpt" || model.rfind("resnet", 0) == 0; }

}  // namespace

PlanInputs plan_training(const Config& cfg_in, int world) {
  validate(cfg_in);
  if (world < 1) throw UsageError(fmt::format("--world {} is not a number of ranks", world), "pass --world 1 or more");
  const Config& cfg = cfg_in;
  const dist::WorkerEnv wenv = dist::WorkerEnv::from_environment();
  const torch::Device dev = choose_device(cfg.train.device, wenv.local_rank, wenv.local_world_size).device;
  const Amp amp = choose_amp(cfg.train.amp, dev.is_cuda(), dev.is_cuda() ? CpuFeatures{} : cpu_features()).amp;
  if (!allocated(dev).exact)
    throw UsageError(fmt::format("no exact allocation counter on {}: the activations cannot be measured", dev.str()),
                     "call trainbox::train::install_cpu_allocation_counter() first thing in main");

  // --- the micro-batch, as the trainer splits the global batch ---
  std::int64_t micro = cfg.train.batch_size;
  if (const std::int64_t g = cfg.train.global_batch_size; g > 0) {
    if (g % (world * cfg.train.accumulate) != 0)
      throw ConfigError(
          fmt::format("train.global_batch_size = {} does not split over {} rank{} x train.accumulate = {}", g, world,
                      world == 1 ? "" : "s", cfg.train.accumulate),
          "choose a global batch divisible by world size x accumulate");
    micro = g / (world * cfg.train.accumulate);
  }

  // --- the model and one batch of the real data ---
  const data::Splits splits =
      data::load_splits(cfg.data, static_cast<std::uint64_t>(cfg.train.seed), cfg.model.block_size);
  models::InputShape shape;
  if (splits.sample_shape.size() == 3) shape = {splits.sample_shape[0], splits.sample_shape[1], splits.sample_shape[2]};
  auto build = [&](const std::string& policy) {
    models::ModelConfig mc = cfg.model;
    mc.activation_checkpointing = policy;
    torch::manual_seed(static_cast<std::uint64_t>(cfg.train.seed));
    auto m = models::make_model(mc, shape, splits.classes);
    m->to(dev);
    m->train();
    return m;
  };
  const std::int64_t n = splits.train->size();
  if (n < 1) throw ConfigError("the training set is empty", "check data.path and data.limit");
  auto batch = [&](std::int64_t b) {
    auto ex = splits.train->get_batch(torch::arange(b, torch::kLong).remainder(n));
    return std::make_pair(ex.x.to(dev), ex.y.to(dev));
  };
  auto measure = [&](const std::shared_ptr<models::Model>& m, std::int64_t b) {
    const auto [x, y] = batch(b);
    return measure_step_activation_bytes(*m, dev, [&] {
      torch::Tensor loss;
      {
        AutocastGuard ac(dev.type(), autocast_dtype(amp), autocast_enabled(amp));
        loss = logits_cross_entropy(m->forward(x), y);
      }
      loss.backward();
    });
  };
  auto model_activations = [&](const std::string& policy) {
    auto m = build(policy);
    const std::int64_t full = measure(m, micro);
    const std::int64_t half = micro >= 2 ? measure(m, micro / 2) : 0;
    return ActivationModel::from(micro, full, micro >= 2 ? micro / 2 : 0, half);
  };

  PlanInputs in;
  in.model = cfg.model.name;
  in.device = dev.str();
  in.optimizer = cfg.optim.name;
  in.micro_batch = micro;
  in.accumulate = cfg.train.accumulate;
  in.checkpointing = cfg.model.activation_checkpointing;
  {
    auto m = build(cfg.model.activation_checkpointing);
    for (const auto& p : m->parameters())
      if (p.requires_grad()) {
        in.numel += p.numel();
        in.state.param_bytes = static_cast<int>(p.element_size());
      }
    for (const auto& b : m->buffers()) in.buffers += static_cast<std::int64_t>(b.nbytes());
  }
  in.state.numel = in.numel;
  in.state.grad_bytes = in.state.param_bytes;
  in.state.state_bytes = in.state.param_bytes;
  in.state.optimizer_slots = optimizer_slots(cfg.optim);
  in.state.zero_stage = configured_zero_stage(cfg);
  in.zero_available = has_zero_stage_key();  // a build without sharding proposes no stage
  in.state.world = world;
  in.activations = model_activations(cfg.model.activation_checkpointing);
  if (has_blocks(cfg.model.name) && cfg.model.activation_checkpointing == "none")
    in.checkpointed = model_activations("blocks");
  return in;
}

}  // namespace trainbox::train
