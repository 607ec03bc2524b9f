#include <trainbox/train/trainer.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>
#ifdef TRAINBOX_WITH_CUDA  // CUDA build of torch: allocator statistics, graphs
#include <c10/cuda/CUDACachingAllocator.h>

#include "cuda_debug.h"
#include "cuda_graph_step.h"
#endif

#include <trainbox/data/dataset.h>
#include <trainbox/dist/ddp.h>
#include <trainbox/dist/process_group.h>
#include <trainbox/dist/worker_env.h>
#include <trainbox/data/loader.h>
#include <trainbox/io/safetensors.h>
#include <trainbox/metrics/progress.h>
#include <trainbox/metrics/tensorboard.h>
#include <trainbox/models/models.h>
#include <trainbox/train/amp.h>
#include <trainbox/train/checkpoint.h>
#include <trainbox/train/device.h>
#include <trainbox/train/optim.h>
#include <trainbox/util/heartbeat.h>
#include <trainbox/util/strings.h>

namespace trainbox::train {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

nlohmann::json summary_to_json(const TrainSummary& s) {
  return {{"device", s.device},       {"run_dir", s.run_dir},          {"checkpoint", s.checkpoint},
          {"dataset", s.dataset},     {"epochs", s.epochs},            {"steps", s.steps},
          {"samples", s.samples},     {"test_loss", s.test_loss},      {"test_accuracy", s.test_accuracy},
          {"wall_s", s.wall_s},       {"train_s", s.train_s},          {"samples_per_s", s.samples_per_s},
          {"peak_memory_bytes", s.peak_memory_bytes}, {"resumed", s.resumed}};
}

namespace {

// --- small helpers ---
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// debug.stall_*: sleeps until killed, in a function of its own so that a stack dump names it
// (`… ← fault_injection_stall ← run_training`).
[[noreturn]] __attribute__((noinline)) void fault_injection_stall(int rank, std::int64_t step, const char* phase) {
  std::fprintf(stderr, "trainbox: debug.stall: rank %d stalls at step %lld in phase %s (sleeping until stopped)\n", rank,
               static_cast<long long>(step), phase);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace

namespace {

std::int64_t peak_memory(const torch::Device& d) {
#ifdef TRAINBOX_WITH_CUDA
  if (d.is_cuda()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(d.index());
    return stats.allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
#endif
  // CPU: the process's peak resident set (VmHWM).
  if (auto s = read_file("/proc/self/status")) {
    auto pos = s->find("VmHWM:");
    if (pos != std::string::npos) return std::stoll(s->substr(pos + 6)) * 1024;
  }
  return 0;
}

void write_text_checked(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw SystemError("cannot write " + path + ": " + errno_text(errno));
}

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.flush()) throw SystemError("cannot write " + tmp + ": " + errno_text(errno));
  }
  CheckpointStore::fsync_path(tmp);
  fs::rename(tmp, path);
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

struct Metrics {
  std::ofstream jsonl;
  std::unique_ptr<metrics::TensorBoardWriter> tb;
  void write(const nlohmann::json& j) {  // rank 0 only: other ranks never open the file
    if (!jsonl.is_open()) return;
    jsonl << j.dump() << '\n';
    jsonl.flush();
  }
  void scalar(const std::string& tag, double v, std::int64_t step) {
    if (tb) tb->add_scalar(tag, static_cast<float>(v), step);
  }
};

struct EvalResult {
  double loss = 0, accuracy = 0;
};

EvalResult evaluate(models::Model& model, data::BatchLoader& loader, const torch::Device& dev, bool amp,
                    torch::ScalarType amp_dtype) {
  torch::NoGradGuard ng;
  model.eval();
  loader.start_epoch(0);
  auto loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(dev));
  auto correct = torch::zeros({}, torch::TensorOptions().dtype(torch::kInt64).device(dev));
  std::int64_t n = 0;
  while (auto b = loader.next()) {
    heartbeat().phase("eval");  // each batch is progress: a long evaluation is not a stall
    torch::Tensor logits;
    {
      AutocastGuard ac(dev.type(), amp_dtype, amp);
      logits = model.forward(b->x);
    }
    logits = logits.to(torch::kFloat32);
    loss_sum += torch::nn::functional::cross_entropy(
                    logits, b->y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                    .to(torch::kFloat64);
    correct += logits.argmax(1).eq(b->y).sum();
    n += b->y.size(0);
  }
  model.train();
  if (n == 0) return {};
  return {loss_sum.item<double>() / double(n), double(correct.item<std::int64_t>()) / double(n)};
}

// Position and counters saved in every checkpoint.
struct Position {
  std::int64_t epoch = 0;  // 0-based epoch to continue in
  std::int64_t batch = 0;  // next batch index within that epoch
  std::int64_t step = 0;   // optimizer steps done
  std::int64_t samples = 0;
};

std::vector<std::pair<std::string, torch::Tensor>> named_state(models::Model& m) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : m.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : m.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

io::DType to_dtype(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return io::DType::kF32;
    case torch::kFloat64: return io::DType::kF64;
    case torch::kFloat16: return io::DType::kF16;
    case torch::kBFloat16: return io::DType::kBF16;
    case torch::kInt64: return io::DType::kI64;
    case torch::kInt32: return io::DType::kI32;
    case torch::kInt16: return io::DType::kI16;
    case torch::kInt8: return io::DType::kI8;
    case torch::kUInt8: return io::DType::kU8;
    case torch::kBool: return io::DType::kBool;
    default: throw SystemError(std::string("cannot export tensors of type ") + c10::toString(t));
  }
}

void write_safetensors_of(models::Model& m, const std::string& out, const std::map<std::string, std::string>& meta) {
  std::vector<torch::Tensor> keep;  // contiguous CPU copies stay alive while writing
  std::vector<io::TensorView> views;
  for (auto& [name, t] : named_state(m)) {
    keep.push_back(t.detach().to(torch::kCPU).contiguous());
    const auto& c = keep.back();
    views.push_back({name, to_dtype(c.scalar_type()), c.sizes().vec(), c.data_ptr(), c.nbytes()});
  }
  io::write_safetensors(out, views, meta);
}

struct Built {
  data::DatasetSplits data;
  models::InputShape shape;
  std::shared_ptr<models::Model> model;
};

Built build(const Config& cfg, const torch::Device& dev) {
  Built b;
  b.data = data::load_datasets(cfg.data, static_cast<std::uint64_t>(cfg.train.seed));
  b.shape = {b.data.train.images.size(1), b.data.train.images.size(2), b.data.train.images.size(3)};
  torch::manual_seed(static_cast<std::uint64_t>(cfg.train.seed));  // initialisation depends on the seed alone
  b.model = models::make_model(cfg.model, b.shape, b.data.train.classes);
  b.model->to(dev);
  return b;
}

}  // namespace

TrainSummary run_training(const TrainOptions& o) {
  const auto t_start = Clock::now();
  Config cfg = o.config;
  validate(cfg);
  TrainSummary sum;
  sum.run_dir = o.run_dir;
  if (o.run_dir.empty()) throw UsageError("no run dir given", "pass --run-dir DIR");

  // --- environment: threads, determinism, device ---
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
  const bool use_pg = wenv.source != "single";
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
                             : rank0 ? metrics::Progress::parse_mode(cfg.output.progress)
                                     : metrics::Progress::Mode::kLines,
                             rank0 ? stderr : rank_log.get());
  const bool amp = cfg.train.amp != "off";
  const torch::ScalarType amp_dtype = cfg.train.amp == "fp16" ? torch::kHalf : torch::kBFloat16;
  if (cfg.train.amp == "fp16" && !dev.is_cuda())
    throw ConfigError("train.amp = \"fp16\" needs a CUDA device (CPU autocast is bf16)", "use train.amp = \"bf16\" on CPU");
  if (!device_choice.note.empty() && rank0) progress.note(device_choice.note);
  bool graphs = cfg.train.cuda_graphs;
  if (graphs && !dev.is_cuda()) {
    progress.note("note: train.cuda_graphs = true has no effect on CPU; running eagerly");
    graphs = false;
  }

