// bench train: samples/s and step time per built-in model (mlp and cnn on synthetic images, the
// GPT on generated text) and batch size, fp32 or AMP, with and without CUDA graphs — measured by
// running the real trainer — or of a job of your own (--config FILE, --set KEY=VALUE: its
// model, data, optimizer and amp); and the step split into data, forward, backward, optimizer
// and communication from an instrumented eager loop (a device sync between phases).
#include <trainbox/bench/bench.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/data/dataset.h>
#include <trainbox/data/loader.h>
#include <trainbox/distributed/worker_env.h>
#include <trainbox/io/made_dirs.h>
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
  train::Config cfg;  // the job: the model, its data, batch, amp, graphs
};

// What every measured job gets: a fixed number of steps, no checkpoints, nothing printed.
void as_measured(train::Config& cfg, std::int64_t steps) {
  cfg.train.epochs = 1000;
  cfg.train.max_steps = 2 * steps;  // first window warms up, the second is measured
  cfg.train.log_every = steps;
  cfg.output.tensorboard = false;
  cfg.output.progress = "off";
  cfg.checkpoint.every_epochs = 0;
  cfg.checkpoint.every_steps = 0;
}

Case builtin(const std::string& model, std::int64_t batch, train::Amp amp, bool graphs, const torch::Device& dev,
             std::int64_t steps, const std::string& text) {
  train::Config cfg;
  cfg.model.name = model;
  if (model == "gpt") {  // the GPT of configs/text_gpt.toml on generated text
    cfg.model.n_layer = 4;
    cfg.model.n_head = 4;
    cfg.model.n_embd = 128;
    cfg.model.block_size = 128;
    cfg.data.dataset = "text";
    cfg.data.path = text;
    cfg.optim.name = "adamw";
  } else {
    cfg.data.dataset = "synthetic";
    cfg.data.synthetic_samples = std::max<std::int64_t>(batch * (steps + 2), 4096);
  }
  cfg.train.batch_size = batch;
  cfg.train.amp = amp;
  cfg.train.cuda_graphs = graphs;
  cfg.train.device = dev.str();
  cfg.data.device_resident = dev.is_cuda();
  as_measured(cfg, steps);
  return {cfg};
}

// --config FILE / --set KEY=VALUE: the job as configured, on --device.
Case from_config(const TrainBenchOptions& t, const torch::Device& dev, std::int64_t steps) {
  train::Config cfg = t.config.empty() ? train::Config{} : train::load_config(t.config);
  for (const auto& s : t.overrides) train::apply_override(cfg, s);
  cfg.train.device = dev.str();
  train::validate(cfg);
  // A ZeRO stage or compression acts between ranks: measured under a launcher, where every rank
  // runs this job (BenchPlugin::every_rank); in one process it would do nothing, and a number
  // measured without it would be read as its.
  const dist::WorkerEnv env = dist::WorkerEnv::from_environment();
  if ((cfg.dist.zero_stage > 0 || cfg.dist.grad_compression != "none") && env.world_size < 2)
    throw UsageError(
        fmt::format("dist.zero_stage = {} and dist.grad_compression = \"{}\" act between ranks; this "
                    "bench train is one process",
                    cfg.dist.zero_stage, cfg.dist.grad_compression),
        fmt::format("run it on 2 ranks: trainbox run --nproc-per-node 2 -- trainbox bench train{}{}",
                    t.config.empty() ? "" : " --config " + t.config,
                    t.overrides.empty() ? "" : fmt::format(" --set {}", fmt::join(t.overrides, " --set "))));
  as_measured(cfg, steps);
  return {cfg};
}

