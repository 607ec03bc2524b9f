// The Trainer: the loop, with everything a job needs around it. The pieces live next door:
// the step (step.cpp), the CUDA-graph step (cuda_graph_step.cpp), evaluation (evaluate.cpp),
// the checkpoint contents (checkpoint_state.cpp), the run log (run_log.cpp), the device
// (device.cpp); `trainbox train` builds its model and data in run.cpp.
#include <trainbox/train/trainer.h>

#include <malloc.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>
#ifdef TRAINBOX_WITH_CUDA  // CUDA build of torch: graphs
#include "cuda_debug.h"
#include "cuda_graph_step.h"
#endif

#include <trainbox/data/loader.h>
#include <trainbox/dist/ddp.h>
#include <trainbox/dist/process_group.h>
#include <trainbox/dist/worker_env.h>
#include <trainbox/metrics/progress.h>
#include <trainbox/train/amp.h>
#include <trainbox/train/checkpoint.h>
#include <trainbox/train/checkpoint_path.h>
#include <trainbox/train/config_rules.h>
#include <trainbox/train/device.h>
#include <trainbox/train/optim.h>
#include <trainbox/train/run_dir_lock.h>
#include <trainbox/util/heartbeat.h>

#include "checkpoint_state.h"
#include "evaluate.h"
#include "run_log.h"

namespace trainbox::train {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

nlohmann::json summary_to_json(const TrainSummary& s) {
  nlohmann::json j = {{"device", s.device},
                      {"run_dir", s.run_dir},
                      {"checkpoint", s.checkpoint},
                      {"dataset", s.dataset},
                      {"epochs", s.epochs},
                      {"steps", s.steps},
                      {"samples", s.samples},
                      {"test_loss", s.test_loss},
                      {"test_accuracy", s.test_accuracy},
                      {"wall_s", s.wall_s},
                      {"train_s", s.train_s},
                      {"samples_per_s", s.samples_per_s},
                      {"peak_memory_bytes", s.peak_memory_bytes},
                      {"resumed", s.resumed}};
  if (s.tokens_per_s > 0) {
    j["tokens_per_s"] = s.tokens_per_s;
    j["test_perplexity"] = s.test_perplexity;
  }
  if (s.unigram_loss > 0) j["unigram_loss"] = s.unigram_loss;
  return j;
}

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// debug.stall_*: sleeps until killed, in a function of its own so that a stack dump names it
// (`… ← fault_injection_stall ← Trainer::Impl::fit`).
[[noreturn]] __attribute__((noinline)) void fault_injection_stall(int rank, std::int64_t step, const char* phase) {
  std::fprintf(stderr, "trainbox: debug.stall: rank %d stalls at step %lld in phase %s (sleeping until stopped)\n",
               rank, static_cast<long long>(step), phase);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

// Training allocates and frees the same large activation and gradient buffers every step.
// glibc serves blocks above its mmap threshold (at most 32 MiB, adjusted dynamically) with a
// fresh mmap each time and unmaps them on free, so every step faults its activations in page by
// page again — on a VM that costs more than the convolutions (the cnn at batch 512 trained
// 2x faster on a 2-core VM once this was off). Keeping them in the heap makes a freed block
// reusable by the next step. Peak RSS stays what the step needs, no longer returned between
// steps. A user's own malloc settings (GLIBC_TUNABLES=glibc.malloc.*, MALLOC_*_ env) win;
// TRAINBOX_MALLOC=default leaves glibc's defaults alone.
void keep_large_allocations() {
  static const bool done = [] {
    const char* tunables = std::getenv("GLIBC_TUNABLES");
    const char* choice = std::getenv("TRAINBOX_MALLOC");
    if ((tunables && std::string(tunables).find("glibc.malloc") != std::string::npos) ||
        std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_") ||
        (choice && std::string(choice) == "default"))
      return false;
    mallopt(M_MMAP_THRESHOLD, 1 << 30);  // blocks up to 1 GiB come from the heap, reused after free
    mallopt(M_TRIM_THRESHOLD, 1 << 30);  // and the heap's top is not handed back between steps
    return true;
  }();
  (void)done;
}

// Fails before any training when the run dir cannot be written.
void ensure_writable(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string probe = dir + "/.write-test";
  std::ofstream f(probe);
  if (ec || !f || !(f << "x").flush())
    throw UsageError("run dir " + dir + " is not writable" + (ec ? ": " + ec.message() : ""),
                     "pass --run-dir with a directory you can write");
  f.close();
  fs::remove(probe, ec);
}

}  // namespace

struct Trainer::Impl {
  TrainOptions o;
  std::shared_ptr<torch::nn::Module> module;
  ForwardFn forward;
  LossFn loss;
  std::vector<std::pair<std::string, MetricFn>> metric_fns;
  data::Splits splits;
  std::function<void(const StepInfo&)> on_step;
  std::function<void(const EvalInfo&)> on_eval;
  std::function<void(const CheckpointInfo&)> on_checkpoint;
  nlohmann::json meta = nlohmann::json::object();