  // --- run dir, resume point ---
  ensure_writable(o.run_dir);
  // One writer per run dir (rank 0 speaks for the job), taken before anything is written or cleaned.
  std::optional<RunDirLock> run_dir_lock;
  if (rank0) run_dir_lock.emplace(o.run_dir);
  CheckpointStore store(o.run_dir, cfg.checkpoint.keep);
  if (rank0) store.clean_incomplete();
  std::optional<std::string> resume_dir;
  // A launcher restart (TORCHELASTIC_RESTART_COUNT > 0) continues from the latest checkpoint.
  const std::string resume = o.resume.empty() && wenv.restart_count > 0 ? "auto" : o.resume;
  if (resume == "auto") {
    resume_dir = store.latest();
  } else if (!resume.empty()) {
    if (!fs::exists(resume + "/" + kCheckpointComplete))
      throw DataError("checkpoint " + resume + " is missing or incomplete (no " + kCheckpointComplete + " marker)",
                      "pass a complete checkpoint dir, or --resume auto to use the run dir's latest");
    resume_dir = resume;
  } else if (store.latest()) {
    throw UsageError("run dir " + o.run_dir + " already has checkpoints",
                     "pass --resume auto to continue it, or choose a new --run-dir");
  }
  if (rank0) write_text_atomic(o.run_dir + "/config.toml", to_toml(cfg));

