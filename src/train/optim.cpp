#include <trainbox/train/optim.h>

#include <cmath>
#include <functional>
#include <sstream>

#include <torch/torch.h>

#include <trainbox/util/errors.h>

namespace trainbox::train {

Optimizer::Optimizer(std::vector<torch::Tensor> params, const OptimConfig& cfg)
    : cfg_(cfg), params_(std::move(params)), lr_value_(cfg.lr) {
  if (params_.empty()) throw ConfigError("the model has no trainable parameters");
  init_state();
}

void Optimizer::init_state() {
  torch::NoGradGuard ng;
  const auto dev = params_.front().device();
  lr_ = torch::full({}, lr_value_, torch::TensorOptions().dtype(torch::kFloat32).device(dev));
  exp_avg_.clear();
  exp_avg_sq_.clear();
  momentum_.clear();
  steps_.clear();
  for (const auto& p : params_) {
    if (cfg_.name == "sgd") {
      // SGD without momentum keeps no state (bound_step passes no buffers; the memory plan counts none)
      if (cfg_.momentum > 0) momentum_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    } else {
      exp_avg_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      exp_avg_sq_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      steps_.push_back(torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(dev)));
    }
    // Gradient buffers exist from the start: backward accumulates into them in place, which
    // keeps their addresses fixed (CUDA graphs) and lets step() run before any backward.
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  }
}

std::function<void()> Optimizer::bound_step() const {
  // Everything the kernels read is captured here, by value: tensors (whose storage the
  // kernels update in place) and plain numbers. Nothing host-side is read when the closure
  // runs, so calling it N times is what N replays of a graph captured around one call do.
  std::vector<torch::Tensor> grads;
  for (const auto& p : params_) grads.push_back(p.grad());
  if (cfg_.name == "sgd") {
    // is_first_step is always false: the momentum buffers start at zero and dampening is 0,
    // so the first update sets buf = 0·momentum + g = g, exactly torch.optim's clone of g.
    // (A host-side "first step" flag would be baked into a captured graph and replayed on
    // every step, wiping the momentum each time.) Without momentum: no buffers, no flag.
    const bool momentum = cfg_.momentum > 0;
    return [params = params_, grads, bufs = momentum ? momentum_ : std::vector<torch::Tensor>{}, cfg = cfg_, lr = lr_,
            momentum] {
      torch::NoGradGuard ng;
      at::_fused_sgd_(params, grads, bufs, cfg.weight_decay, momentum ? cfg.momentum : 0.0, lr,
                      /*dampening=*/0.0, momentum && cfg.nesterov, /*maximize=*/false, /*is_first_step=*/false);
    };
  }
  return [params = params_, grads, m = exp_avg_, v = exp_avg_sq_, steps = steps_, cfg = cfg_, lr = lr_] {
    torch::NoGradGuard ng;
    // The kernels read the step count already incremented (as torch.optim does before calling them).
    at::_foreach_add_(steps, 1.0);
    const double b1 = cfg.betas[0], b2 = cfg.betas[1];
    if (cfg.name == "adamw")
      at::_fused_adamw_(params, grads, m, v, {}, steps, lr, b1, b2, cfg.weight_decay, cfg.eps, /*amsgrad=*/false,
                        /*maximize=*/false);
    else
      at::_fused_adam_(params, grads, m, v, {}, steps, lr, b1, b2, cfg.weight_decay, cfg.eps, false, false);
  };
}

void Optimizer::step() { bound_step()(); }

std::vector<std::pair<std::string, std::vector<torch::Tensor>>> Optimizer::state() const {
  return {{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}, {"momentum", momentum_}, {"step", steps_}};
}

std::vector<torch::Tensor> Optimizer::state_tensors() const {
  std::vector<torch::Tensor> out{lr_};
  for (const auto& [name, ts] : state()) out.insert(out.end(), ts.begin(), ts.end());
  return out;
}

void Optimizer::zero_grad() {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params_)
    if (p.grad().defined()) grads.push_back(p.grad());
  at::_foreach_zero_(grads);
}

void Optimizer::set_lr(double lr) {
  if (lr == lr_value_) return;
  lr_value_ = lr;
  torch::NoGradGuard ng;
  lr_.fill_(lr);
}