  TrainSummary fit();
};

Trainer::Trainer(TrainOptions options) : impl_(std::make_unique<Impl>()) { impl_->o = std::move(options); }
Trainer::~Trainer() = default;
Trainer& Trainer::model(std::shared_ptr<torch::nn::Module> module, ForwardFn forward) {
  impl_->module = std::move(module);
  impl_->forward = std::move(forward);
  return *this;
}
Trainer& Trainer::data(data::Splits splits) {
  impl_->splits = std::move(splits);
  return *this;
}
Trainer& Trainer::loss(LossFn loss) {
  impl_->loss = std::move(loss);
  return *this;
}
Trainer& Trainer::metric(std::string name, MetricFn metric) {
  impl_->metric_fns.emplace_back(std::move(name), std::move(metric));
  return *this;
}
Trainer& Trainer::on_step(std::function<void(const StepInfo&)> cb) {
  impl_->on_step = std::move(cb);
  return *this;
}
Trainer& Trainer::on_eval(std::function<void(const EvalInfo&)> cb) {
  impl_->on_eval = std::move(cb);
  return *this;
}
Trainer& Trainer::on_checkpoint(std::function<void(const CheckpointInfo&)> cb) {
  impl_->on_checkpoint = std::move(cb);
  return *this;
}
Trainer& Trainer::checkpoint_meta(std::string key, std::string value) {
  impl_->meta[key] = value;
  return *this;
}
TrainSummary Trainer::fit() { return impl_->fit(); }

TrainSummary Trainer::Impl::fit() {
  const auto t_start = Clock::now();
  Config cfg = o.config;
  validate(cfg);
  TrainSummary sum;
  sum.run_dir = o.run_dir;
  if (o.run_dir.empty()) throw UsageError("no run dir given", "pass --run-dir DIR");
  if (!module || !forward) throw UsageError("Trainer::fit() without a model", "call Trainer::model(module) first");
  if (!splits.train || !splits.test)
    throw UsageError("Trainer::fit() without data", "call Trainer::data(splits) with a train and a test Source");

  // --- environment: allocator, threads, determinism, device ---
  keep_large_allocations();
  if (cfg.train.threads > 0) torch::set_num_threads(static_cast<int>(cfg.train.threads));
  // Deterministic cuBLAS needs a fixed workspace, chosen before the first handle exists;
  // without it torch refuses every CUDA matmul under deterministic algorithms.
  if (cfg.train.deterministic) setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(cfg.train.deterministic, /*warn_only=*/false);
  at::globalContext().setBenchmarkCuDNN(cfg.train.cudnn_benchmark);
  at::globalContext().setDeterministicCuDNN(cfg.train.deterministic);
  // --- who am I: a single process, or one rank of a data-parallel job ---
  const dist::WorkerEnv wenv = dist::WorkerEnv::from_environment();
  const bool rank0 = wenv.rank == 0;
  const DeviceChoice device_choice = choose_device(cfg.train.device, wenv.local_rank, wenv.local_world_size);
  const torch::Device dev = device_choice.device;
  sum.device = dev.str();
  // Under a launcher even a world of 1 goes through the process group and DDP (on a GPU:
  // NCCL), as a torchrun script would; a plain `trainbox train` does not.
  const bool use_pg = wenv.source != dist::WorkerSource::kSingle;
  if (use_pg && cfg.train.cuda_graphs)
    throw ConfigError("train.cuda_graphs = true is not supported under a launcher (data-parallel training)",
                      "set train.cuda_graphs = false, or run trainbox train directly");
  // Only rank 0 draws progress and writes shared files; other ranks log to <run_dir>/rank_<N>.log.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> rank_log(nullptr, &std::fclose);
  if (!rank0) {
    std::error_code ec;
    fs::create_directories(o.run_dir, ec);
    rank_log.reset(std::fopen(fmt::format("{}/rank_{}.log", o.run_dir, wenv.rank).c_str(), "a"));
  }
  metrics::Progress progress(o.quiet || (!rank0 && !rank_log) ? metrics::Progress::Mode::kQuiet
                             : rank0                          ? metrics::Progress::parse_mode(cfg.output.progress)
                                                              : metrics::Progress::Mode::kLines,
                             rank0 ? stderr : rank_log.get());
  const bool amp = cfg.train.amp != "off";
  const torch::ScalarType amp_dtype = cfg.train.amp == "fp16" ? torch::kHalf : torch::kBFloat16;
  if (cfg.train.amp == "fp16" && !dev.is_cuda())
    throw ConfigError("train.amp = \"fp16\" needs a CUDA device (CPU autocast is bf16)",
                      "use train.amp = \"bf16\" on CPU");
  if (!device_choice.note.empty() && rank0) progress.note(device_choice.note);
  bool graphs = cfg.train.cuda_graphs;
  if (graphs && !dev.is_cuda()) {
    progress.note("note: train.cuda_graphs = true has no effect on CPU; running eagerly");
    graphs = false;
  }

  // --- run dir, resume point ---
  // Until config.toml is written, a failure (a bad resume, a mismatched checkpoint, a batch
  // larger than the data) leaves the run dir as it was: a dir this run created is removed
  // again (it holds at most the lock), an existing one is not touched.
  std::error_code exists_ec;
  const bool fresh_dir = rank0 && !fs::exists(o.run_dir, exists_ec);
  bool committed = false;
  struct UndoFreshDir {
    const std::string& dir;
    const bool& fresh;
    const bool& committed;
    ~UndoFreshDir() {
      std::error_code ec;
      if (fresh && !committed && std::uncaught_exceptions() > 0) fs::remove_all(dir, ec);
    }
  } undo_fresh_dir{o.run_dir, fresh_dir, committed};
  ensure_writable(o.run_dir);
  // One writer per run dir (rank 0 speaks for the job), taken before anything is written or cleaned.
  std::optional<RunDirLock> run_dir_lock;
  if (rank0) run_dir_lock.emplace(o.run_dir);
  CheckpointStore store(o.run_dir, cfg.checkpoint.keep);
  if (rank0) store.clean_incomplete();
  std::optional<std::string> resume_dir;
  // A launcher restart (TORCHELASTIC_RESTART_COUNT > 0) continues from the latest checkpoint.
  const std::string resume = o.resume.empty() && wenv.restart_count > 0 ? "auto" : o.resume;
  // Checkpoints are verified against their manifests before anything is loaded (docs/checkpoints.md).
  std::vector<std::string> resume_notes;  // damaged ones skipped, the fallback, an unverified old one
  if (resume == "auto") {
    resume_dir = store.latest(&resume_notes);  // DataError (exit 2) when none verifies
    if (!resume_dir)
      resume_notes.push_back(
          fmt::format("--resume auto: no checkpoint in {}/checkpoints yet; starting at step 0", o.run_dir));
  } else if (!resume.empty()) {
    const std::string named = resolve_checkpoint(resume, &resume_notes);  // a run dir, `latest`, step_N
    for (const auto& n : CheckpointStore::check_resumable(named))
      resume_notes.push_back(n);  // DataError naming the damaged file
    resume_dir = named;
  } else if (store.has_checkpoints()) {
    throw UsageError("run dir " + o.run_dir + " already has checkpoints",
                     "pass --resume auto to continue it, or choose a new --run-dir");
  }
  if (rank0)
    for (const auto& n : resume_notes) progress.note(n);
  if (resume_dir && fs::exists(*resume_dir + "/config.toml")) {
    // The config level first: "trained with model.name = cnn; this config says mlp", not a tensor shape.
    std::optional<Config> trained;
    try {
      trained = load_config(*resume_dir + "/config.toml");
    } catch (const ConfigError&) {  // written by another trainbox version: the tensors decide
    }
    if (trained)
      check_resume_config(*trained, cfg, resume == "auto" ? "the run dir " + o.run_dir : "checkpoint " + *resume_dir);
  }

  // --- the model on its device, the process group + DDP when distributed ---
  std::shared_ptr<dist::ProcessGroup> pg;
  if (use_pg) {
    dist::ProcessGroupOptions po;
    po.backend = cfg.dist.backend;
    po.timeout = std::chrono::seconds(cfg.dist.timeout_s);
    // Waiting for the other ranks to check in: a rank that never does is then named by the
    // launcher as a start-up stall within --stall-timeout (launch/stall.h), not after the
    // store's timeout. The training loop's records follow.
    heartbeat().beat(0, "rendezvous");
    pg = dist::ProcessGroup::init(wenv, po, dev);
  }
  sum.dataset = splits.description;
  torch::nn::Module& model = *module;
  model.to(dev);
  std::optional<CheckpointState> resumed_state;
  if (resume_dir) {  // weights first: DDP's construction then broadcasts rank 0's copy to everyone
    resumed_state = read_checkpoint_state(*resume_dir);
    load_checkpoint_module(*resume_dir, model, dev);
  }
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (pg) {
    dist::DdpOptions d;
    d.bucket_cap_bytes = static_cast<std::size_t>(cfg.dist.bucket_cap_mb * (1 << 20));
    d.first_bucket_bytes = static_cast<std::size_t>(cfg.dist.first_bucket_mb * (1 << 20));
    d.find_unused_parameters = cfg.dist.find_unused_parameters;
    d.broadcast_buffers = cfg.dist.broadcast_buffers;
    ddp =
        std::make_unique<dist::DistributedDataParallel>(module, pg, d);  // before the optimizer: grads are bucket views
  }
  std::vector<torch::Tensor> params = model.parameters();
  Optimizer opt(params, cfg.optim);
  GradScalerOptions so;
  so.enabled = cfg.train.amp == "fp16";
  GradScaler scaler(so);
  StepOptions step_opts;
  step_opts.accumulate = cfg.train.accumulate;
  step_opts.clip_grad_norm = cfg.train.clip_grad_norm;
  step_opts.amp = amp;
  step_opts.amp_dtype = amp_dtype;
  step_opts.device_type = dev.type();
  TrainStep train_step(forward, loss, opt, scaler, ddp.get(), step_opts);

  data::LoaderOptions lo;
  lo.batch_size = cfg.train.batch_size;
  lo.seed = static_cast<std::uint64_t>(cfg.train.seed);
  lo.prefetch = cfg.data.prefetch;
  lo.device = dev;
  lo.device_resident = cfg.data.device_resident;
  lo.drop_last = graphs;  // a captured graph has one batch shape
  lo.shard = wenv.rank;
  lo.shards = wenv.world_size;
  data::BatchLoader train_loader(splits.train, lo);
  lo.shard = 0;
  lo.shards = 1;  // every rank evaluates the whole split (identical weights, identical result)
  lo.shuffle = false;
  lo.drop_last = false;
  lo.batch_size = cfg.train.eval_batch_size;
  data::BatchLoader test_loader(splits.test, lo);
  std::unique_ptr<data::BatchLoader> val_loader;
  if (splits.val && splits.val != splits.test && splits.val->size() > 0)
    val_loader = std::make_unique<data::BatchLoader>(splits.val, lo);
  const char* val_split = splits.val ? "val" : "test";  // what the epoch-end evaluation reports as

  const std::int64_t batches = train_loader.batches_per_epoch();
  if (batches == 0)
    throw ConfigError(fmt::format("train.batch_size = {} is larger than the training set ({} samples)",
                                  cfg.train.batch_size, train_loader.samples()),
                      "lower train.batch_size or raise data.limit");
  const std::int64_t steps_per_epoch = (batches + cfg.train.accumulate - 1) / cfg.train.accumulate;
  std::int64_t total_steps = steps_per_epoch * cfg.train.epochs;
  if (cfg.train.max_steps > 0) total_steps = std::min(total_steps, cfg.train.max_steps);
  LrSchedule schedule(cfg.schedule, cfg.optim.lr, total_steps, steps_per_epoch);
  // What progress shows as the end: a max_steps stop ends in epoch stop_epoch (0-based).
  const std::int64_t stop_epoch = std::min(cfg.train.epochs, (total_steps - 1) / steps_per_epoch + 1) - 1;

  Position pos;
  if (resumed_state) {
    // --- restore everything else the uninterrupted run would have in memory ---
    load_checkpoint_optimizer_rng(*resume_dir, opt, dev);
    pos = resumed_state->pos;
    scaler.load_state(resumed_state->scaler);
    sum.resumed = true;
    progress.note(fmt::format("resuming from {} (epoch {}, step {})", *resume_dir, pos.epoch + 1, pos.step));
  }
  if (!resume_dir) opt.set_lr(schedule.lr(0));  // warm-up starts at the very first step

  // --- outputs: the first write to the run dir, now that everything was checked ---
  if (rank0) write_text_atomic(o.run_dir + "/config.toml", to_toml(cfg));
  committed = true;
  RunLog log;
  if (rank0) log.open(o.run_dir, cfg.output.tensorboard);
  progress.note(
      fmt::format("trainbox train: {} on {}{}, {} ({} steps/epoch, {} epochs), run dir {}", cfg.model.name, sum.device,
                  pg ? fmt::format(" (rank {} of {}, {})", wenv.rank, wenv.world_size, pg->backend_name()) : "",
                  sum.dataset, steps_per_epoch, cfg.train.epochs, o.run_dir));

  // --- CUDA graph: micro_step + optimizer_step captured once, replayed per batch ---
#ifdef TRAINBOX_WITH_CUDA
  std::unique_ptr<CudaGraphStep> graph_step;
  std::optional<StateSnapshot> warmup_snapshot;
  std::vector<torch::Tensor> model_state = model.parameters();
  for (const auto& b : model.buffers()) model_state.push_back(b);
  if (graphs)
    graph_step =
        std::make_unique<CudaGraphStep>(dev, GraphStepHooks{[&](const torch::Tensor& x, const torch::Tensor& y) {
                                                              auto l = train_step.micro_step(x, y);
                                                              train_step.optimizer_step();
                                                              return l;
                                                            },
                                                            [&] { warmup_snapshot.emplace(model_state, opt); },
                                                            [&] {
                                                              warmup_snapshot->restore(model_state, opt);
                                                              warmup_snapshot.reset();
                                                            }});
#else
  if (graphs) throw SystemError("this trainbox was built without CUDA support; cuda_graphs is unavailable");
#endif

  // --- progress for the launcher's stall detection (util/heartbeat.h), and the debug stall ---
  Heartbeat& hb = heartbeat();
  const bool stall_here = cfg.debug.stall_rank == wenv.rank &&
                          (cfg.debug.stall_attempt < 0 || cfg.debug.stall_attempt == wenv.restart_count);
  auto mark = [&](std::int64_t at_step, const char* phase) {
    hb.beat(at_step, phase);
    if (stall_here && at_step == cfg.debug.stall_step && cfg.debug.stall_phase == phase)
      fault_injection_stall(wenv.rank, at_step, phase);
  };

  // --- the loop's state ---
  double train_time = 0;
  std::int64_t step = pos.step, samples = pos.samples, tokens = 0;
  std::string last_checkpoint = resume_dir.value_or("");
  auto window_loss = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(dev));
  auto window_bad = torch::zeros({}, torch::TensorOptions().dtype(torch::kInt64).device(dev));
  std::int64_t window_steps = 0, window_micro = 0, window_samples = 0, window_tokens = 0;
  auto window_t = Clock::now();
  bool stop = false;
  bool sequence = false;  // targets [B, T]: report tokens/s and perplexity

