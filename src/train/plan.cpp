// `trainbox train --plan`: the job's model and one real batch, measured (train/memory_plan.h).
// Each phase of the job is measured on the device where it can be (a training step, an
// evaluation forward, an optimizer step, the dataset) and counted where it depends on ranks
// that this one process does not have (sharding, compression, stage 3's gathering).
#include <set>

#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/data/dataset.h>
#include <trainbox/distributed/worker_env.h>
#include <trainbox/models/activation_checkpoint.h>
#include <trainbox/models/lora.h>
#include <trainbox/models/models.h>
#include <trainbox/train/amp.h>
#include <trainbox/train/device.h>
#include <trainbox/train/machine_choices.h>
#include <trainbox/train/memory_plan.h>
#include <trainbox/train/memory_stats.h>
#include <trainbox/train/optim.h>
#include <trainbox/train/step.h>
#include <trainbox/util/cpu_features.h>
#include <trainbox/util/errors.h>

namespace trainbox::train {
namespace {

bool has_blocks(const std::string& model) {
  return model == "gpt" || model == "llama" || model == "bert" || model.rfind("resnet", 0) == 0;
}

void sync(const torch::Device& dev) {
#ifdef TRAINBOX_WITH_CUDA
  if (dev.is_cuda()) torch::cuda::synchronize(dev.index() < 0 ? 0 : dev.index());
#else
  (void)dev;
#endif
}

// The peak of allocated bytes while `f` runs, beyond what was live before it.
template <class F>
std::int64_t peak_during(const torch::Device& dev, F&& f) {
  sync(dev);
  const std::int64_t before = allocated(dev).current;
  reset_peak_allocated(dev);
  f();
  sync(dev);
  return std::max<std::int64_t>(0, allocated(dev).peak - before);
}

// The micro-batch, as the trainer splits the global batch.
std::int64_t micro_batch_of(const Config& cfg, int world) {
  const std::int64_t g = cfg.train.global_batch_size;
  if (g <= 0) return cfg.train.batch_size;
  if (g % (world * cfg.train.accumulate) != 0)
    throw ConfigError(fmt::format("train.global_batch_size = {} does not split over {} rank{} x train.accumulate = {}",
                                  g, world, world == 1 ? "" : "s", cfg.train.accumulate),
                      "choose a global batch divisible by world size x accumulate");
  return g / (world * cfg.train.accumulate);
}

// Batches of a split on the device: the first b samples (repeated when the split is smaller).
struct SplitBatches {
  std::shared_ptr<const data::Source> source;
  torch::Device dev;
  std::pair<torch::Tensor, torch::Tensor> operator()(std::int64_t b) const {
    auto ex = source->get_batch(torch::arange(b, torch::kLong).remainder(source->size()));
    return {ex.x.to(dev), ex.y.to(dev)};
  }
  std::int64_t sample_bytes() const {
    const auto [x, y] = (*this)(1);
    return static_cast<std::int64_t>(x.nbytes() + y.nbytes());
  }
};

// The parameter counts the buckets and stage 3's units are made of.
void count_parameters(PlanInputs& in, const std::shared_ptr<models::Model>& m) {
  for (const auto& p : m->parameters())
    if (p.requires_grad()) {
      in.numel += p.numel();
      in.param_numel.push_back(p.numel());
      in.state.param_bytes = static_cast<int>(p.element_size());
    } else {
      in.frozen += static_cast<std::int64_t>(p.nbytes());  // LoRA's base
    }
  for (const auto& b : m->buffers()) in.buffers += static_cast<std::int64_t>(b.nbytes());
  std::set<const void*> seen;  // a parameter belongs to the first unit that holds it (zero3.cpp)
  for (const auto& u : find_units(m)) {
    std::int64_t n = 0;
    for (const auto& p : u->parameters())
      if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) n += p.numel();
    if (n > 0) in.unit_numel.push_back(n);
  }
}

// The optimizer step's temporaries and the evaluation's forward, on `m` (the job's model).
void measure_step_and_evaluation(PlanInputs& in, const std::shared_ptr<models::Model>& m, const Config& cfg, Amp amp,
                                 const SplitBatches& train_batch,
                                 const std::shared_ptr<const data::Source>& eval_split) {
  const torch::Device dev = train_batch.dev;
  count_parameters(in, m);
  // --- the optimizer step (its state allocated by a first step) ---
  {
    const auto [x, y] = train_batch(in.micro_batch);
    torch::Tensor loss;
    {
      AutocastGuard ac(dev.type(), autocast_dtype(amp), autocast_enabled(amp));
      loss = logits_cross_entropy(m->forward(x), y);
    }
    loss.backward();  // the gradients exist
  }
  std::vector<torch::Tensor> trainable;
  for (const auto& p : m->parameters())
    if (p.requires_grad()) trainable.push_back(p);
  Optimizer opt(trainable, cfg.optim);
  opt.step();
  in.optimizer_step = peak_during(dev, [&] { opt.step(); });
  if (in.eval_batch <= 0) return;
  // --- evaluation: one forward + loss without gradients at two batches, as evaluate() runs it ---
  const SplitBatches eval_batch{eval_split, dev};
  in.eval_sample_bytes = eval_batch.sample_bytes();
  torch::NoGradGuard ng;
  m->eval();
  auto eval_bytes = [&](std::int64_t b) {
    const auto [x, y] = eval_batch(b);
    return peak_during(dev, [&] {
      torch::Tensor out;
      {
        AutocastGuard ac(dev.type(), autocast_dtype(amp), autocast_enabled(amp));
        out = m->forward(x);
      }
      out = out.is_floating_point() ? out.to(torch::kFloat32) : out;
      auto loss = logits_cross_entropy(out, y, /*sum=*/true);
      auto correct = out.argmax(-1).eq(y).sum();
      (void)loss;
      (void)correct;
    });
  };
  // Measured at the evaluation batch up to 256 samples, and extrapolated linearly beyond
  // (a measurement at 1000 could itself run out of memory on the device it is planning for).
  const std::int64_t b1 = std::min<std::int64_t>(in.eval_batch, 256), b2 = b1 / 2;
  in.eval_activations = ActivationModel::from(b1, eval_bytes(b1), b2, b2 > 0 ? eval_bytes(b2) : 0);
  in.eval_measured_at = b1;
}

// A full fine-tune of a llama: the LoRA fine-tune the field would run instead (r = 16 on the seven
// projections, the base in bf16), estimated: the base at 2 B/param, the adapters' fp32 AdamW state
// (16 B/param), the full fine-tune's activations at the same micro-batch (an upper bound: the frozen
// base's weight gradients are not computed) and buffers. `adapters`: their count on the built model.
void offer_lora(PlanInputs& in, std::int64_t adapters, std::int64_t micro) {
  if (adapters <= 0) return;
  in.lora_alternative_text = fmt::format(
      "(model.lora.r = 16, model.lora.target_modules = [\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\", "
      "\"gate_proj\", \"up_proj\", \"down_proj\"], model.base_dtype = \"bf16\": {} adapter parameters; "
      "estimated)",
      adapters);
  in.lora_alternative = 2 * in.numel + 16 * adapters + in.activations.at(micro) + in.buffers;
}
}  // namespace