  // --- data, model, and the process group + DDP when distributed ---
  std::shared_ptr<dist::ProcessGroup> pg;
  if (use_pg) {
    dist::ProcessGroupOptions po;
    po.backend = cfg.dist.backend;
    po.timeout = std::chrono::seconds(cfg.dist.timeout_s);
    pg = dist::ProcessGroup::init(wenv, po, dev);
  }
  Built built = build(cfg, dev);
  sum.dataset = built.data.description;
  auto& model = *built.model;
  if (resume_dir) {  // weights first: DDP's construction then broadcasts rank 0's copy to everyone
    torch::serialize::InputArchive mar;
    mar.load_from(*resume_dir + "/model.pt", dev);
    model.load(mar);
  }
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (pg) {
    dist::DdpOptions d;
    d.bucket_cap_bytes = static_cast<std::size_t>(cfg.dist.bucket_cap_mb * (1 << 20));
    d.first_bucket_bytes = static_cast<std::size_t>(cfg.dist.first_bucket_mb * (1 << 20));
    d.find_unused_parameters = cfg.dist.find_unused_parameters;
    d.broadcast_buffers = cfg.dist.broadcast_buffers;
    ddp = std::make_unique<dist::DistributedDataParallel>(built.model, pg, d);  // before the optimizer: grads are bucket views
  }
  std::vector<torch::Tensor> params = model.parameters();
  Optimizer opt(params, cfg.optim);
  GradScalerOptions so;
  so.enabled = cfg.train.amp == "fp16";
  GradScaler scaler(so);

  data::LoaderOptions lo;
  lo.batch_size = cfg.train.batch_size;
  lo.seed = static_cast<std::uint64_t>(cfg.train.seed);
  lo.prefetch = cfg.data.prefetch;
  lo.device = dev;
  lo.device_resident = cfg.data.device_resident;
  lo.drop_last = graphs;  // a captured graph has one batch shape
  lo.shard = wenv.rank;
  lo.shards = wenv.world_size;
  data::BatchLoader train_loader(built.data.train, built.data.norm, lo);
  lo.shard = 0;
  lo.shards = 1;  // every rank evaluates the whole split (identical weights, identical result)
  lo.shuffle = false;
  lo.drop_last = false;
  lo.batch_size = cfg.train.eval_batch_size;
  data::BatchLoader test_loader(built.data.test, built.data.norm, lo);
  std::unique_ptr<data::BatchLoader> val_loader;
  if (built.data.val.size() > 0) val_loader = std::make_unique<data::BatchLoader>(built.data.val, built.data.norm, lo);

