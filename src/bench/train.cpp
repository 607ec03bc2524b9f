// bench train: samples/s and step time per built-in model and batch size, fp32 or AMP,
// with and without CUDA graphs — measured by running the real trainer (synthetic data) —
// and the step split into data, forward, backward, optimizer and communication from an
// instrumented eager loop (a device sync between phases).
#include <trainbox/bench/bench.h>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/data/dataset.h>
#include <trainbox/data/loader.h>
#include <trainbox/models/models.h>
#include <trainbox/train/amp.h>
#include <trainbox/train/optim.h>
#include <trainbox/train/trainer.h>
#include <trainbox/train/step.h>
#include <trainbox/util/strings.h>
#include <trainbox/util/clock.h>
#include <trainbox/util/errors.h>

namespace trainbox::bench {
namespace {

struct Case {
  std::string model;
  std::int64_t batch;
  train::Amp amp;
  bool graphs;
};

train::Config config_for(const Case& c, const torch::Device& dev, std::int64_t steps) {
  train::Config cfg;
  cfg.model.name = c.model;
  cfg.data.dataset = "synthetic";
  cfg.data.synthetic_samples = std::max<std::int64_t>(c.batch * (steps + 2), 4096);
  cfg.train.batch_size = c.batch;
  cfg.train.amp = c.amp;
  cfg.train.cuda_graphs = c.graphs;
  cfg.train.device = dev.str();
  cfg.train.epochs = 1000;
  cfg.train.max_steps = 2 * steps;  // first window warms up, the second is measured
  cfg.train.log_every = steps;
  cfg.data.device_resident = dev.is_cuda();
  cfg.output.tensorboard = false;
  cfg.output.progress = "off";
  cfg.checkpoint.every_epochs = 0;
  return cfg;
}

// Per-phase milliseconds of an eager step, averaged over `steps` steps after a warm-up.
std::vector<double> phase_split(const Case& c, const torch::Device& dev, std::int64_t steps) {
  train::Config cfg = config_for(c, dev, steps);
  auto data = data::make_synthetic(c.batch * (steps + 3), {1, 28, 28}, 10, 0);
  data::Normalization norm{{0.5f}, {0.25f}};
  data::LoaderOptions lo;
  lo.batch_size = c.batch;
  lo.device = dev;
  lo.device_resident = dev.is_cuda();
  lo.prefetch = 0;
  data::BatchLoader loader(data, norm, lo);
  loader.start_epoch(0);
  torch::manual_seed(0);
  auto model = models::make_model(cfg.model, {1, 28, 28}, 10);
  model->to(dev);
  train::Optimizer opt(model->parameters(), cfg.optim);
  GradScalerOptions so;
  so.enabled = false;  // fp16 is not benchmarked here
  GradScaler scaler(so);
  train::StepOptions sopt;
  sopt.amp = train::autocast_enabled(c.amp);
  sopt.amp_dtype = train::autocast_dtype(c.amp);
  sopt.device_type = dev.type();
  // The trainer's own step, one phase at a time.
  train::TrainStep step([&](const torch::Tensor& x) { return model->forward(x); }, nullptr, opt, scaler, nullptr, sopt);
  auto sync = [&] {
    if (dev.is_cuda()) torch::cuda::synchronize(dev.index());
  };
  std::vector<double> t(5, 0.0);  // data, forward, backward, optimizer, comm
  for (std::int64_t s = 0; s < steps + 3; ++s) {
    const bool timed = s >= 3;
    double t0 = now_seconds();
    auto b = loader.next();
    sync();
    double t1 = now_seconds();
    torch::Tensor loss = step.forward_loss(b->x, b->y);
    sync();
    double t2 = now_seconds();
    step.backward(loss);
    sync();
    double t3 = now_seconds();
    step.optimizer_step();
    sync();
    double t4 = now_seconds();
    if (timed) {
      t[0] += t1 - t0;
      t[1] += t2 - t1;
      t[2] += t3 - t2;
      t[3] += t4 - t3;
    }
  }
  for (auto& x : t) x = x / double(steps) * 1e3;
  return t;  // comm stays 0: a single process (data-parallel runs overlap it with backward)
}

}  // namespace

BenchReport bench_train(const BenchOptions& o) {
  BenchReport r("train", o.live);
  describe_run(r, o.device);
  const std::int64_t steps = o.quick ? 20 : 100;
  std::vector<Case> cases;
  // The mixed-precision rows are bf16 on every device: CPU autocast is bf16 only, and fp16 would
  // need the GradScaler, whose skip decision syncs the host every step (and phase_split runs
  // without one).
  const train::Amp amp = train::Amp::kBf16;
  const std::string bf16_emulated = emulated_reason("bf16", o.device);  // then its rows are left out
  for (const auto& [model, batch] : std::vector<std::pair<std::string, std::int64_t>>{
           {"mlp", 64}, {"cnn", o.quick && !o.device.is_cuda() ? 64 : 512}}) {
    cases.push_back({model, batch, train::Amp::kOff, false});
    if (bf16_emulated.empty()) cases.push_back({model, batch, amp, false});
    if (o.device.is_cuda()) cases.push_back({model, batch, train::Amp::kOff, true});
  }
  if (!o.quick && o.device.is_cuda()) cases.push_back({"resnet", 256, amp, false});
  r.header("data", "synthetic 1x28x28, 10 classes; Adam; the real trainer for throughput");
  r.header("steps", fmt::format("{} warm-up + {} measured; split from an eager loop with a device sync per phase",
                                steps, steps));
  if (!bf16_emulated.empty())
    r.header("skipped", "the amp = bf16 rows: " + bf16_emulated + ", where a bf16 step is many times an fp32 one");
  r.columns({"model", "batch", "amp", "graphs", "samples_per_s", "step_ms", "data_ms", "fwd_ms", "bwd_ms", "optim_ms",
             "comm_ms"});
  // A folder of this process's own (mkdtemp): the run dirs below are removed with it, and a
  // predictable name in a shared /tmp could be someone else's folder or link.
  const char* base = std::getenv("TMPDIR");
  std::string tmp = std::string(base && *base ? base : "/tmp") + "/trainbox-bench-XXXXXX";
  if (!::mkdtemp(tmp.data()))
    throw SystemError(fmt::format("cannot create {}: {}", tmp, errno_text(errno)), "set TMPDIR to a writable folder");
  for (const auto& c : cases) {
    train::TrainOptions to;
    to.config = config_for(c, o.device, steps);
    to.run_dir = tmp + "/" + c.model;
    to.quiet = true;
    // The public Trainer, as a user would drive it; the rate is the last (measured) window's.
    auto splits = data::load_splits(to.config.data, 0, to.config.model.block_size);
    torch::manual_seed(0);
    auto model = models::make_model(to.config.model, {1, 28, 28}, 10);
    double rate = 0;
    train::Trainer trainer(to);
    trainer.model(model).data(splits).on_step([&](const train::StepInfo& s) { rate = s.samples_per_s; });
    trainer.fit();
    std::filesystem::remove_all(to.run_dir);
    std::vector<nlohmann::json> split_ms(5, "-");
    if (!c.graphs) {
      auto t = phase_split(c, o.device, std::min<std::int64_t>(steps, 30));
      for (int i = 0; i < 5; ++i) split_ms[i] = t[i];
    }
    r.add({c.model, c.batch, train::amp_name(c.amp), c.graphs ? "yes" : "no", rate,
           rate > 0 ? 1e3 * c.batch / rate : 0.0, split_ms[0], split_ms[1], split_ms[2], split_ms[3], split_ms[4]});
  }
  std::filesystem::remove_all(tmp);
  return r;
}

extern const BenchPlugin kTrainBench{
    "train", "samples/s of the real trainer per model and batch, with the step's phase split", false, bench_train};

}  // namespace trainbox::bench
