// trainbox/train/memory_plan.h — how many bytes a rank needs for a training job, and the
// cheapest change that makes it fit a budget (`trainbox train --plan`, docs/trainer.md).
// Torch-free: the arithmetic only; the activations are measured by the caller
// (train/memory_stats.h: one forward/backward on the device, one evaluation forward, one
// optimizer step).
//
// A rank's peak is the largest of the job's phases, each the bytes held throughout the job
// (the model state below, PowerSGD's two gradient-sized buffers, buffers, a dataset held on the
// device) plus what the phase holds for a while:
//   training step    the activations of a micro-batch (measured), the batches the loader holds
//                    ahead, at stage 2 the whole gradients of the buckets in flight, at stage 3
//                    the gathered parameters and whole gradients of the rest and two units
//   evaluation       one forward at train.eval_batch_size without gradients (measured: its
//                    default of 1000 often dominates), at stage 3 the rest and two units whole
//   checkpoint save  the copies a save makes on this device: a stage 1/2 shard, rank 0's
//                    gather of every rank's PowerSGD error feedback
// The budget is gated on the largest (issue 43: a plan of the training step alone approved a
// job whose evaluation needed 2.2x as much).
//
// Model state per rank follows ZeRO (Rajbhandari et al., SC'20) for stage s at world N, with
// P = the flat parameter count padded to a multiple of N (each rank's flat shard is P / N):
//   stage 0 (plain DDP)     params·b + grads·b + slots·state_b      per parameter
//   stage 1 (optimizer)     params and grads whole, optimizer state / N
//   stage 2 (+ gradients)   params whole, grads and optimizer state / N
//   stage 3 (+ parameters)  everything / N
// fp32 AdamW (b = 4, 2 slots of 4): 16 B/param; at 4 ranks 10 / 7 / 4 B for stages 1 / 2 / 3.
//
//   ModelStateInputs in;  in.numel = 124'439'808;  in.zero_stage = 2;  in.world = 4;
//   ModelStateBytes s = zero_model_state(in);        // s.total() / in.numel == 7 (+ padding)
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include <trainbox/train/config.h>

namespace trainbox::train {

struct ModelStateInputs {
  std::int64_t numel = 0;         // trainable parameters (elements)
  int param_bytes = 4;            // bytes per parameter element (fp32 master weights: 4)
  int grad_bytes = 4;             // bytes per gradient element
  int optimizer_slots = 2;        // state tensors per parameter: adam/adamw 2, sgd with momentum 1, plain sgd 0
  int state_bytes = 4;            // bytes per optimizer-state element
  int zero_stage = 0;             // 0..3
  int world = 1;                  // ranks the state is sharded over
  std::int64_t pad_multiple = 0;  // the flat buffer is padded to a multiple of this (0: world)
};

struct ModelStateBytes {
  std::int64_t params = 0, grads = 0, optimizer = 0;
  std::int64_t padding_elements = 0;  // added to split the flat buffer into equal shards (0 at stage 0)
  std::int64_t total() const { return params + grads + optimizer; }
};

// Per-rank model state. Throws UsageError for a stage outside 0..3 or a world < 1.
ModelStateBytes zero_model_state(const ModelStateInputs& in);

// Optimizer state tensors per parameter for optim.name (adam, adamw: 2; sgd: 1 with momentum, else 0).
int optimizer_slots(const OptimConfig& o);

// dist.zero_stage from the config when the key exists in this build's table, else 0.
int configured_zero_stage(const Config& c);
bool has_zero_stage_key();

// Activation bytes as a function of the micro-batch, from measurements: a + k·batch (one
// measurement: k·batch with a = 0).
struct ActivationModel {
  double fixed = 0, per_sample = 0;
  std::int64_t at(std::int64_t batch) const;
  static ActivationModel from(std::int64_t batch1, std::int64_t bytes1, std::int64_t batch2 = 0,
                              std::int64_t bytes2 = 0);
};

struct PlanInputs {
  std::string model, device;
  std::int64_t numel = 0, buffers = 0;
  ModelStateInputs state;      // zero_stage, world, slots as configured
  bool zero_available = true;  // this build has dist.zero_stage: other stages may be proposed
  std::string optimizer;       // optim.name
  std::int64_t micro_batch = 1, accumulate = 1;
  std::string checkpointing = "none";  // model.activation_checkpointing as configured
  ActivationModel activations;         // as configured (measured)
  std::optional<ActivationModel>
      checkpointed;  // with model.activation_checkpointing = "blocks" (measured), if the model has blocks