  // Loss check + log; called at log points, before checkpoints and at epoch ends.
  auto flush_window = [&](std::int64_t epoch, std::int64_t batch) {
    if (window_steps == 0) return;
    if (pg) {  // every rank reaches the same log points: average the loss, count bad steps everywhere
      hb.phase("allreduce");
      if (stall_here && cfg.debug.stall_phase == "gpu_collective" && step >= cfg.debug.stall_step) {
#ifdef TRAINBOX_WITH_CUDA
        if (dev.is_cuda()) {
          std::fprintf(stderr,
                       "trainbox: debug.stall: rank %d hangs its GPU stream before the allreduce at step %lld\n",
                       wenv.rank, static_cast<long long>(step));
          enqueue_gpu_hang();  // the collective below cannot start: NCCL's watchdog times it out
        }
#endif
      }
      pg->allreduce(window_loss, /*average=*/true);
      auto bad_all = window_bad.to(torch::kFloat64);
      pg->allreduce_op(bad_all, c10d::ReduceOp::MAX);  // the worst rank decides, on every rank
      window_bad.copy_(bad_all.to(torch::kInt64));
    }
    const double mean = window_loss.item<double>() / double(window_micro);  // mean micro-batch loss
    const std::int64_t bad = window_bad.item<std::int64_t>();
    // fp16: GradScaler skips overflowing steps; only a window mostly non-finite is divergence.
    const bool diverged = scaler.enabled() ? bad * 2 > window_micro : bad > 0;
    if (diverged) {
      progress.finish_line();
      throw DivergedError(
          fmt::format("training diverged: loss became {} at step {} (epoch {}); last good checkpoint: {}",
                      std::isnan(mean) ? "NaN" : "inf", step, epoch + 1,
                      last_checkpoint.empty() ? "none" : last_checkpoint),
          "lower optim.lr, set train.clip_grad_norm (e.g. 1.0), or use train.amp = \"bf16\"; "
          "--resume auto restarts from the last good checkpoint");
    }
    const double dt = seconds_since(window_t);
    const double rate = dt > 0 ? double(window_samples) * wenv.world_size / dt : 0;  // the whole job's rate
    const double token_rate = dt > 0 ? double(window_tokens) * wenv.world_size / dt : 0;
    const double eta =
        rate > 0 ? double((total_steps - step) * cfg.train.batch_size * cfg.train.accumulate * wenv.world_size) / rate
                 : -1;
    nlohmann::json line = {{"event", "train"}, {"epoch", epoch + 1},    {"step", step},      {"loss", mean},
                           {"lr", opt.lr()},   {"samples_per_s", rate}, {"samples", samples}};
    if (sequence) line["tokens_per_s"] = token_rate;
    log.write(line);
    log.scalar("train/loss", mean, step);
    log.scalar("train/lr", opt.lr(), step);
    log.scalar("train/samples_per_s", rate, step);
    if (sequence) log.scalar("train/tokens_per_s", token_rate, step);
    log.scalar("system/peak_memory_bytes", double(peak_memory(dev)), step);
    // The real stop: with train.max_steps the last epoch shown is the one the limit ends in,
    // and its batch count is where it ends (not the full epoch's).
    const std::int64_t shown_batches =
        epoch == stop_epoch ? std::min(batches, (total_steps - stop_epoch * steps_per_epoch) * cfg.train.accumulate)
                            : batches;
    progress.update({epoch + 1, std::min(cfg.train.epochs, stop_epoch + 1), std::min(batch, shown_batches),
                     shown_batches, step, total_steps, mean, opt.lr(), rate, eta});
    if (on_step) on_step({epoch + 1, step, mean, opt.lr(), rate, sequence ? token_rate : 0.0});
    window_loss.zero_();
    window_bad.zero_();
    window_steps = window_micro = window_samples = window_tokens = 0;
    window_t = Clock::now();
  };

