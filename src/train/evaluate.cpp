#include "evaluate.h"

#include <torch/torch.h>

#include <trainbox/train/amp.h>

namespace trainbox::train {

EvalResult evaluate(torch::nn::Module& module, const ForwardFn& forward, const LossFn& loss,
                    const std::vector<std::pair<std::string, MetricFn>>& metrics, data::BatchLoader& loader,
                    const EvalOptions& o) {
  torch::NoGradGuard ng;
  module.eval();
  loader.start_epoch(0);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(o.device);
  auto loss_sum = torch::zeros({}, f64);
  auto correct = torch::zeros({}, torch::TensorOptions().dtype(torch::kInt64).device(o.device));
  auto counted = torch::zeros({}, torch::TensorOptions().dtype(torch::kInt64).device(o.device));
  std::vector<torch::Tensor> metric_sums(metrics.size());
  for (auto& m : metric_sums) m = torch::zeros({}, f64);
  EvalResult r;
  bool class_scores = true;
  while (auto b = loader.next()) {
    if (o.heartbeat) o.heartbeat->phase("eval");  // each batch is progress: a long evaluation is not a stall
    torch::Tensor out;
    {
      AutocastGuard ac(o.device.type(), o.amp_dtype, o.amp);
      out = forward(b->x);
    }
    out = out.is_floating_point() ? out.to(torch::kFloat32) : out;
    // Targets the loss counts (a masked text dataset labels the rest -100), kept on the device:
    // no host sync per batch.
    const auto targets = b->y.is_floating_point() ? torch::full({}, b->y.numel(), counted.options())
                                                  : b->y.ne(-100).sum().to(counted.device());
    // The batch's mean loss weighted by its targets: the split's loss is the mean per target.
    loss_sum += loss ? loss(out, b->y).to(torch::kFloat64) * targets.to(torch::kFloat64)
                     : logits_cross_entropy(out, b->y, /*sum=*/true).to(torch::kFloat64);
    class_scores = class_scores && out.dim() == b->y.dim() + 1 && !b->y.is_floating_point();
    if (class_scores) correct += out.argmax(-1).eq(b->y).sum();
    for (std::size_t i = 0; i < metrics.size(); ++i) metric_sums[i] += metrics[i].second(out, b->y).to(torch::kFloat64);
    r.samples += b->y.size(0);
    counted += targets;
  }
  r.targets = counted.item<std::int64_t>();
  module.train();
  if (r.targets == 0) return r;
  r.loss = loss_sum.item<double>() / double(r.targets);
  r.accuracy = class_scores ? double(correct.item<std::int64_t>()) / double(r.targets) : 0.0;
  for (std::size_t i = 0; i < metrics.size(); ++i)
    r.metrics[metrics[i].first] = metric_sums[i].item<double>() / double(r.samples);
  return r;
}

}  // namespace trainbox::train
