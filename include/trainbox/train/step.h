// trainbox/train/step.h — one training step: forward under autocast, loss, backward (through
// DDP's bucketed allreduce when data-parallel), then clip, GradScaler and optimizer. The
// Trainer runs it; `trainbox bench train` times its phases; nobody else copies it.
//
//   TrainStep step(forward, loss, opt, scaler, ddp.get(), {.accumulate = 1});
//   torch::Tensor l = step.micro_step(b.x, b.y);   // forward + backward, detached loss
//   step.optimizer_step();                          // clip, unscale, step, update, zero_grad
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include <torch/nn/module.h>
#include <torch/types.h>

#include <trainbox/models/activation_checkpoint.h>
#include <trainbox/train/amp.h>
#include <trainbox/train/optim.h>

namespace trainbox::dist {
class DistributedDataParallel;
struct DdpOptions;
}  // namespace trainbox::dist

namespace trainbox::train {

using ForwardFn = std::function<torch::Tensor(const torch::Tensor& x)>;
// (model output, target) → the mean loss of the batch, a scalar.
using LossFn = std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)>;
// (model output, target) → the metric summed over the batch's samples; reported as the mean per sample.
using MetricFn = std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)>;

// Cross-entropy on logits [B, C] with class targets [B], or per position on [B, T, C] with
// [B, T] (a language model). Any other pair of shapes is a UsageError naming both.
// `sum`: the sum over targets instead of the mean (evaluation).
torch::Tensor logits_cross_entropy(const torch::Tensor& output, const torch::Tensor& target, bool sum = false);

struct StepOptions {
  std::int64_t accumulate = 1;  // micro-batches per optimizer step
  double clip_grad_norm = 0.0;  // 0: off
  bool amp = false;
  torch::ScalarType amp_dtype = torch::kBFloat16;
  torch::DeviceType device_type = torch::kCPU;
  // The built-in loss on token targets [B, T] (a language model, labels -100 skipped): the
  // step's loss is the mean over the valid targets of the whole global batch — every
  // micro-batch of the step and every rank — as torchtitan and Megatron compute it, so that
  // accumulation, world size and how many targets a micro-batch happens to hold (loss masks,
  // packing) do not change the gradient. Each micro-batch's summed loss goes backward divided by
  // a constant; optimizer_step() rescales the gradients once it knows the global count (one
  // all-reduce of a scalar per step). Off, or targets [B]: each micro-batch's own mean.
  bool token_mean = false;
  // A term added to each micro-batch's loss after its forward (an MoE router's load-balancing loss:
  // models::Model::auxiliary_loss): a scalar, or undefined for none. With token_mean it is weighted
  // by the micro-batch's valid targets, so one rank and one micro-batch give loss + aux exactly.
  std::function<torch::Tensor()> auxiliary_loss;
};

class TrainStep {
 public:
  TrainStep(ForwardFn forward, LossFn loss, Optimizer& opt, GradScaler& scaler, dist::DistributedDataParallel* ddp,
            StepOptions o);

  // The phases, for timing; micro_step and optimizer_step are what training calls.
  torch::Tensor forward_loss(const torch::Tensor& x, const torch::Tensor& y);  // attached loss
  void backward(const torch::Tensor& loss, bool sync = true);  // sync = false: DDP accumulates without allreduce
  // Returns the micro-batch's mean loss (detached); with token_mean on token targets, the
  // number of targets it counted is last_targets() (an int64 scalar on the device).
  torch::Tensor micro_step(const torch::Tensor& x, const torch::Tensor& y, bool sync = true);
  const torch::Tensor& last_targets() const { return last_targets_; }
  void optimizer_step();  // (token_mean: the rescale,) clip, GradScaler step and update, zero_grad

  const std::vector<torch::Tensor>& params() const { return params_; }

 private:
  ForwardFn forward_;
  LossFn loss_;
  Optimizer& opt_;
  GradScaler& scaler_;
  dist::DistributedDataParallel* ddp_;
  void rescale_to_token_mean();

  StepOptions o_;
  std::vector<torch::Tensor> params_;
  // token_mean: the divisor the step's summed losses went backward with (the first micro-batch's
  // target slots) and the valid targets counted so far this step, on the device.
  double token_scale_ = 0;
  torch::Tensor step_targets_, last_targets_;
};

// dist.zero_stage = 3 (distributed/ddp.h): while the returned scope lives, the forwards of the
// units the DDP was built on (o.units, e.g. trainbox::find_units(model)) call its before_unit()
// and after_unit(). Destroy it before the DDP. Null at other stages.
//   o.units = find_units(model); DistributedDataParallel ddp(model, pg, o);
//   auto hooks = zero3_unit_hooks(ddp, o);
std::unique_ptr<UnitHooksScope> zero3_unit_hooks(dist::DistributedDataParallel& ddp, const dist::DdpOptions& o);

}  // namespace trainbox::train