  const std::int64_t batches = train_loader.batches_per_epoch();
  if (batches == 0)
    throw ConfigError(fmt::format("train.batch_size = {} is larger than the training set ({} samples)",
                                  cfg.train.batch_size, train_loader.samples()),
                      "lower train.batch_size or raise data.limit");
  const std::int64_t steps_per_epoch = (batches + cfg.train.accumulate - 1) / cfg.train.accumulate;
  std::int64_t total_steps = steps_per_epoch * cfg.train.epochs;
  if (cfg.train.max_steps > 0) total_steps = std::min(total_steps, cfg.train.max_steps);
  LrSchedule schedule(cfg.schedule, cfg.optim.lr, total_steps, steps_per_epoch);

  Position pos;
  if (resume_dir) {
    // --- restore everything else the uninterrupted run would have in memory ---
    torch::serialize::InputArchive oar;
    oar.load_from(*resume_dir + "/optimizer.pt", dev);
    opt.load(oar);
    auto st = nlohmann::json::parse(read_file(*resume_dir + "/state.json").value_or("{}"), nullptr, false);
    if (st.is_discarded() || !st.contains("step"))
      throw DataError(*resume_dir + "/state.json is missing or corrupt", "resume from an earlier checkpoint");
    pos = {st["epoch"], st["batch"], st["step"], st["samples"]};
    scaler.load_state(st["scaler"].get<std::vector<double>>());
    torch::serialize::InputArchive rar;
    rar.load_from(*resume_dir + "/rng.pt");
    torch::Tensor cpu_state;
    rar.read("cpu", cpu_state);
    auto gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(cpu_state);
    sum.resumed = true;
    progress.note(fmt::format("resuming from {} (epoch {}, step {})", *resume_dir, pos.epoch + 1, pos.step));
  }

  if (!resume_dir) opt.set_lr(schedule.lr(0));  // warm-up starts at the very first step

  // --- outputs ---
  Metrics metrics;
  if (rank0) {
    metrics.jsonl.open(o.run_dir + "/metrics.jsonl", std::ios::app);
    if (!metrics.jsonl) throw UsageError("cannot write " + o.run_dir + "/metrics.jsonl", "check the run dir's permissions");
    if (cfg.output.tensorboard) metrics.tb = std::make_unique<metrics::TensorBoardWriter>(o.run_dir);
  }
  progress.note(fmt::format("trainbox train: {} on {}{}, {} ({} steps/epoch, {} epochs), run dir {}", cfg.model.name,
                            sum.device,
                            pg ? fmt::format(" (rank {} of {}, {})", wenv.rank, wenv.world_size, pg->backend_name()) : "",
                            sum.dataset, steps_per_epoch, cfg.train.epochs, o.run_dir));

  // --- one micro-batch: forward and backward; returns the detached loss ---
  auto micro_step = [&](const torch::Tensor& x, const torch::Tensor& y, bool sync = true) {
    torch::Tensor loss;
    if (ddp) ddp->before_forward();
    {
      AutocastGuard ac(dev.type(), amp_dtype, amp);
      loss = torch::nn::functional::cross_entropy(model.forward(x), y);
    }
    if (ddp) ddp->after_forward(loss);
    auto scaled = scaler.scale(cfg.train.accumulate > 1 ? loss / double(cfg.train.accumulate) : loss);
    if (ddp && !sync) {
      auto guard = ddp->no_sync();  // accumulation micro-batch: reduce only on the last one
      scaled.backward();
    } else {
      scaled.backward();  // with DDP: gradients come back averaged across ranks
    }
    return loss.detach();
  };
  auto optimizer_step = [&] {
    if (cfg.train.clip_grad_norm > 0) {
      scaler.unscale(params);
      clip_grad_norm(params, cfg.train.clip_grad_norm);
    }
    scaler.step(params, [&] { opt.step(); });
    scaler.update();
    opt.zero_grad();
  };

