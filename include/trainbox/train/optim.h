// trainbox/train/optim.h — optimizers on ATen's fused kernels, and LR schedules.
//
// SGD (momentum, Nesterov, weight decay), Adam and AdamW run as one fused kernel call
// per step (at::_fused_sgd_ / _fused_adam_ / _fused_adamw_, the kernels behind
// torch.optim's fused=True) with the learning rate and step counts held as tensors on
// the parameters' device: a step launches a handful of kernels whatever the parameter
// count, never syncs with the host, and can be captured in a CUDA graph. Schedules set
// the learning rate between steps without invalidating a captured graph.
//
//   Optimizer opt(model->parameters(), cfg.optim);
//   LrSchedule sched(cfg.schedule, cfg.optim.lr, total_steps, steps_per_epoch);
//   opt.set_lr(sched.lr(step)); opt.step(); opt.zero_grad();
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/types.h>

#include <trainbox/train/config.h>

namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace trainbox::train {

class Optimizer {
 public:
  Optimizer(std::vector<torch::Tensor> params, const OptimConfig& cfg);

  void step();  // = bound_step()()
  // One step's kernel launches as a closure that reads no host-side state when called:
  // the graph-safe form. A CUDA graph captured around one call replays exactly it, so N
  // calls of the closure must equal N step()s (tests/unit/torch/test_optim.cpp checks it).
  // Valid while the optimizer lives; set_lr() still takes effect (the rate is a tensor).
  std::function<void()> bound_step() const;
  void zero_grad();        // in place (keeps gradient buffers: graph-safe)
  void set_lr(double lr);  // copies into the device-side lr tensor
  double lr() const { return lr_value_; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  // The per-parameter state under the names save() writes ("exp_avg", "exp_avg_sq",
  // "momentum", "step"), each list parallel to params() or empty. Handles: writing into them
  // writes the optimizer's state (sharded checkpoints, train/zero_state.h).
  std::vector<std::pair<std::string, std::vector<torch::Tensor>>> state() const;
  std::vector<torch::Tensor> state_tensors() const;  // all of them and the lr tensor (memory accounting)

  void save(torch::serialize::OutputArchive& ar) const;
  void load(torch::serialize::InputArchive& ar);

 private:
  void init_state();
  OptimConfig cfg_;
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_, momentum_, steps_;
  torch::Tensor lr_;
  double lr_value_;
};

// What a few extra training steps change — the given tensors (weights, buffers) and the
// optimizer's state — kept to be put back afterwards. CUDA-graph warm-up runs real updates
// that an eager run never does; this undoes them.
//   StateSnapshot snap(tensors, opt);  …warm-up steps…;  snap.restore(tensors, opt);
class StateSnapshot {
 public:
  StateSnapshot(const std::vector<torch::Tensor>& tensors, const Optimizer& opt);
  void restore(const std::vector<torch::Tensor>& tensors, Optimizer& opt) const;  // also zeroes the gradients

 private:
  std::vector<torch::Tensor> saved_;
  std::string optimizer_state_;
};

// Learning rate at optimizer step `step` (0-based): linear warm-up, then constant, step
// decay (per epoch) or cosine to min_lr over the remaining steps.
class LrSchedule {
 public:
  LrSchedule(const ScheduleConfig& cfg, double base_lr, std::int64_t total_steps, std::int64_t steps_per_epoch);
  double lr(std::int64_t step) const;

 private:
  ScheduleConfig cfg_;
  double base_;
  std::int64_t total_, per_epoch_;
};

// Scales gradients so their global L2 norm is at most max_norm; returns the norm before
// clipping (a device tensor: no host sync). Where the gradients are shards of one whole
// (sharded training), `sum_across` adds the local sum of squares over the ranks, so every rank
// clips by the global norm. The norm is summed in float64 and rounded once, so it does not
// depend on how the gradients are cut into tensors: plain DDP's per-parameter gradients and a
// stage's flat shards give the same norm, and the same clipped steps.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm,
                             const std::function<void(torch::Tensor&)>& sum_across = nullptr);

}  // namespace trainbox::train
