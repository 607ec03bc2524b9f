#include <trainbox/train/optim.h>

#include <cmath>

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
      momentum_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
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

void Optimizer::step() {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params_) grads.push_back(p.grad());
  if (cfg_.name == "sgd") {
    if (cfg_.momentum > 0) {
      at::_fused_sgd_(params_, grads, momentum_, cfg_.weight_decay, cfg_.momentum, lr_, /*dampening=*/0.0,
                      cfg_.nesterov, /*maximize=*/false, first_step_);
    } else {
      at::_fused_sgd_(params_, grads, {}, cfg_.weight_decay, 0.0, lr_, 0.0, false, false, first_step_);
    }
    first_step_ = false;
    return;
  }
  // The kernels read the step count already incremented (as torch.optim does before calling them).
  at::_foreach_add_(steps_, 1.0);
  const double b1 = cfg_.betas[0], b2 = cfg_.betas[1];
  if (cfg_.name == "adamw")
    at::_fused_adamw_(params_, grads, exp_avg_, exp_avg_sq_, {}, steps_, lr_, b1, b2, cfg_.weight_decay, cfg_.eps,
                      /*amsgrad=*/false, /*maximize=*/false);
  else
    at::_fused_adam_(params_, grads, exp_avg_, exp_avg_sq_, {}, steps_, lr_, b1, b2, cfg_.weight_decay, cfg_.eps,
                     false, false);
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
  ar.write("first_step", torch::tensor(first_step_ ? 1 : 0), true);
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
  torch::Tensor lr, first;
  ar.read("lr", lr, true);
  ar.read("first_step", first, true);
  set_lr(lr.item<double>());
  first_step_ = first.item<int64_t>() != 0;
}

LrSchedule::LrSchedule(const ScheduleConfig& cfg, double base_lr, std::int64_t total_steps, std::int64_t steps_per_epoch)
    : cfg_(cfg), base_(base_lr), total_(std::max<std::int64_t>(1, total_steps)), per_epoch_(std::max<std::int64_t>(1, steps_per_epoch)) {}

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

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  auto norms = at::_foreach_norm(grads, 2);
  auto total = torch::stack(norms).norm(2);
  auto coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
  at::_foreach_mul_(grads, coef);
  return total;
}

}  // namespace trainbox::train