PlanInputs plan_training(const Config& cfg, int world) {
  validate(cfg);
  if (world < 1) throw UsageError(fmt::format("--world {} is not a number of ranks", world), "pass --world 1 or more");
  const dist::WorkerEnv wenv = dist::WorkerEnv::from_environment();
  const torch::Device dev = choose_device(cfg.train.device, wenv.local_rank, wenv.local_world_size).device;
  const Amp amp = choose_amp(cfg.train.amp, dev.is_cuda(), dev.is_cuda() ? CpuFeatures{} : cpu_features()).amp;
  if (!allocated(dev).exact)
    throw UsageError(fmt::format("no exact allocation counter on {}: the activations cannot be measured", dev.str()),
                     "call trainbox::train::install_cpu_allocation_counter() first thing in main");
  const std::int64_t micro = micro_batch_of(cfg, world);

  // --- the data: what it holds on the device (CPU: the loaded splits; CUDA: data.device_resident) ---
  const std::int64_t before_data = allocated(dev).current;
  const data::Splits splits =
      data::load_splits(cfg.data, static_cast<std::uint64_t>(cfg.train.seed), cfg.model.block_size);
  std::vector<std::shared_ptr<const data::Source>> resident;  // held until the data is counted
  if (dev.is_cuda() && cfg.data.device_resident)
    for (const auto& s : {splits.train, splits.val, splits.test})
      if (s)
        if (auto d = s->to_device(dev)) resident.push_back(d);
  const std::int64_t data_bytes = allocated(dev).current - before_data;
  resident.clear();
  if (splits.train->size() < 1) throw ConfigError("the training set is empty", "check data.path and data.limit");
  const auto eval_split = splits.val && splits.val->size() > 0 ? splits.val : splits.test;
  const std::int64_t eval_size =
      std::max<std::int64_t>(splits.test ? splits.test->size() : 0, eval_split ? eval_split->size() : 0);
  const SplitBatches train_batch{splits.train, dev};

  models::InputShape shape;
  if (splits.sample_shape.size() == 3) shape = {splits.sample_shape[0], splits.sample_shape[1], splits.sample_shape[2]};
  auto build = [&](const std::string& policy) {
    models::ModelConfig mc = cfg.model;
    mc.activation_checkpointing = policy;
    torch::manual_seed(static_cast<std::uint64_t>(cfg.train.seed));
    auto m = models::make_model(mc, shape, splits.classes);
    if (mc.lora_r > 0) models::apply_lora(*m, mc);  // the adapters train, the base is frozen at base_dtype
    m->to(dev);
    m->train();
    return m;
  };
  auto measure = [&](const std::shared_ptr<models::Model>& m, std::int64_t b) {
    const auto [x, y] = train_batch(b);
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
  in.data = std::max<std::int64_t>(0, data_bytes);
  in.prefetch = cfg.data.prefetch;
  in.host_device = !dev.is_cuda();
  in.compression = cfg.dist.grad_compression;
  in.error_feedback = cfg.dist.powersgd_error_feedback;
  in.first_bucket_bytes = static_cast<std::int64_t>(cfg.dist.first_bucket_mb * (1 << 20));
  in.bucket_cap_bytes = static_cast<std::int64_t>(cfg.dist.bucket_cap_mb * (1 << 20));
  in.train_sample_bytes = train_batch.sample_bytes();
  in.eval_batch = eval_size > 0 ? std::min<std::int64_t>(cfg.train.eval_batch_size, eval_size) : 0;
  std::int64_t lora_adapters = 0;  // a full fine-tune of a llama: what LoRA would train instead (offer_lora)
  {
    auto m = build(cfg.model.activation_checkpointing);
    measure_step_and_evaluation(in, m, cfg, amp, train_batch, eval_split);
    if (cfg.model.name == "llama" && cfg.model.lora_r == 0)
      lora_adapters = models::lora_adapter_numel(
          *m, 16, {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"});
  }
  in.state.numel = in.numel;
  in.state.grad_bytes = in.state.param_bytes;
  in.state.state_bytes = in.state.param_bytes;
  in.state.optimizer_slots = optimizer_slots(cfg.optim);
  in.state.zero_stage = configured_zero_stage(cfg);
  in.zero_available = has_zero_stage_key();  // a build without sharding proposes no stage
  in.state.world = world;
  in.frozen_dtype = cfg.model.base_dtype;
  in.activations = model_activations(cfg.model.activation_checkpointing);
  // a mixture of experts cannot be checkpointed yet (docs/moe.md): no such offer
  if (has_blocks(cfg.model.name) && cfg.model.activation_checkpointing == "none" && cfg.model.moe_experts == 0)
    in.checkpointed = model_activations("blocks");
  offer_lora(in, lora_adapters, micro);
  return in;
}

}  // namespace trainbox::train