  // --- CUDA graph: micro_step + optimizer_step captured once, replayed per batch ---
#ifdef TRAINBOX_WITH_CUDA
  std::unique_ptr<CudaGraphStep> graph_step;
  std::optional<StateSnapshot> warmup_snapshot;
  std::vector<torch::Tensor> model_state = model.parameters();
  for (const auto& b : model.buffers()) model_state.push_back(b);
  if (graphs)
    graph_step = std::make_unique<CudaGraphStep>(
        dev, GraphStepHooks{[&](const torch::Tensor& x, const torch::Tensor& y) {
                              auto loss = micro_step(x, y);
                              optimizer_step();
                              return loss;
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

  // --- the loop ---
  const auto t_train = Clock::now();
  double train_time = 0;
  std::int64_t step = pos.step, samples = pos.samples;
  std::string last_checkpoint = resume_dir.value_or("");
  auto window_loss = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(dev));
  auto window_bad = torch::zeros({}, torch::TensorOptions().dtype(torch::kInt64).device(dev));
  std::int64_t window_steps = 0, window_micro = 0, window_samples = 0;  // optimizer steps, micro-batches
  auto window_t = Clock::now();
  double last_rate = 0;
  bool stop = false;

  // Loss check + log; called at log points, before checkpoints and at epoch ends.
  auto flush_window = [&](std::int64_t epoch, std::int64_t batch) {
    if (window_steps == 0) return;
    if (pg) {  // every rank reaches the same log points: average the loss, count bad steps everywhere
      hb.phase("allreduce");
      if (stall_here && cfg.debug.stall_phase == "gpu_collective" && step >= cfg.debug.stall_step) {
#ifdef TRAINBOX_WITH_CUDA
        if (dev.is_cuda()) {
          std::fprintf(stderr, "trainbox: debug.stall: rank %d hangs its GPU stream before the allreduce at step %lld\n",
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
      throw DivergedError(fmt::format("training diverged: loss became {} at step {} (epoch {}); last good checkpoint: {}",
                                      std::isnan(mean) ? "NaN" : "inf", step, epoch + 1,
                                      last_checkpoint.empty() ? "none" : last_checkpoint),
                          "lower optim.lr, set train.clip_grad_norm (e.g. 1.0), or use train.amp = \"bf16\"; "
                          "--resume auto restarts from the last good checkpoint");
    }
    const double dt = seconds_since(window_t);
    last_rate = dt > 0 ? double(window_samples) * wenv.world_size / dt : 0;  // the whole job's rate
    const double eta = last_rate > 0 ? double((total_steps - step) * cfg.train.batch_size * cfg.train.accumulate *
                                              wenv.world_size) / last_rate
                                     : -1;
    metrics.write({{"event", "train"}, {"epoch", epoch + 1}, {"step", step}, {"loss", mean}, {"lr", opt.lr()},
                   {"samples_per_s", last_rate}, {"samples", samples}});
    metrics.scalar("train/loss", mean, step);
    metrics.scalar("train/lr", opt.lr(), step);
    metrics.scalar("train/samples_per_s", last_rate, step);
    metrics.scalar("system/peak_memory_bytes", double(peak_memory(dev)), step);
    progress.update({epoch + 1, cfg.train.epochs, batch, batches, step, mean, opt.lr(), last_rate, eta});
    window_loss.zero_();
    window_bad.zero_();
    window_steps = window_micro = window_samples = 0;
    window_t = Clock::now();
  };

  auto save_checkpoint = [&](std::int64_t epoch, std::int64_t next_batch) {
    mark(step, "checkpoint");
    {  // never checkpoint weights that already went non-finite (the loss lags the update by a step)
      torch::NoGradGuard ng;
      std::vector<torch::Tensor> ps(params.begin(), params.end());
      auto norms = at::_foreach_norm(ps, 2);
      if (!torch::stack(norms).isfinite().all().item<bool>())
        throw DivergedError(fmt::format("training diverged: parameters became NaN/inf by step {}; last good checkpoint: {}",
                                        step, last_checkpoint.empty() ? "none" : last_checkpoint),
                            "lower optim.lr, set train.clip_grad_norm (e.g. 1.0), or use train.amp = \"bf16\"");
    }
    if (fs::path(last_checkpoint).filename() == fmt::format("step_{}", step)) return;  // this step is saved already
    if (pg) pg->barrier();  // every rank has finished this step before the checkpoint is written
    if (!rank0) {
      last_checkpoint = fmt::format("{}/step_{}", store.dir(), step);
      if (pg) pg->barrier();
      return;
    }
    last_checkpoint = store.save(step, [&](const std::string& d) {
      torch::serialize::OutputArchive mar;
      model.save(mar);
      mar.save_to(d + "/model.pt");
      torch::serialize::OutputArchive oar;
      opt.save(oar);
      oar.save_to(d + "/optimizer.pt");
      torch::serialize::OutputArchive rar;
      rar.write("cpu", at::detail::getDefaultCPUGenerator().get_state());
      rar.save_to(d + "/rng.pt");
      nlohmann::json st = {{"epoch", epoch}, {"batch", next_batch}, {"step", step}, {"samples", samples},
                           {"scaler", scaler.state()}, {"lr", opt.lr()}, {"torch", TORCH_VERSION},
                           {"input_shape", {built.shape.channels, built.shape.height, built.shape.width}},
                           {"classes", built.data.train.classes}};
      write_text_checked(d + "/state.json", st.dump(2));  // a short write must fail the save, not mark it complete
      write_text_checked(d + "/config.toml", to_toml(cfg));
    });
    if (pg) pg->barrier();  // no rank runs ahead of a checkpoint that is not yet complete
    metrics.write({{"event", "checkpoint"}, {"step", step}, {"path", last_checkpoint}});
  };

  model.train();
  opt.zero_grad();
  Position stopped_at{cfg.train.epochs, 0, 0, 0};  // where a max_steps stop leaves off
  if (cfg.train.max_steps > 0 && step >= cfg.train.max_steps) {  // resumed at the limit: nothing left to train
    stop = true;
    stopped_at = pos;
  }
  for (std::int64_t epoch = pos.epoch; epoch < cfg.train.epochs && !stop; ++epoch) {
    train_loader.start_epoch(epoch, epoch == pos.epoch ? pos.batch : 0);
    window_t = Clock::now();  // evaluation time is not training time
    std::int64_t micro = 0;
    const auto t_epoch = Clock::now();
    while (true) {
      mark(step, "data");
      auto b = train_loader.next();
      if (!b) break;
      torch::Tensor loss;
      const bool last_micro = (micro + 1) % cfg.train.accumulate == 0 || b->index + 1 == batches;
      mark(step, "forward_backward");
      if (graphs) {
#ifdef TRAINBOX_WITH_CUDA
        loss = (*graph_step)(b->x, b->y);
#endif
      } else {
        loss = micro_step(b->x, b->y, last_micro);  // with DDP the wait for gradients is phase "allreduce"
        if (last_micro) {
          mark(step, "optimizer");
          optimizer_step();
        }
      }
      ++micro;
      samples += b->y.size(0);
      window_samples += b->y.size(0);
      window_loss += loss.to(torch::kFloat64);
      window_bad += loss.isfinite().logical_not().to(torch::kInt64);
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
        stopped_at = b->index + 1 < batches ? Position{epoch, b->index + 1, 0, 0} : Position{epoch + 1, 0, 0, 0};
        break;
      }
    }
    flush_window(epoch, batches);
    train_time += seconds_since(t_epoch);
    progress.finish_line();

    // --- evaluation at each epoch end ---
    mark(step, "eval");
    EvalResult ev = evaluate(model, val_loader ? *val_loader : test_loader, dev, amp, amp_dtype);
    const char* split = val_loader ? "val" : "test";
    metrics.write({{"event", "eval"}, {"split", split}, {"epoch", epoch + 1}, {"step", step}, {"loss", ev.loss},
                   {"accuracy", ev.accuracy}});
    metrics.scalar("eval/loss", ev.loss, step);
    metrics.scalar("eval/accuracy", ev.accuracy, step);
    if (metrics.tb) metrics.tb->flush();
    progress.note(fmt::format("epoch {}/{}: {} loss {:.4f}, accuracy {:.2f}%, {:.0f} samples/s", epoch + 1,
                              cfg.train.epochs, split, ev.loss, 100 * ev.accuracy,
                              seconds_since(t_epoch) > 0 ? double(train_loader.batches_per_epoch() - (epoch == pos.epoch ? pos.batch : 0)) * cfg.train.batch_size / seconds_since(t_epoch) : 0.0));
    const bool final_epoch = epoch + 1 == cfg.train.epochs || stop;
    if (!final_epoch && cfg.checkpoint.every_epochs > 0 && (epoch + 1) % cfg.checkpoint.every_epochs == 0)
      save_checkpoint(epoch + 1, 0);
  }
  (void)t_train;

  // --- the end: final checkpoint, test metrics, export, summary ---
  if (last_checkpoint.empty() || fs::path(last_checkpoint).filename() != fmt::format("step_{}", step))
    save_checkpoint(stopped_at.epoch, stopped_at.batch);
  mark(step, "eval");
  EvalResult test = evaluate(model, test_loader, dev, amp, amp_dtype);
  metrics.write({{"event", "test"}, {"step", step}, {"loss", test.loss}, {"accuracy", test.accuracy}});
  if (cfg.checkpoint.export_safetensors && rank0)
    write_safetensors_of(model, o.run_dir + "/model.safetensors", {{"trainbox_model", cfg.model.name}});

  sum.checkpoint = last_checkpoint;
  sum.epochs = cfg.train.epochs;
  sum.steps = step;
  sum.samples = (samples - pos.samples) * wenv.world_size;
  sum.test_loss = test.loss;
  sum.test_accuracy = test.accuracy;
  sum.train_s = train_time;
  sum.samples_per_s = train_time > 0 ? double(sum.samples) / train_time : 0;
  sum.peak_memory_bytes = peak_memory(dev);
  sum.wall_s = seconds_since(t_start);
  nlohmann::json final_line = summary_to_json(sum);
  final_line["event"] = "summary";
  metrics.write(final_line);
  hb.phase("done");
  if (pg) {
    pg->barrier();  // nobody tears down the group while another rank still needs it
    ddp.reset();
    pg->shutdown();
  }
  return sum;
}

void export_checkpoint(const std::string& checkpoint, const std::string& out) {
  if (!fs::exists(checkpoint + "/" + kCheckpointComplete) || !fs::exists(checkpoint + "/model.pt"))
    throw DataError("checkpoint " + checkpoint + " is missing or incomplete",
                    "pass a checkpoint dir such as <run_dir>/checkpoints/step_N");
  Config cfg = load_config(checkpoint + "/config.toml");
  auto st = nlohmann::json::parse(read_file(checkpoint + "/state.json").value_or("{}"), nullptr, false);
  if (st.is_discarded() || !st.contains("input_shape") || !st.contains("classes"))
    throw DataError(checkpoint + "/state.json is missing or corrupt", "export an earlier checkpoint");
  auto shape = st["input_shape"].get<std::vector<std::int64_t>>();
  auto model = models::make_model(cfg.model, {shape.at(0), shape.at(1), shape.at(2)}, st["classes"].get<std::int64_t>());
  torch::serialize::InputArchive ar;
  ar.load_from(checkpoint + "/model.pt", torch::kCPU);  // a GPU run's checkpoint exports on a machine without one
  model->load(ar);
  write_safetensors_of(*model, out, {{"trainbox_model", cfg.model.name}});
}

}  // namespace trainbox::train
