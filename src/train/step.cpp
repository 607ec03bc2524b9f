#include <trainbox/train/step.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <trainbox/data/token_file.h>
#include <trainbox/distributed/ddp.h>
#include <trainbox/util/errors.h>

namespace trainbox::train {

torch::Tensor logits_cross_entropy(const torch::Tensor& out, const torch::Tensor& y, bool sum) {
  namespace F = torch::nn::functional;
  auto opts = F::CrossEntropyFuncOptions();
  if (sum) opts.reduction(torch::kSum);
  if (out.dim() == 2 && y.dim() == 1 && out.size(0) == y.size(0)) return F::cross_entropy(out, y, opts);
  if (out.dim() == 3 && y.dim() == 2 && out.size(0) == y.size(0) && out.size(1) == y.size(1)) {
    if (sum) return F::cross_entropy(out.reshape({-1, out.size(2)}), y.reshape({-1}), opts);
    // The mean over the targets the loss counts (labels -100 skipped, as a masked text dataset
    // gives): a batch of only skipped targets is 0, not torch's 0/0 = NaN.
    const auto total = F::cross_entropy(out.reshape({-1, out.size(2)}), y.reshape({-1}),
                                        F::CrossEntropyFuncOptions().reduction(torch::kSum));
    return total / y.ne(-100).sum().clamp_min(1).to(total.scalar_type());
  }
  throw UsageError(fmt::format("the model's output has shape [{}] but the targets have shape [{}]: cross-entropy needs "
                               "logits [B, C] for targets [B], or [B, T, C] for targets [B, T]",
                               fmt::join(out.sizes(), ", "), fmt::join(y.sizes(), ", ")),
                   "make forward() return one row of class scores per target (or pass your own loss to Trainer::loss)");
}

TrainStep::TrainStep(ForwardFn forward, LossFn loss, Optimizer& opt, GradScaler& scaler,
                     dist::DistributedDataParallel* ddp, StepOptions o)
    : forward_(std::move(forward)),
      loss_(loss ? std::move(loss)
                 : LossFn([](const torch::Tensor& o, const torch::Tensor& t) { return logits_cross_entropy(o, t); })),
      opt_(opt),
      scaler_(scaler),
      ddp_(ddp),
      o_(o),
      params_(opt.params()) {
  if (ddp_ && ddp_->sharded())  // each rank holds a shard of the gradients: the inf/NaN check spans them all
    scaler_.set_found_inf_sync([d = ddp_](torch::Tensor& found_inf) { d->allreduce_max(found_inf); });
}

torch::Tensor TrainStep::forward_loss(const torch::Tensor& x, const torch::Tensor& y) {
  if (ddp_) ddp_->before_forward();
  torch::Tensor loss;
  {
    AutocastGuard ac(o_.device_type, o_.amp_dtype, o_.amp);
    loss = loss_(forward_(x), y);
  }
  if (o_.auxiliary_loss)
    if (auto aux = o_.auxiliary_loss(); aux.defined()) loss = loss + aux.to(loss.scalar_type());
  if (loss.dim() != 0)
    throw UsageError(
        fmt::format("the loss function returned a tensor of shape [{}], not a scalar", fmt::join(loss.sizes(), ", ")),
        "return the batch's mean loss (e.g. reduction mean)");
  if (ddp_) ddp_->after_forward(loss);
  return loss;
}

torch::Tensor TrainStep::micro_step(const torch::Tensor& x, const torch::Tensor& y, bool sync) {
  if (!o_.token_mean || y.dim() != 2) {
    auto l = forward_loss(x, y);
    backward(l, sync);
    last_targets_ = torch::Tensor();
    return l.detach();
  }
  // The summed loss over this micro-batch's valid targets, backward divided by a constant of the
  // step (its first micro-batch's target slots, so that the gradients keep a mean's scale for
  // GradScaler and bf16); optimizer_step() turns the sum into the global batch's mean.
  if (ddp_) ddp_->before_forward();
  torch::Tensor sum;
  {
    AutocastGuard ac(o_.device_type, o_.amp_dtype, o_.amp);
    sum = logits_cross_entropy(forward_(x), y, /*sum=*/true);
  }
  if (ddp_) ddp_->after_forward(sum);
  auto count = y.ne(data::kIgnoreIndex).sum();
  if (!step_targets_.defined()) {
    token_scale_ = static_cast<double>(y.numel());
    step_targets_ = count.clone();
  } else {
    step_targets_.add_(count);
  }
  // The auxiliary term weighted by this micro-batch's targets: after the rescale to the global
  // mean it is the target-weighted mean of the micro-batches' terms.
  torch::Tensor aux;
  if (o_.auxiliary_loss) aux = o_.auxiliary_loss();
  auto objective = aux.defined() ? sum + aux.to(sum.scalar_type()) * count.to(sum.scalar_type()) : sum;
  auto scaled = scaler_.scale(objective / token_scale_);
  if (ddp_ && !sync) {
    auto guard = ddp_->no_sync();
    scaled.backward();
  } else {
    scaled.backward();
  }
  last_targets_ = count;
  auto mean = sum.detach() / count.clamp_min(1).to(sum.scalar_type());
  return aux.defined() ? mean + aux.detach().to(mean.scalar_type()) : mean;
}

// token_mean: the gradients hold (1/W) Σ ∇(sum_m / K) over the ranks' micro-batches (DDP
// averages over the W ranks); the global mean's gradient is (1/N) Σ ∇sum_m, N the valid targets
// of every micro-batch on every rank: multiply by W·K / N.
void TrainStep::rescale_to_token_mean() {
  if (!step_targets_.defined()) return;
  auto n = step_targets_.to(torch::kFloat64);
  double world = 1;
  if (ddp_) {
    ddp_->allreduce_sum(n);
    world = ddp_->world_size();
  }
  auto factor = (world * token_scale_) / n.clamp_min(1);
  for (auto& p : params_)
    if (p.grad().defined()) p.grad().mul_(factor.to(p.grad().scalar_type()));
  step_targets_ = torch::Tensor();
}

void TrainStep::backward(const torch::Tensor& loss, bool sync) {
  auto scaled = scaler_.scale(o_.accumulate > 1 ? loss / double(o_.accumulate) : loss);
  if (ddp_ && !sync) {
    auto guard = ddp_->no_sync();  // accumulation micro-batch: reduce only on the last one
    scaled.backward();
  } else {
    scaled.backward();  // with DDP: gradients come back averaged across ranks
  }
}

void TrainStep::optimizer_step() {
  rescale_to_token_mean();
  if (o_.clip_grad_norm > 0) {
    scaler_.unscale(params_);
    if (ddp_ && ddp_->sharded())  // the global norm: each rank's sum of squares, summed over the ranks
      clip_grad_norm(params_, o_.clip_grad_norm, [d = ddp_](torch::Tensor& sq) { d->allreduce_sum(sq); });
    else
      clip_grad_norm(params_, o_.clip_grad_norm);
  }
  scaler_.step(params_, [&] { opt_.step(); });
  scaler_.update();
  opt_.zero_grad();
  if (ddp_) ddp_->after_step();  // sharded: the updated shards all-gathered into whole weights
}

std::unique_ptr<UnitHooksScope> zero3_unit_hooks(dist::DistributedDataParallel& ddp, const dist::DdpOptions& o) {
  if (o.zero_stage < 3) return nullptr;
  dist::DistributedDataParallel* d = &ddp;
  return std::make_unique<UnitHooksScope>(
      o.units, [d](const torch::nn::Module& m) { d->before_unit(m); },
      [d](const torch::nn::Module& m, const torch::Tensor& y) { return d->after_unit(m, y); });
}

}  // namespace trainbox::train