  auto save_checkpoint = [&](std::int64_t epoch, std::int64_t next_batch) {
    mark(step, "checkpoint");
    {  // never checkpoint weights that already went non-finite (the loss lags the update by a step)
      torch::NoGradGuard ng;
      auto norms = at::_foreach_norm(params, 2);
      if (!torch::stack(norms).isfinite().all().item<bool>())
        throw DivergedError(
            fmt::format("training diverged: parameters became NaN/inf by step {}; last good checkpoint: {}", step,
                        last_checkpoint.empty() ? "none" : last_checkpoint),
            "lower optim.lr, set train.clip_grad_norm (e.g. 1.0), or use train.amp = \"bf16\"");
    }
    if (fs::path(last_checkpoint).filename() == fmt::format("step_{}", step)) return;  // this step is saved already
    if (pg) pg->barrier();  // every rank has finished this step before the checkpoint is written
    if (!rank0) {
      last_checkpoint = fmt::format("{}/step_{}", store.dir(), step);
      if (pg) pg->barrier();
      return;
    }
    CheckpointState st;
    st.pos = {epoch, next_batch, step, samples};
    st.scaler = scaler.state();
    st.lr = opt.lr();
    st.sample_shape = splits.sample_shape;
    st.classes = splits.classes;
    st.extra = meta;
    last_checkpoint =
        store.save(step, [&](const std::string& d) { write_checkpoint(d, model, opt, st, to_toml(cfg)); });
    if (pg) pg->barrier();  // no rank runs ahead of a checkpoint that is not yet complete
    log.write({{"event", "checkpoint"}, {"step", step}, {"path", last_checkpoint}});
    if (on_checkpoint) on_checkpoint({step, last_checkpoint});
  };