  // --- the other phases (all measured or counted by plan_training; 0 leaves a part out) ---
  std::int64_t eval_batch = 0;        // train.eval_batch_size, at most the evaluated split (0: no evaluation)
  ActivationModel eval_activations;   // one forward + loss without gradients, in eval mode (measured)
  std::int64_t eval_measured_at = 0;  // the batch it was measured at (larger ones extrapolated)
  std::int64_t optimizer_step = 0;    // the optimizer step's temporaries beyond its state (measured)
  std::int64_t data = 0;              // the dataset held on the device (CPU; CUDA with data.device_resident)
  std::int64_t train_sample_bytes = 0, eval_sample_bytes = 0;  // one sample's input + target
  std::int64_t prefetch = 0;                                   // data.prefetch: batches prepared ahead
  bool host_device = true;                                     // a checkpoint's host copies land on this device (CPU)
  std::string compression = "none";                            // dist.grad_compression
  bool error_feedback = true;                                  // dist.powersgd.error_feedback
  std::vector<std::int64_t> param_numel;  // each trainable parameter, registration order (gradient buckets)
  std::int64_t first_bucket_bytes = 1 << 20, bucket_cap_bytes = 25 << 20;  // dist.first_bucket_mb, bucket_cap_mb
  std::vector<std::int64_t> unit_numel;  // stage 3: each unit's parameters, forward order (models' mark_unit)
  // LoRA (models/lora.h): the frozen base, held whole on every rank at model.base_dtype (no gradient, no state)
  std::int64_t frozen = 0;   // bytes
  std::string frozen_dtype;  // "bf16", …
  // A full fine-tune of a llama: what a LoRA fine-tune of it would need instead (0: not offered), in words
  std::int64_t lora_alternative = 0;
  std::string lora_alternative_text;
};

// One phase of the job: what a rank holds during it.
struct PlanPhase {
  std::string name;        // "training step", "evaluation", "checkpoint save"
  std::int64_t bytes = 0;  // the whole phase: the persistent bytes plus its own
  std::int64_t own = 0;    // what only this phase holds
  std::string what;        // its own bytes in words: "activations at micro-batch 8 (measured), …"
};

struct PlanFigures {
  ModelStateBytes state;
  std::int64_t activations = 0, buffers = 0;  // the training step's activations (measured)
  std::int64_t compression = 0;               // PowerSGD: the error feedback and the input copy, a gradient each
  std::int64_t data = 0;                      // the dataset on the device
  std::int64_t frozen = 0;                    // LoRA's frozen base
  std::vector<PlanPhase> phases;              // training step, evaluation (if any), checkpoint save
  // Held through the whole job: model state, compression state, buffers, data, a frozen base.
  std::int64_t persistent() const { return state.total() + compression + buffers + data + frozen; }
  // The largest phase: what the budget is gated on.
  const PlanPhase& peak() const;
  std::int64_t total() const { return peak().bytes; }
};
PlanFigures plan_figures(const PlanInputs& in);

// A change to the job and what a rank then needs.
struct PlanChange {
  int zero_stage = 0;
  bool checkpointing = false;  // model.activation_checkpointing = "blocks" (when not configured already)
  std::int64_t micro_batch = 1, accumulate = 1;
  std::int64_t eval_batch = 0;  // train.eval_batch_size
  std::int64_t bytes = 0;
  double cost = 0;          // the ordering below: lower is cheaper
  std::string description;  // "dist.zero_stage = 2 at 4 ranks: 7.1 GiB per rank"
};
// The cheapest change that fits `budget` bytes per rank (its largest phase), or nullopt when
// none does. The changes, cheapest first (docs/trainer.md, "Memory plan"): a smaller
// train.eval_batch_size (the same result, a little slower evaluation: +0.005 per halving),
// ZeRO stage 1 or 2 (no extra compute, the same traffic as DDP), activation checkpointing
// (about one more forward: +0.33), ZeRO stage 3 (1.5x the traffic: +0.5), a smaller
// micro-batch with more accumulation (the same global batch, smaller kernels: +0.2 per
// halving); combinations add their costs. Stages are proposed only at a world > 1 and when
// zero_available.
std::optional<PlanChange> cheapest_fit(const PlanInputs& in, std::int64_t budget);
// The change that needs the least memory (what "none fits" reports).
PlanChange smallest(const PlanInputs& in);

// `trainbox train --plan`: the plan of the job `config` describes at `world` ranks, its
// activations measured by one forward/backward of the model at the configured micro-batch on
// the configured device (and at half of it, and with model.activation_checkpointing =
// "blocks", for the changes the plan weighs). Nothing is trained and nothing written. Needs an
// exact counter on the device: on CPU, install_cpu_allocation_counter() first
// (train/allocation_counter.h). Defined in the torch library (src/train/plan.cpp).
// Throws ConfigError / UsageError.
PlanInputs plan_training(const Config& config, int world);

// The plan as text (one block, `#` header lines) and as JSON; `budget` 0: none given.
std::string format_plan(const PlanInputs& in, std::int64_t budget);
nlohmann::json plan_json(const PlanInputs& in, std::int64_t budget);

// "2.00 GiB", from a CUDA out-of-memory message ("Tried to allocate 2.00 GiB"); "" if absent.
std::string oom_request(const std::string& message);
// The one line a CUDA out-of-memory error becomes (docs/troubleshooting.md).
std::string oom_line(int rank, const std::string& message, const PlanFigures& plan, std::int64_t micro_batch,
                     const std::string& checkpointing, int zero_stage, int world);

}  // namespace trainbox::train
