#include <trainbox/train/preflight_model.h>

#include <algorithm>
#include <chrono>

#include <torch/torch.h>

#include <trainbox/data/dataset.h>
#include <trainbox/distributed/worker_env.h>
#include <trainbox/models/models.h>
#include <trainbox/train/device.h>
#include <trainbox/train/optim.h>
#include <trainbox/train/step.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/clock.h>

#include "compression_state.h"

namespace trainbox::train {

dist::LinkAdviceInputs preflight_model(const Config& cfg) {
  validate(cfg);
  const dist::WorkerEnv wenv = dist::WorkerEnv::from_environment();
  const torch::Device dev = choose_device(cfg.train.device, wenv.local_rank, wenv.local_world_size).device;
  const data::Splits splits =
      data::load_splits(cfg.data, static_cast<std::uint64_t>(cfg.train.seed), cfg.model.block_size);
  models::InputShape shape;
  if (splits.sample_shape.size() == 3) shape = {splits.sample_shape[0], splits.sample_shape[1], splits.sample_shape[2]};
  torch::manual_seed(static_cast<std::uint64_t>(cfg.train.seed));
  auto model = models::make_model(cfg.model, shape, splits.classes);
  model->to(dev);
  model->train();
  dist::LinkAdviceInputs in;
  in.model = cfg.model.name;
  in.configured = compression_options(cfg.dist);  // dist.grad_compression, dist.powersgd.*
  std::vector<torch::Tensor> params;
  for (const auto& p : model->parameters())
    if (p.requires_grad()) params.push_back(p), in.shapes.push_back(p.sizes().vec());
  // --- one step's compute on the micro-batch a rank trains (train.batch_size) ---
  const std::int64_t n = splits.train->size();
  if (n < 1) throw ConfigError("the training set is empty", "check data.path and data.limit");
  auto ex = splits.train->get_batch(torch::arange(cfg.train.batch_size, torch::kLong).remainder(n));
  const auto x = ex.x.to(dev), y = ex.y.to(dev);
  Optimizer opt(params, cfg.optim);
  std::vector<double> times;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    logits_cross_entropy(model->forward(x), y).backward();
    opt.step();
    if (dev.is_cuda()) torch::cuda::synchronize();
    if (i > 0) times.push_back(seconds_since(t0));
  }
  std::sort(times.begin(), times.end());
  in.compute_s = times[times.size() / 2];
  return in;
}

}  // namespace trainbox::train