  auto report_eval = [&](const char* split, std::int64_t epoch, const EvalResult& ev) {
    nlohmann::json line = {{"event", std::string(split) == "final" ? "test" : "eval"},
                           {"step", step},
                           {"loss", ev.loss},
                           {"accuracy", ev.accuracy}};
    if (std::string(split) != "final") {
      line["split"] = split;
      line["epoch"] = epoch + 1;
    }
    if (sequence) line["perplexity"] = std::exp(ev.loss);
    for (const auto& [k, v] : ev.metrics) line[k] = v;
    log.write(line);
    const bool final = std::string(split) == "final";
    if (on_eval) {
      EvalInfo info;
      info.split = final ? "test" : split;
      info.epoch = epoch + 1;
      info.step = step;
      info.final = final;
      info.loss = ev.loss;
      info.accuracy = ev.accuracy;
      info.metrics = ev.metrics;
      on_eval(info);
    }
  };
  const EvalOptions eval_opts{dev, amp, amp_dtype};

  // --- the loop ---
  model.train();
  opt.zero_grad();
  Position stopped_at{cfg.train.epochs, 0, 0, 0};                // where a max_steps stop leaves off
  std::int64_t stopped_batch = 0;                                // the batches of the epoch it stopped in
  if (cfg.train.max_steps > 0 && step >= cfg.train.max_steps) {  // resumed at the limit: nothing left to train
    stop = true;
    stopped_at = pos;
  }
  std::int64_t last_epoch = std::max<std::int64_t>(0, pos.epoch - 1);  // 0-based, the last one trained
  std::optional<EvalResult> last_eval;
  std::int64_t last_eval_step = -1;
  for (std::int64_t epoch = pos.epoch; epoch < cfg.train.epochs && !stop; ++epoch) {
    last_epoch = epoch;
    train_loader.start_epoch(epoch, epoch == pos.epoch ? pos.batch : 0);
    window_t = Clock::now();  // evaluation time is not training time
    std::int64_t micro = 0;
    const std::int64_t samples_at_epoch_start = samples;
    const auto t_epoch = Clock::now();
    while (true) {
      mark(step, "data");
      auto b = train_loader.next();
      if (!b) break;
      torch::Tensor l;
      const bool last_micro = (micro + 1) % cfg.train.accumulate == 0 || b->index + 1 == batches;
      mark(step, "forward_backward");
      if (graphs) {
#ifdef TRAINBOX_WITH_CUDA
        l = (*graph_step)(b->x, b->y);
#endif
      } else {
        l = train_step.micro_step(b->x, b->y, last_micro);  // with DDP the wait for gradients is phase "allreduce"
        if (last_micro) {
          mark(step, "optimizer");
          train_step.optimizer_step();
        }
      }
      ++micro;
      const std::int64_t n = b->y.size(0);
      sequence = b->y.dim() > 1;
      samples += n;
      window_samples += n;
      window_tokens += b->y.numel();
      tokens += b->y.numel();
      window_loss += l.to(torch::kFloat64);
      window_bad += l.isfinite().logical_not().to(torch::kInt64);
      ++window_micro;
      if (!last_micro) continue;
      micro = 0;
      ++step;
      ++window_steps;
      opt.set_lr(schedule.lr(step));  // the rate for the next step
      if (step % cfg.train.log_every == 0) flush_window(epoch, b->index + 1);
      if (cfg.checkpoint.every_steps > 0 && step % cfg.checkpoint.every_steps == 0) {
        flush_window(epoch, b->index + 1);
        save_checkpoint(epoch, b->index + 1);
      }
      if (cfg.train.max_steps > 0 && step >= cfg.train.max_steps) {
        stop = true;
        stopped_batch = b->index + 1;
        stopped_at = b->index + 1 < batches ? Position{epoch, b->index + 1, 0, 0} : Position{epoch + 1, 0, 0, 0};
        break;
      }
    }
    flush_window(epoch, stop ? stopped_batch : batches);  // a max_steps stop: the batch it stopped after
    const double epoch_s = seconds_since(t_epoch);        // training only
    train_time += epoch_s;
    progress.finish_line();

    // --- evaluation at each epoch end ---
    mark(step, "eval");
    EvalResult ev = evaluate(model, forward, loss, metric_fns, val_loader ? *val_loader : test_loader, eval_opts);
    last_eval = ev;
    last_eval_step = step;
    report_eval(val_split, epoch, ev);
    log.scalar("eval/loss", ev.loss, step);
    log.scalar("eval/accuracy", ev.accuracy, step);
    if (sequence) log.scalar("eval/perplexity", std::exp(ev.loss), step);
    log.flush();
    const double epoch_rate = epoch_s > 0 ? double(samples - samples_at_epoch_start) * wenv.world_size / epoch_s : 0.0;
    progress.note(sequence ? fmt::format("epoch {}/{}: {} loss {:.4f}, perplexity {:.2f}, {:.0f} tokens/s", epoch + 1,
                                         stop_epoch + 1, val_split, ev.loss, std::exp(ev.loss),
                                         epoch_rate * double(splits.sample_shape.empty() ? 1 : splits.sample_shape[0]))
                           : fmt::format("epoch {}/{}: {} loss {:.4f}, accuracy {:.2f}%, {:.0f} samples/s", epoch + 1,
                                         stop_epoch + 1, val_split, ev.loss, 100 * ev.accuracy, epoch_rate));
    const bool final_epoch = epoch + 1 == cfg.train.epochs || stop;
    if (!final_epoch && cfg.checkpoint.every_epochs > 0 && (epoch + 1) % cfg.checkpoint.every_epochs == 0)
      save_checkpoint(epoch + 1, 0);
  }