void Optimizer::save(torch::serialize::OutputArchive& ar) const {
  auto put = [&](const std::string& prefix, const std::vector<torch::Tensor>& ts) {
    for (std::size_t i = 0; i < ts.size(); ++i) ar.write(prefix + std::to_string(i), ts[i], /*is_buffer=*/true);
  };
  put("exp_avg.", exp_avg_);
  put("exp_avg_sq.", exp_avg_sq_);
  put("momentum.", momentum_);
  put("step.", steps_);
  ar.write("lr", torch::tensor(lr_value_, torch::kFloat64), true);
}

void Optimizer::load(torch::serialize::InputArchive& ar) {
  torch::NoGradGuard ng;
  auto get = [&](const std::string& prefix, std::vector<torch::Tensor>& ts) {
    for (std::size_t i = 0; i < ts.size(); ++i) {
      torch::Tensor t;
      ar.read(prefix + std::to_string(i), t, true);
      if (!t.sizes().equals(ts[i].sizes()))
        throw DataError("checkpoint optimizer state " + prefix + std::to_string(i) + " has shape " +
                            c10::str(t.sizes()) + ", the model needs " + c10::str(ts[i].sizes()),
                        "the checkpoint belongs to a different model or optimizer; start a new run dir");
      ts[i].copy_(t);
    }
  };
  get("exp_avg.", exp_avg_);
  get("exp_avg_sq.", exp_avg_sq_);
  get("momentum.", momentum_);
  get("step.", steps_);
  // Older checkpoints also hold "first_step": no longer read (see bound_step).
  torch::Tensor lr;
  ar.read("lr", lr, true);
  set_lr(lr.item<double>());
}

StateSnapshot::StateSnapshot(const std::vector<torch::Tensor>& tensors, const Optimizer& opt) {
  torch::NoGradGuard ng;
  for (const auto& t : tensors) saved_.push_back(t.detach().clone());
  std::ostringstream os;
  torch::serialize::OutputArchive ar;
  opt.save(ar);
  ar.save_to(os);
  optimizer_state_ = os.str();
}

void StateSnapshot::restore(const std::vector<torch::Tensor>& tensors, Optimizer& opt) const {
  torch::NoGradGuard ng;
  if (tensors.size() != saved_.size())
    throw SystemError("StateSnapshot::restore: " + std::to_string(tensors.size()) + " tensors for a snapshot of " +
                      std::to_string(saved_.size()));
  for (std::size_t i = 0; i < tensors.size(); ++i) tensors[i].detach().copy_(saved_[i]);
  std::istringstream is(optimizer_state_);
  torch::serialize::InputArchive ar;
  ar.load_from(is, opt.params().front().device());
  opt.load(ar);
  opt.zero_grad();
}

LrSchedule::LrSchedule(const ScheduleConfig& cfg, double base_lr, std::int64_t total_steps,
                       std::int64_t steps_per_epoch)
    : cfg_(cfg),
      base_(base_lr),
      total_(std::max<std::int64_t>(1, total_steps)),
      per_epoch_(std::max<std::int64_t>(1, steps_per_epoch)) {}

double LrSchedule::lr(std::int64_t step) const {
  if (cfg_.warmup_steps > 0 && step < cfg_.warmup_steps) return base_ * double(step + 1) / double(cfg_.warmup_steps);
  if (cfg_.name == "step") return base_ * std::pow(cfg_.gamma, double((step / per_epoch_) / cfg_.step_epochs));
  if (cfg_.name == "cosine") {
    const double span = double(std::max<std::int64_t>(1, total_ - cfg_.warmup_steps));
    const double t = std::min(1.0, double(step - cfg_.warmup_steps) / span);
    return cfg_.min_lr + 0.5 * (base_ - cfg_.min_lr) * (1.0 + std::cos(M_PI * t));
  }
  return base_;
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm,
                             const std::function<void(torch::Tensor&)>& sum_across) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return torch::zeros({});
  // Each tensor's norm accumulated in float64: a partition of the same elements into other
  // tensors (flat shards) changes the sum in the 16th digit, not in the float32 result.
  auto norms = at::_foreach_norm(grads, 2, torch::kFloat64);
  auto sq = torch::stack(norms).square().sum();
  if (sum_across) sum_across(sq);
  auto total = sq.sqrt().to(grads.front().scalar_type());
  auto coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
  at::_foreach_mul_(grads, coef);
  return total;
}

}  // namespace trainbox::train