// Random words, deterministic: text for the GPT row (about 200 KB).
std::string write_text(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/words.txt";
  static const char* kWords[] = {"the", "cat", "sat", "on", "a", "mat", "and", "ran", "to", "its", "home", "late"};
  std::mt19937 rng(1);
  std::string text;
  while (text.size() < 200'000) text += std::string(kWords[rng() % 12]) + (rng() % 9 == 0 ? ".\n" : " ");
  std::ofstream(path) << text;
  return path;
}

// Per-phase milliseconds of an eager step, averaged over `steps` steps after a warm-up.
std::vector<double> phase_split(const Case& c, const torch::Device& dev, std::int64_t steps) {
  const train::Config& cfg = c.cfg;
  const data::Splits splits = data::load_splits(cfg.data, 0, cfg.model.block_size);
  data::LoaderOptions lo;
  lo.batch_size = cfg.train.batch_size;
  lo.device = dev;
  lo.device_resident = cfg.data.device_resident;
  lo.prefetch = 0;
  data::BatchLoader loader(splits.train, lo);
  loader.start_epoch(0);
  models::InputShape shape;
  if (splits.sample_shape.size() == 3) shape = {splits.sample_shape[0], splits.sample_shape[1], splits.sample_shape[2]};
  torch::manual_seed(0);
  auto model = models::make_model(cfg.model, shape, splits.classes);
  model->to(dev);
  train::Optimizer opt(model->parameters(), cfg.optim);
  GradScalerOptions so;
  so.enabled = false;  // fp16 is not benchmarked here
  GradScaler scaler(so);
  train::StepOptions sopt;
  sopt.amp = train::autocast_enabled(cfg.train.amp);
  sopt.amp_dtype = train::autocast_dtype(cfg.train.amp);
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
    if (!b) {  // the epoch is over: the next one
      loader.start_epoch(s);
      b = loader.next();
    }
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

// Where the rows' run dirs go, and whether this process made it: only then is it removed, with
// the run dirs in it. One process: a mkdtemp folder of its own (a predictable name in a shared
// /tmp could be someone else's folder or link). Under a launcher the ranks of the job share it (a
// ZeRO stage's final checkpoint is written shard by shard into one run dir): one name per user
// and job, a real folder of this user's; the rank that made it (io::MadeDirs: by inode and birth
// time) is the one that may remove it, and only while it is still that folder.
class BenchFolder {
 public:
  BenchFolder(const dist::WorkerEnv& env, bool ranks) {
    const char* base = std::getenv("TMPDIR");
    const std::string root = base && *base ? base : "/tmp";
    if (!ranks) {
      path_ = root + "/trainbox-bench-XXXXXX";
      if (!::mkdtemp(path_.data()))
        throw SystemError(fmt::format("cannot create {}: {}", path_, errno_text(errno)),
                          "set TMPDIR to a writable folder");
      mkdtemp_ = true;
      return;
    }
    // The job's id and attempt too: a folder a killed job left is not the next job's.
    const char* id = std::getenv("TORCHELASTIC_RUN_ID");
    path_ = fmt::format("{}/trainbox-bench-{}-{}-{}-{}-{}", root, ::getuid(), env.master_addr, env.master_port,
                        id && *id ? id : "none", env.restart_count);
    try {
      made_.create(path_);  // every rank; one makes it
    } catch (const SystemError&) {
    }
    struct stat st {};
    if (::lstat(path_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid())
      throw SystemError(fmt::format("{} is not a folder of this user's", path_),
                        "remove it, or set TMPDIR to a folder of your own");
  }
  // Removed with the run dirs in it, whatever ended the rows: made by this process, still that folder.
  ~BenchFolder() {
    std::error_code ec;
    if (mkdtemp_ || (made_.made_any() && made_.intact())) std::filesystem::remove_all(path_, ec);
  }
  BenchFolder(const BenchFolder&) = delete;
  BenchFolder& operator=(const BenchFolder&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool mkdtemp_ = false;
  io::MadeDirs made_;
};

}  // namespace

BenchReport bench_train(const BenchOptions& o) {
  BenchReport r("train", o.live);
  describe_run(r, o.device);
  const std::int64_t steps = o.quick ? 20 : 100;
  // Under a launcher every rank runs the job (kTrainBench.every_rank): one job, data-parallel.
  const dist::WorkerEnv env = dist::WorkerEnv::from_environment();
  const bool ranks = env.source != dist::WorkerSource::kSingle;
  if (ranks && !o.train.given()) {  // rank 0 alone (every_rank says no): a Trainer would wait for the others
    r.header("skipped",
             "the built-in rows under a launcher: bench train measures one data-parallel job of your "
             "own there (--config FILE, with --set dist.zero_stage=N or dist.grad_compression=…); run "
             "it without a launcher for the built-in rows");
    return r;
  }
  const BenchFolder folder(env, ranks);
  const std::string& tmp = folder.path();
  if (ranks)
    r.header("ranks", fmt::format("{} (data-parallel; samples/s are the whole job's; the phase split is one "
                                  "process's and is left out)",
                                  env.world_size));
  std::vector<Case> cases;
  // The mixed-precision rows are bf16 on every device: CPU autocast is bf16 only, and fp16 would
  // need the GradScaler, whose skip decision syncs the host every step (and phase_split runs
  // without one).
  const train::Amp amp = train::Amp::kBf16;
  const std::string bf16_emulated = emulated_reason("bf16", o.device);  // then its rows are left out
  if (o.train.given()) {
    cases.push_back(from_config(o.train, o.device, steps));
    r.header("job", fmt::format("{}{}", o.train.config.empty() ? "the built-in defaults" : o.train.config,
                                o.train.overrides.empty()
                                    ? ""
                                    : fmt::format(" with --set {}", fmt::join(o.train.overrides, " --set "))));
  } else {
    const std::string text = write_text(tmp);
    for (const auto& [model, batch] :
         std::vector<std::pair<std::string, std::int64_t>>{{"mlp", 64},
                                                           {"cnn", o.quick && !o.device.is_cuda() ? 64 : 512},
                                                           {"gpt", o.quick && !o.device.is_cuda() ? 4 : 16}}) {
      cases.push_back(builtin(model, batch, train::Amp::kOff, false, o.device, steps, text));
      if (bf16_emulated.empty()) cases.push_back(builtin(model, batch, amp, false, o.device, steps, text));
      if (o.device.is_cuda()) cases.push_back(builtin(model, batch, train::Amp::kOff, true, o.device, steps, text));
    }
    if (!o.quick && o.device.is_cuda()) cases.push_back(builtin("resnet", 256, amp, false, o.device, steps, text));
    r.header("data",
             "mlp, cnn: synthetic 1x28x28, 10 classes, Adam; gpt (4 layers, 128 wide, 128 tokens): generated "
             "text, AdamW; --config FILE measures a job of your own");
    if (!bf16_emulated.empty())
      r.header("skipped", "the amp = bf16 rows: " + bf16_emulated + ", where a bf16 step is many times an fp32 one");
  }
  r.header("steps", fmt::format("{} warm-up + {} measured by the real trainer; split from an eager loop with a device "
                                "sync per phase",
                                steps, steps));
  r.columns({"model", "batch", "amp", "graphs", "samples_per_s", "tokens_per_s", "step_ms", "data_ms", "fwd_ms",
             "bwd_ms", "optim_ms", "comm_ms"});
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    train::TrainOptions to;
    to.config = c.cfg;
    to.run_dir = fmt::format("{}/{}-{}", tmp, i, c.cfg.model.name);  // a fresh run dir per row
    to.quiet = true;
    // The public Trainer, as a user would drive it; the rate is the last (measured) window's.
    auto splits = data::load_splits(to.config.data, 0, to.config.model.block_size);
    models::InputShape shape;
    if (splits.sample_shape.size() == 3)
      shape = {splits.sample_shape[0], splits.sample_shape[1], splits.sample_shape[2]};
    torch::manual_seed(0);
    auto model = models::make_model(to.config.model, shape, splits.classes);
    double rate = 0, tokens = 0;
    train::Trainer trainer(to);
    trainer.model(model).data(splits).on_step([&](const train::StepInfo& s) {
      rate = s.samples_per_s;
      tokens = s.tokens_per_s;
    });
    trainer.fit();
    std::vector<nlohmann::json> split_ms(5, "-");
    if (!c.cfg.train.cuda_graphs && !ranks) {
      auto t = phase_split(c, o.device, std::min<std::int64_t>(steps, 30));
      for (int i = 0; i < 5; ++i) split_ms[i] = t[i];
    }
    const std::int64_t batch = c.cfg.train.batch_size;
    r.add({c.cfg.model.name, batch, train::amp_name(c.cfg.train.amp), c.cfg.train.cuda_graphs ? "yes" : "no", rate,
           tokens > 0 ? nlohmann::json(tokens) : nlohmann::json("-"), rate > 0 ? 1e3 * double(batch) / rate : 0.0,
           split_ms[0], split_ms[1], split_ms[2], split_ms[3], split_ms[4]});
  }
  return r;
}

extern const BenchPlugin kTrainBench{
    "train",
    "samples/s of the real trainer per model and batch (mlp, cnn, gpt; or --config FILE), with the step's "
    "phase split; under a launcher, --config's job on every rank (a ZeRO stage, compression)",
    false,
    bench_train,
    nullptr,
    nullptr,
    [](const BenchOptions& o) { return o.train.given(); }};

}  // namespace trainbox::bench