  // --- the end: final checkpoint, test metrics, summary ---
  if (last_checkpoint.empty() || fs::path(last_checkpoint).filename() != fmt::format("step_{}", step))
    save_checkpoint(stopped_at.epoch, stopped_at.batch);
  mark(step, "eval");
  // The text dataset's test split is its val split: evaluated at this step already, not twice.
  EvalResult test = splits.test == splits.val && last_eval_step == step && last_eval
                        ? *last_eval
                        : evaluate(model, forward, loss, metric_fns, test_loader, eval_opts);
  report_eval("final", last_epoch, test);

  sum.checkpoint = last_checkpoint;
  sum.epochs = last_epoch + 1;
  sum.steps = step;
  sum.samples = (samples - pos.samples) * wenv.world_size;
  sum.test_loss = test.loss;
  sum.test_accuracy = test.accuracy;
  sum.train_s = train_time;
  sum.samples_per_s = train_time > 0 ? double(sum.samples) / train_time : 0;
  if (sequence) {
    sum.tokens_per_s = train_time > 0 ? double(tokens * wenv.world_size) / train_time : 0;
    sum.test_perplexity = std::exp(test.loss);
  }
  sum.peak_memory_bytes = peak_memory(dev);
  sum.wall_s = seconds_since(t_start);
  nlohmann::json final_line = summary_to_json(sum);
  final_line["event"] = "summary";
  log.write(final_line);
  hb.phase("done");
  if (pg) {
    pg->barrier();  // nobody tears down the group while another rank still needs it
    ddp.reset();
    pg->shutdown();
  }
  return sum;
}

}  // namespace trainbox::train
