// The Trainer: the loop, with everything a job needs around it. Trainer::Impl::fit() reads
// top to bottom as the job's stages; each stage before the loop gives one struct and takes the
// ones before it as parameters (see FitLoop), the loop reads them all. The pieces live next door:
//   step.cpp             one step: forward under autocast, loss, backward, clip, optimizer
//   cuda_graph_step.cpp  the same step captured as a CUDA graph
//   evaluate.cpp         evaluation of a split
//   checkpoint_state.cpp what a checkpoint holds
//   run_log.cpp          metrics.jsonl and TensorBoard
//   fault_injection.cpp  debug.stall_* and TRAINBOX_FAULT
//   distributed/device.cpp      the device; distributed/process_group.cpp, distributed/ddp.cpp: data parallelism
//   run.cpp              `trainbox train`: the built-in models and data, handed to a Trainer
// Process-wide settings (malloc, CUBLAS_WORKSPACE_CONFIG, NCCL's variables) are not made here:
// the program's main makes them with configure_process() (train/process_setup.h).
#include <trainbox/train/trainer.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>
#ifdef TRAINBOX_WITH_CUDA  // CUDA build of torch: graphs
#include "cuda_debug.h"
#include "cuda_graph_step.h"
#endif

#include <trainbox/data/loader.h>
#include <trainbox/distributed/ddp.h>
#include <trainbox/distributed/process_group.h>
#include <trainbox/distributed/worker_env.h>
#include <trainbox/io/made_dirs.h>
#include <trainbox/metrics/progress.h>
#include <trainbox/train/comm_figures.h>
#include <trainbox/models/models.h>
#include <trainbox/train/amp.h>
#include <trainbox/train/checkpoint.h>
#include <trainbox/train/checkpoint_path.h>
#include <trainbox/train/config_rules.h>
#include <trainbox/train/device.h>
#include <trainbox/train/machine_choices.h>
#include <trainbox/train/memory_stats.h>
#include <trainbox/train/optim.h>
#include <trainbox/train/run_dir_lock.h>
#include <trainbox/util/clock.h>
#include <trainbox/util/cpu_features.h>
#include <trainbox/util/heartbeat.h>
#include <trainbox/util/job_env.h>
#include <trainbox/util/plural.h>
#include <trainbox/util/process.h>
#include <trainbox/util/strings.h>
#include <trainbox/util/unique_fd.h>

#include "checkpoint_state.h"
#include "evaluate.h"
#include "fault_injection.h"
#include <trainbox/train/run_log.h>
#include "compression_state.h"
#include "sharded_checkpoint.h"
#include "zero_state.h"

namespace trainbox::train {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// The files a start writes into its run dir before the first train line: the only files a
// failed start takes away again, from a folder it made itself (io/made_dirs.h).
const std::vector<std::string> kStartFiles = {
    ".lock", ".write-test-*", "config.toml", "config.toml.tmp*", "metrics.jsonl", "events.out.tfevents.*", "rank_*"};

// Fails before any training when the run dir cannot be written. The folders of the path that
// did not exist are made here and recorded in `made` (by device and inode).
void ensure_writable(const std::string& dir, io::MadeDirs& made) {
  try {
    made.create(dir);
  } catch (const SystemError& e) {
    throw UsageError(fmt::format("run dir {} is not writable ({})", dir, e.what()),
                     "pass --run-dir with a directory you can write");
  }
  // A name of this process's own, made new (O_EXCL, never through a link): only that file is removed.
  const std::string probe = fmt::format("{}/.write-test-{}", dir, ::getpid());
  UniqueFd fd(::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd || ::write(fd.get(), "x", 1) != 1)
    throw UsageError(fmt::format("run dir {} is not writable: {}", dir, errno_text(errno)),
                     "pass --run-dir with a directory you can write");
  fd = UniqueFd();
  ::unlink(probe.c_str());
}

// Until config.toml is written, a failure (a bad resume, a mismatched checkpoint, a batch
// larger than the data, a bad image in the first batch) leaves the run dir as it was: the
// folders this fit() made are removed again (they hold at most the lock), an existing one is
// not touched. After that and until the first train line of metrics.jsonl, bad input (exit 2:
// an image that does not decode) still removes them — config.toml, an empty metrics.jsonl and
// an events file are not a run — while a failure of the job (exit 1: divergence, a lost rank)
// keeps them as evidence. Only what this process made, and only when nothing but the start's
// own files is in it (io::MadeDirs: by inode, never through a link or "..", never recursively).
class FreshRunDir {
 public:
  FreshRunDir(const std::string& dir, bool rank0) : rank0_(rank0) {
    try {
      ensure_writable(dir, made_);
    } catch (...) {
      if (rank0_) made_.remove(kStartFiles);
      throw;
    }
  }
  ~FreshRunDir() {
    if (rank0_ && !kept_ && (abandoned_ || (!committed_ && std::uncaught_exceptions() > 0))) made_.remove(kStartFiles);
  }
  FreshRunDir(const FreshRunDir&) = delete;
  FreshRunDir& operator=(const FreshRunDir&) = delete;
  void commit() { committed_ = true; }   // config.toml written
  void keep() { kept_ = true; }          // the first train line written: the run dir stays, whatever happens
  void abandon() { abandoned_ = true; }  // bad input: removed at destruction unless kept

 private:
  io::MadeDirs made_;
  bool rank0_ = false, committed_ = false, kept_ = false, abandoned_ = false;
};

std::unique_ptr<std::FILE, int (*)(std::FILE*)> no_file() { return {nullptr, &std::fclose}; }

}  // namespace

// What the caller gave the Trainer.
struct FitInputs {
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
  // A Trainer API program's own module: its type ("SpiralNetImpl"); "" for a built-in model
  // (models::Model), which config.toml's [model] describes. A checkpoint records it in
  // state.json (`trainer_module`), so that `trainbox export` names it instead of building the
  // config's model.name ("mlp" by default) and failing on its tensors.
  std::string program_module;
  std::string model_label(const Config& cfg) const {
    return program_module.empty() ? cfg.model.name : fmt::format("{} (the program's own module)", program_module);
  }
  // config.toml as the run dir and each checkpoint keep it: a program's module is named above [model].
  std::string config_toml(const Config& cfg) const {
    const std::string toml = to_toml(cfg);
    if (program_module.empty()) return toml;
    return fmt::format(
        "# model: {}, a Trainer API program's own module; the [model] keys below do not describe "
        "it, and trainbox export cannot build it (docs/trainer.md, \"Export\")\n{}",
        program_module, toml);
  }
};

namespace {

// Where training is. A checkpoint's Position is taken from here.
struct LoopCounters {
  std::int64_t step = 0;           // optimizer steps done
  std::int64_t samples = 0;        // samples this rank has trained on, over the whole run (a resume continues it)
  std::int64_t tokens = 0;         // targets this rank has trained on in this fit()
  double train_s = 0;              // training time of this fit(), evaluation excluded
  double first_step_s = 0;         // process start → end of the first optimizer step (TrainSummary)
  bool sequence = false;           // targets [B, T]: report tokens/s and perplexity
  bool stop = false;               // train.max_steps reached
  Position stopped_at;             // where a max_steps stop leaves off (else: after the last epoch)
  std::int64_t stopped_batch = 0;  // the batches of the epoch it stopped in
  std::int64_t last_epoch = 0;     // 0-based, the last one trained
  std::string last_checkpoint;
  std::optional<EvalResult> last_eval;
  std::int64_t last_eval_step = -1;
};

// What the steps since the last log point did; checked, reduced across ranks and logged there.
// The sums stay on the device, so a step costs no host sync.
struct LogWindow {
  torch::Tensor loss;  // micro-batch losses, summed (float64)
  torch::Tensor bad;   // micro-batches whose loss was not finite (int64)
  // Token targets with the built-in loss (TrainStep's token_mean): the summed loss and the valid
  // targets, so the logged loss is the window's mean per target, as the gradient's.
  torch::Tensor target_loss, targets;  // float64
  bool per_target = false;
  std::int64_t steps = 0, micro = 0, samples = 0, tokens = 0;
  Clock::time_point t = Clock::now();
  std::vector<bool> collapse_warned;  // a mixture of experts' layers whose collapse was said (once each)
};

// A mixture of experts' routing over a log window (models::Model::take_routing_counts, summed over
// the ranks): metrics.jsonl's "moe" — the tokens each expert of each layer received and each layer's
// load imbalance (max / mean) — and TensorBoard's moe/* scalars. A layer one of whose experts took
// more than collapse_share of its tokens is named once (a collapsing router). Every rank calls it
// (the sum is a collective); rank 0 logs.
nlohmann::json routing_window(models::Model& m, dist::ProcessGroup* pg, std::int64_t top_k, double collapse_share,
                              LogWindow& w, RunLog& log, metrics::Progress& progress, bool rank0, std::int64_t step) {
  auto counts = m.take_routing_counts();
  if (!counts.defined()) return nullptr;
  auto sum = counts.to(torch::kFloat64);
  if (pg) pg->allreduce(sum, /*average=*/false);
  const auto layers = sum.size(0), experts = sum.size(1);
  nlohmann::json tokens = nlohmann::json::array(), imbalance = nlohmann::json::array();
  double worst = 0;
  w.collapse_warned.resize(static_cast<std::size_t>(layers), false);
  for (std::int64_t l = 0; l < layers; ++l) {
    auto row = sum[l].contiguous();
    const double* c = row.data_ptr<double>();
    std::vector<std::int64_t> per(c, c + experts);
    tokens.push_back(per);
    const double total = std::accumulate(c, c + experts, 0.0);
    const auto top = std::max_element(c, c + experts);
    const double ratio = total > 0 ? *top / (total / double(experts)) : 0;
    imbalance.push_back(ratio);
    worst = std::max(worst, ratio);
    if (rank0) log.scalar(fmt::format("moe/layer{}/imbalance", l), ratio, step);
    const double share = total > 0 ? *top * double(top_k) / total : 0;  // of the layer's tokens
    if (rank0 && experts > top_k && share > collapse_share && !w.collapse_warned[static_cast<std::size_t>(l)]) {
      w.collapse_warned[static_cast<std::size_t>(l)] = true;
      progress.note(
          fmt::format("warning: layer {}'s router sent {:.0f}% of its tokens to expert {} by step {} "
                      "(model.moe.collapse_share = {}): the router is collapsing onto few experts; raise "
                      "model.moe.aux_loss_coef or lower optim.lr",
                      l, 100 * share, top - c, step, collapse_share));
    }
  }
  if (rank0) log.scalar("moe/imbalance_max", worst, step);
  return {{"tokens", tokens}, {"imbalance", imbalance}, {"imbalance_max", worst}};
}

// One epoch's training, for its end-of-epoch line.
struct EpochStats {
  double train_s = 0;
  std::int64_t samples = 0;  // this rank's
};

// One call of Trainer::fit(), stage by stage. Each stage before the loop gives one struct (below,
// in the order fit() runs them) and is that struct's build(): its parameters are what it takes
// (const where it only reads), so the order of the stage calls is written in their signatures.
// The loop's inputs keep FitLoop's names there (in_, cfg_, hb_). FitLoop is the loop: it holds
// the structs as bases in stage order, so they are built in that order and on an exception torn
// down in reverse (DDP before its process group, the run dir lock before an abandoned fresh dir),
// and its loop stages (run_epoch, evaluate_epoch, checkpoint_epoch, finish) read them all.

// What every stage reads: the caller's inputs, the config (build of Loaders records a kept global
// batch in it, so config.toml has it), the process's heartbeat.
struct FitContext {
  FitContext(const FitInputs& in, Heartbeat& hb) : in_(in), cfg_(in.o.config), hb_(hb) {}
  torch::nn::Module& model() const { return *in_.module; }
  const FitInputs& in_;
  const Clock::time_point t_start_ = Clock::now();
  Config cfg_;
  Heartbeat& hb_;  // the process's (util/heartbeat.h), for the launcher's stall detection
};

// configure() gives: the job as the config and the environment define it.
struct JobSetup {
  void build(const FitInputs& in_, const Config& cfg_, Heartbeat& hb_);
  dist::WorkerEnv wenv_;
  bool rank0_ = true;
  torch::Device dev_ = torch::kCPU;
  bool use_pg_ = false;  // under a launcher: process group and DDP
  bool graphs_ = false;  // CUDA graphs asked for, on a CUDA device
  Amp amp_ = Amp::kOff;  // train.amp on this device ("auto" resolved: train/machine_choices.h)
  StepOptions step_opts_;
  EvalOptions eval_opts_;
  std::optional<FaultInjection> faults_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> rank_log_ = no_file();  // ranks > 0: <run_dir>/rank_<N>.log
  std::unique_ptr<metrics::Progress> progress_;  // the console (a sink: the stages after write to it)
};

// resolve_resume(job) gives: the run dir, locked, and the checkpoint to continue from, verified.
struct ResumeChoice {
  void build(const FitInputs& in_, const Config& cfg_, const JobSetup& job);
  std::optional<FreshRunDir> fresh_dir_;
  std::optional<RunDirLock> lock_;
  std::optional<CheckpointStore> store_;
  std::string resume_;  // "", "auto" or a checkpoint dir
  std::optional<std::string> resume_dir_;
};

// build_parallel_state(job, resume) gives: the process group, the model on its device (resumed
// weights loaded), DDP, the optimizer, the loss scaler and the step.
struct ParallelState {
  void build(const FitInputs& in_, const Config& cfg_, Heartbeat& hb_, const JobSetup& job, const ResumeChoice& resume);
  std::shared_ptr<dist::ProcessGroup> pg_;
  std::optional<CheckpointState> resumed_state_;
  std::unique_ptr<dist::DistributedDataParallel> ddp_;
  std::unique_ptr<UnitHooksScope> unit_hooks_;  // stage 3: the units' forwards call the DDP (gone before it)
  std::vector<torch::Tensor> params_;
  std::optional<Optimizer> opt_;
  std::optional<GradScaler> scaler_;
  std::optional<TrainStep> train_step_;
  std::optional<CommMeter> comm_;  // with a process group: bytes sent, ratio, time waiting (train/comm_figures.h)
  bool sharded() const { return ddp_ && ddp_->sharded(); }
  // dist.zero_stage = 3: the module's whole weights for a use outside the training step
  // (evaluation, a checkpoint, the weights fit() returns); a no-op at other stages and when
  // they are whole already. Every rank, in step: the gather is collective.
  // Evaluation (a forward outside the training step): the parameters outside the units gathered
  // and held, each unit gathered by its own forward and freed after it, so at most the rest and
  // two units are whole (DDP::gather_outside_units).
  struct EvalWeights {
    explicit EvalWeights(ParallelState& p) : ddp(p.whole_ ? nullptr : p.ddp_.get()) {
      if (ddp) ddp->gather_outside_units();
    }
    ~EvalWeights() {
      if (ddp) ddp->release_parameters();
    }
    EvalWeights(const EvalWeights&) = delete;
    EvalWeights& operator=(const EvalWeights&) = delete;
    dist::DistributedDataParallel* ddp;
  };
  // Every rank's weights finite (the check before a checkpoint): at a stage, this rank's shards,
  // the verdict all-reduced; else the module's parameters.
  bool weights_finite() const;
  bool whole_ = false;  // finish(): gathered for good (TrainOptions::whole_weights_after_fit)
  void note_zero_stage(const Config& cfg_, const JobSetup& job) const;
  void record_model_state(const Config& cfg_, TrainSummary& sum) const;
};

// build_loaders(job, parallel) gives: each rank's micro-batch (train.global_batch_size / (world ×
// accumulate), else batch_size) and the loaders; an elastic job's kept global batch goes into cfg_.
struct Loaders {
  void build(const FitInputs& in_, Config& cfg_, const JobSetup& job, const ParallelState& par);
  std::int64_t elastic_global_batch(const FitInputs& in_, const Config& cfg_, const JobSetup& job,
                                    const ParallelState& par) const;
  void check_elastic_range(const Config& cfg_, const JobSetup& job, std::int64_t global) const;
  std::int64_t micro_batch_ = 0;
  std::optional<data::BatchLoader> train_loader_, test_loader_;
  std::unique_ptr<data::BatchLoader> val_loader_;
  const char* val_split_ = "test";                                          // what the epoch-end evaluation reports as
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> sample_log_ = no_file();  // debug.sample_log
};

// plan_schedule(loaders) gives: steps per epoch, where the run stops, the learning rate per step.
struct StepPlan {
  void build(const Config& cfg_, const Loaders& feed);
  std::int64_t batches_ = 0, steps_per_epoch_ = 0, total_steps_ = 0;
  std::int64_t stop_epoch_ = 0;  // 0-based: the epoch a max_steps stop ends in (what progress shows as the end)
  std::optional<LrSchedule> schedule_;
};

// restore_or_start(job, resume, parallel, loaders, plan) gives: where the loop starts, its
// counters and its log window; a resumed run restores the optimizer, RNG and loss scale into
// `par` (what the uninterrupted run has in memory), a fresh one sets warm-up's first rate.
struct LoopState {
  void build(const FitInputs& in_, const Config& cfg_, const JobSetup& job, const ResumeChoice& resume,
             ParallelState& par, const Loaders& feed, const StepPlan& plan);
  void continue_at_world(const Config& cfg_, const JobSetup& job, const ResumeChoice& resume, const Loaders& feed,
                         const DataLayout& was);
  void note_schedule_change(const Config& cfg_, const JobSetup& job, double saved_lr, const StepPlan& plan) const;
  bool done(const Config& cfg_, std::int64_t epoch) const { return epoch >= cfg_.train.epochs || n_.stop; }
  Position start_;
  std::optional<nlohmann::json> resized_;  // an elastic resume at another world size, for metrics.jsonl
  LoopCounters n_;
  LogWindow window_;
};

// read_first_batch(loop, loaders) gives: the first epoch's loader started and its first batch
// read (images: decoded) before anything is written.
struct FirstBatch {
  void build(const Config& cfg_, Heartbeat& hb_, const LoopState& loop, Loaders& feed);
  bool primed_ = false;                      // the first epoch's loader is started and its first batch read
  std::optional<data::Batch> primed_batch_;  // that batch (none: the resume point is the epoch's end)
};

// open_outputs(job, resume, parallel, plan, loop) gives: the run dir committed (config.toml) and
// the run's log (metrics.jsonl, TensorBoard).
struct RunOutputs {
  void build(const FitInputs& in_, const Config& cfg_, const JobSetup& job, ResumeChoice& resume,
             const ParallelState& par, const StepPlan& plan, const LoopState& loop);
  RunLog log_;
};

// prepare_cuda_graph() gives: train.cuda_graphs' step, captured once and replayed per batch (a
// FitLoop method: its hooks call back into the loop's step).
struct GraphState {
#ifdef TRAINBOX_WITH_CUDA
  std::vector<torch::Tensor> model_state_;  // parameters and buffers, for the warm-up snapshot
  std::optional<StateSnapshot> warmup_snapshot_;
  std::unique_ptr<CudaGraphStep> graph_step_;
#endif
};

class FitLoop : FitContext,
                JobSetup,
                ResumeChoice,
                ParallelState,
                Loaders,
                StepPlan,
                LoopState,
                FirstBatch,
                RunOutputs,
                GraphState {
 public:
  explicit FitLoop(const FitInputs& in) : FitContext(in, heartbeat()) {}

  // --- the stages before the loop, in order; each says what it takes ---
  void configure() { JobSetup::build(in_, cfg_, hb_); }
  void resolve_resume() { ResumeChoice::build(in_, cfg_, job()); }
  void build_parallel_state() { ParallelState::build(in_, cfg_, hb_, job(), resume()); }
  void build_loaders() { Loaders::build(in_, cfg_, job(), parallel()); }
  void plan_schedule() { StepPlan::build(cfg_, loaders()); }
  void restore_or_start() { LoopState::build(in_, cfg_, job(), resume(), *this, loaders(), plan()); }
  void read_first_batch() { FirstBatch::build(cfg_, hb_, loop(), *this); }
  void open_outputs() { RunOutputs::build(in_, cfg_, job(), *this, parallel(), plan(), loop()); }
  void prepare_cuda_graph();
  // --- the loop ---
  std::int64_t first_epoch() const { return start_.epoch; }
  // Bad input (exit 2) ended the job: a run dir this fit() created goes, unless it holds a train line.
  void abandon_outputs() {
    if (fresh_dir_) fresh_dir_->abandon();
  }
  bool done(std::int64_t epoch) const { return LoopState::done(cfg_, epoch); }
  // A frame of its own (never inlined into fit()): a stall's stack then reads
  // `fault_injection_stall ← FitLoop::run_epoch ← Trainer::Impl::fit` (tests/integration/hang.sh).
  [[gnu::noinline]] EpochStats run_epoch(std::int64_t epoch);
  void evaluate_epoch(std::int64_t epoch, const EpochStats& trained);
  void checkpoint_epoch(std::int64_t epoch);
  TrainSummary finish();

 private:
  const JobSetup& job() const { return *this; }
  const ResumeChoice& resume() const { return *this; }
  const ParallelState& parallel() const { return *this; }
  const Loaders& loaders() const { return *this; }
  const StepPlan& plan() const { return *this; }
  const LoopState& loop() const { return *this; }
  void mark(std::int64_t step, const char* phase) {  // a heartbeat, and a debug stall if this is the one
    hb_.beat(step, phase);
    faults_->at(step, phase);
  }
  bool train_micro_batch(const data::Batch& b, std::int64_t& micro);
  void flush_window(std::int64_t epoch, std::int64_t batch);
  void save_checkpoint(std::int64_t epoch, std::int64_t next_batch);
  CheckpointState checkpoint_state(std::int64_t epoch, std::int64_t next_batch) const;
  std::string save_sharded(std::int64_t epoch, std::int64_t next_batch, const CompressionEntries& comp);
  void report_eval(const char* split, std::int64_t epoch, const EvalResult& ev);
#ifdef TRAINBOX_WITH_CUDA
  torch::Tensor graph_body(const torch::Tensor& x, const torch::Tensor& y);
#endif
};

// --- configure: the config checked, torch's settings, who this process is, its device ---
void JobSetup::build(const FitInputs& in_, const Config& cfg_, Heartbeat& hb_) {
  validate(cfg_);
  if (in_.o.run_dir.empty()) throw UsageError("no run dir given", "pass --run-dir DIR");
  // A checkpoint named by path that is not there: refused on every rank before any of them
  // makes a folder (ranks > 0 make the run dir for their logs below, before rank 0's checks).
  if (const std::string& r = in_.o.resume; !r.empty() && r != "auto" && !fs::exists(r))
    throw DataError("checkpoint " + r + " does not exist",
                    "pass a checkpoint dir such as <run_dir>/checkpoints/step_N, or --resume auto");
  if (!in_.module || !in_.forward)
    throw UsageError("Trainer::fit() without a model", "call Trainer::model(module) first");
  if (!in_.splits.train || !in_.splits.test)
    throw UsageError("Trainer::fit() without data", "call Trainer::data(splits) with a train and a test Source");

  // torch's own settings, as the config asks (the process environment is configure_process()'s);
  // train.threads > 0 wins over OMP_NUM_THREADS, and says so when they differ (train/machine_choices.h)
  const ThreadChoice threads = choose_threads(cfg_.train.threads, process_env()("OMP_NUM_THREADS"));
  if (threads.threads > 0) torch::set_num_threads(threads.threads);
  at::globalContext().setDeterministicAlgorithms(cfg_.train.deterministic, /*warn_only=*/false);
  at::globalContext().setBenchmarkCuDNN(cfg_.train.cudnn_benchmark);
  at::globalContext().setDeterministicCuDNN(cfg_.train.deterministic);
  // --- who am I: a single process, or one rank of a data-parallel job ---
  wenv_ = dist::WorkerEnv::from_environment();
  rank0_ = wenv_.rank == 0;
  const DeviceChoice device_choice = choose_device(cfg_.train.device, wenv_.local_rank, wenv_.local_world_size);
  dev_ = device_choice.device;
  // Under a launcher even a world of 1 goes through the process group and DDP (on a GPU:
  // NCCL), as a torchrun script would; a plain `trainbox train` does not.
  use_pg_ = wenv_.source != dist::WorkerSource::kSingle;
  if (use_pg_ && cfg_.train.cuda_graphs)
    throw ConfigError("train.cuda_graphs = true is not supported under a launcher (data-parallel training)",
                      "set train.cuda_graphs = false, or run trainbox train directly");
  // Only rank 0 draws progress and writes shared files; other ranks log to <run_dir>/rank_<N>.log.
  if (!rank0_) {
    std::error_code ec;
    fs::create_directories(in_.o.run_dir, ec);
    rank_log_.reset(std::fopen(fmt::format("{}/rank_{}.log", in_.o.run_dir, wenv_.rank).c_str(), "a"));
  }
  progress_ =
      std::make_unique<metrics::Progress>(in_.o.quiet || (!rank0_ && !rank_log_) ? metrics::Progress::Mode::kQuiet
                                          : rank0_ ? metrics::Progress::parse_mode(cfg_.output.progress)
                                                   : metrics::Progress::Mode::kLines,
                                          rank0_ ? stderr : rank_log_.get());
  if (cfg_.train.amp == Amp::kFp16 && !dev_.is_cuda())
    throw ConfigError("train.amp = \"fp16\" needs a CUDA device (CPU autocast is bf16)",
                      "use train.amp = \"bf16\" or \"auto\" on CPU");
  // train.amp = "auto" by device; an explicit bf16 on a CPU that emulates it warns, once
  const AmpChoice amp = choose_amp(cfg_.train.amp, dev_.is_cuda(), dev_.is_cuda() ? CpuFeatures{} : cpu_features());
  amp_ = amp.amp;
  if (rank0_)
    for (const std::string* n : {&threads.note, &amp.note})
      if (!n->empty()) progress_->note(*n);
  // cuBLAS takes its workspace from the environment alone, when its first handle is made.
  if (cfg_.train.deterministic && dev_.is_cuda() && !std::getenv("CUBLAS_WORKSPACE_CONFIG"))
    throw ConfigError(
        "train.deterministic = true on CUDA needs CUBLAS_WORKSPACE_CONFIG=:4096:8 in the environment before the "
        "first cuBLAS call (without it torch refuses cuBLAS under deterministic algorithms)",
        "call trainbox::train::configure_process(process_setup_for(config)) first thing in main "
        "(train/process_setup.h), or export CUBLAS_WORKSPACE_CONFIG=:4096:8");
  if (!device_choice.note.empty() && rank0_) progress_->note(device_choice.note);
  graphs_ = cfg_.train.cuda_graphs;
  if (graphs_ && !dev_.is_cuda()) {
    progress_->note("note: train.cuda_graphs = true has no effect on CPU; running eagerly");
    graphs_ = false;
  }
  step_opts_.accumulate = cfg_.train.accumulate;
  step_opts_.clip_grad_norm = cfg_.train.clip_grad_norm;
  step_opts_.amp = autocast_enabled(amp_);
  step_opts_.amp_dtype = autocast_dtype(amp_);
  step_opts_.device_type = dev_.type();
  eval_opts_ = {dev_, step_opts_.amp, step_opts_.amp_dtype, &hb_};
  faults_.emplace(cfg_.debug, wenv_.rank, wenv_.restart_count, std::getenv("TRAINBOX_FAULT"));
}

// --- resolve_resume: the run dir locked; the checkpoint to continue from, verified ---
void ResumeChoice::build(const FitInputs& in_, const Config& cfg_, const JobSetup& job) {
  const std::string& run_dir = in_.o.run_dir;
  // A launcher restart (TORCHELASTIC_RESTART_COUNT > 0) continues from the latest checkpoint.
  resume_ = in_.o.resume.empty() && job.wenv_.restart_count > 0 ? "auto" : in_.o.resume;
  // Checkpoints are verified against their manifests before anything is loaded (docs/checkpoints.md).
  std::vector<std::string> notes;  // damaged ones skipped, the fallback, an unverified old one
  // A checkpoint named by path is checked before the run dir is touched: a path that does not
  // exist is "does not exist" (exit 2), with nothing created and nothing removed.
  if (!resume_.empty() && resume_ != "auto") {
    const std::string named = resolve_checkpoint(resume_, &notes);                     // a run dir, `latest`, step_N
    for (const auto& n : CheckpointStore::check_resumable(named)) notes.push_back(n);  // DataError naming the file
    resume_dir_ = named;
  }
  fresh_dir_.emplace(run_dir, job.rank0_);  // makes the folders that are missing, and records them
  // One writer per run dir (rank 0 speaks for the job), taken before anything is written or cleaned.
  if (job.rank0_) lock_.emplace(run_dir);
  store_.emplace(run_dir, cfg_.checkpoint.keep);
  if (job.rank0_) store_->clean_incomplete();
  if (resume_ == "auto") {
    resume_dir_ = store_->latest(&notes);  // DataError (exit 2) when none verifies
    if (!resume_dir_)
      notes.push_back(fmt::format("--resume auto: no checkpoint in {}/checkpoints yet; starting at step 0", run_dir));
  } else if (resume_.empty() && store_->has_checkpoints()) {
    throw UsageError("run dir " + run_dir + " already has checkpoints",
                     "pass --resume auto to continue it, or choose a new --run-dir");
  }
  if (job.rank0_)
    for (const auto& n : notes) job.progress_->note(n);
  if (resume_dir_ && fs::exists(*resume_dir_ + "/config.toml")) {
    // The config level first: "trained with model.name = cnn; this config says mlp", not a tensor shape.
    std::optional<Config> trained;
    try {
      trained = load_config(*resume_dir_ + "/config.toml");
    } catch (const ConfigError&) {  // written by another trainbox version: the tensors decide
    }
    if (trained)
      check_resume_config(*trained, cfg_, resume_ == "auto" ? "the run dir " + run_dir : "checkpoint " + *resume_dir_);
  }
}

// --- build_parallel_state: the process group, the model on its device, DDP, the step ---
void ParallelState::build(const FitInputs& in_, const Config& cfg_, Heartbeat& hb_, const JobSetup& job,
                          const ResumeChoice& resume) {
  auto model = [&]() -> torch::nn::Module& { return *in_.module; };
  if (job.use_pg_) {
    dist::ProcessGroupOptions po;
    po.backend = cfg_.dist.backend;
    po.timeout = std::chrono::seconds(cfg_.dist.timeout_s);
    // Waiting for the other ranks to check in: a rank that never does is then named by the
    // launcher as a start-up stall within --stall-timeout (launch/stall.h), not after the
    // store's timeout. The training loop's records follow.
    hb_.beat(0, "rendezvous");
    pg_ = dist::ProcessGroup::init(job.wenv_, po, job.dev_);
  }
  model().to(job.dev_);
  if (resume.resume_dir_) {  // weights first: DDP's construction then broadcasts rank 0's copy to everyone
    resumed_state_ = read_checkpoint_state(*resume.resume_dir_);
    load_checkpoint_module(*resume.resume_dir_, model(), job.dev_);
  }
  if (pg_) {  // before the optimizer: the gradients become views into DDP's buckets
    dist::DdpOptions d;
    d.bucket_cap_bytes = static_cast<std::size_t>(cfg_.dist.bucket_cap_mb * (1 << 20));
    d.first_bucket_bytes = static_cast<std::size_t>(cfg_.dist.first_bucket_mb * (1 << 20));
    // an expert that received no tokens on this rank gets no gradient here
    d.find_unused_parameters = cfg_.dist.find_unused_parameters || cfg_.model.moe_experts > 0;
    d.broadcast_buffers = cfg_.dist.broadcast_buffers;
    d.heartbeat = &hb_;  // the end of backward waits for the other ranks: phase "allreduce"
    d.zero_stage = static_cast<int>(cfg_.dist.zero_stage);    // sharding (distributed/ddp.h)
    if (d.zero_stage >= 3) d.units = find_units(in_.module);  // the marked modules (mark_unit)
    d.compression = compression_options(cfg_.dist);           // distributed/compression.h
    ddp_ = std::make_unique<dist::DistributedDataParallel>(in_.module, pg_, d);
    unit_hooks_ = zero3_unit_hooks(*ddp_, d);
    comm_.emplace(*pg_, fp32_gradient_exchange_bytes(model().parameters(), pg_->size()), cfg_.dist.grad_compression);
    if (resume.resume_dir_)  // PowerSGD's error feedback and Q: this rank's, at the same world size
      if (auto note = load_compression_state(*resume.resume_dir_, *ddp_, resumed_state_->pos.step); note && job.rank0_)
        job.progress_->note(*note);
  }
  if (!pg_ && cfg_.dist.grad_compression != "none") {  // no DDP, but the same refusal as at every world size
    std::vector<std::vector<std::int64_t>> shapes;
    for (const auto& p : model().parameters())
      if (p.requires_grad()) shapes.push_back(p.sizes().vec());
    dist::check_compression_for_shapes(compression_options(cfg_.dist), shapes);
  }
  note_zero_stage(cfg_, job);
  if (cfg_.model.sync_batchnorm) {  // every BatchNorm normalises over the global batch (the group outlives training)
    dist::ProcessGroup* pg = pg_.get();
    models::sync_batch_norm(model(), pg ? models::AllReduceSum([pg](torch::Tensor& t) { pg->allreduce(t, false); })
                                        : models::AllReduceSum{});
  }
  params_.clear();  // what trains: frozen weights (LoRA's base, models/lora.h) get no optimizer state
  for (const auto& p : model().parameters())
    if (p.requires_grad()) params_.push_back(p);
  opt_.emplace(sharded() ? ddp_->optimizer_params() : params_, cfg_.optim);  // sharded: this rank's flat shards
  GradScalerOptions so;
  so.enabled = job.amp_ == Amp::kFp16;
  scaler_.emplace(so);
  StepOptions so_step = job.step_opts_;
  // The built-in loss on token targets: the mean over the global batch's valid targets (step.h).
  // Not inside a CUDA graph, whose replay cannot hold the step's all-reduce of the count.
  so_step.token_mean = !in_.loss && !job.graphs_;
  if (auto* m = dynamic_cast<models::Model*>(in_.module.get()))  // an MoE's load-balancing loss
    so_step.auxiliary_loss = [m] { return m->auxiliary_loss(); };
  train_step_.emplace(in_.forward, in_.loss, *opt_, *scaler_, ddp_.get(), so_step);
}

// dist.zero_stage: a world of 1 (or no launcher) shards nothing; padding that costs memory is said once.
void ParallelState::note_zero_stage(const Config& cfg_, const JobSetup& job) const {
  const std::int64_t stage = cfg_.dist.zero_stage;
  if (stage == 0 || !job.rank0_) return;
  if (job.wenv_.world_size == 1) {
    job.progress_->note(
        fmt::format("note: dist.zero_stage = {} does nothing with a world of 1 (one rank holds every "
                    "shard)",
                    stage));
    return;
  }
  if (stage >= 3 && ddp_ && ddp_->unit_count() == 0)
    job.progress_->note(
        "note: dist.zero_stage = 3 found no units in the model (models/activation_checkpoint.h: mark_unit): "
        "its parameters are gathered whole for each step, so only the optimizer state and gradients stay "
        "sharded while it runs");
  if (const std::int64_t pad = ddp_ ? ddp_->padding_elements() : 0; pad > 0)
    job.progress_->note(
        fmt::format("note: dist.zero_stage = {} pads its buckets to a multiple of {} ranks: {} zero "
                    "elements per rank's copy of the weights",
                    stage, job.wenv_.world_size, pad));
}

void ParallelState::record_model_state(const Config& cfg_, TrainSummary& sum) const {
  const auto state = opt_->state_tensors();
  std::vector<torch::Tensor> grads;
  for (const auto& p : params_)
    if (p.grad().defined()) grads.push_back(p.grad());
  const dist::ModelStateBytes b =
      ddp_ ? ddp_->model_state_bytes(state) : dist::count_model_state(params_, grads, state);
  sum.model_state_bytes = b.total();
  sum.param_bytes = b.params;
  sum.grad_bytes = b.grads;
  sum.optimizer_bytes = b.optimizer;
  sum.zero_stage = sharded() ? cfg_.dist.zero_stage : 0;
}

// An elastic job (trainbox run --nnodes MIN:MAX) without train.global_batch_size keeps the
// global batch it started with, so its first change of membership does not stop it
// (docs/distributed.md, "Elastic jobs"): the checkpoint's, else the one the job's first
// attempt recorded in the run dir's config.toml (a node lost before the first checkpoint),
// else this start's world x batch_size x accumulate. 0: a fixed world, a global batch set, or
// train.allow_global_batch_change = true (the global batch follows the world size).
std::int64_t Loaders::elastic_global_batch(const FitInputs& in_, const Config& cfg_, const JobSetup& job,
                                           const ParallelState& par) const {
  const TrainSection& t = cfg_.train;
  const dist::WorkerEnv& wenv_ = job.wenv_;
  if (!wenv_.elastic() || t.global_batch_size > 0 || t.allow_global_batch_change) return 0;
  if (par.resumed_state_ && par.resumed_state_->layout.world_size > 0 && par.resumed_state_->layout.global_batch > 0)
    return par.resumed_state_->layout.global_batch;
  if (wenv_.restart_count > 0) {
    try {
      const std::string recorded = in_.o.run_dir + "/config.toml";
      if (read_file(recorded)) {
        const Config first = load_config(recorded);
        if (first.train.global_batch_size > 0) return first.train.global_batch_size;
      }
    } catch (const ConfigError&) {  // another version's config.toml: this start decides
    }
  }
  return t.batch_size * wenv_.world_size * t.accumulate;
}

// The kept global batch must split over every world the node range allows (each node with
// this node's ranks): refused here, at start-up, not at the change hours later.
void Loaders::check_elastic_range(const Config& cfg_, const JobSetup& job, std::int64_t global) const {
  const dist::WorkerEnv& wenv_ = job.wenv_;
  const std::int64_t per_node = wenv_.local_world_size, acc = cfg_.train.accumulate;
  std::int64_t lcm = 1, bad = 0;
  for (std::int64_t n = wenv_.nnodes_min; n <= wenv_.nnodes_max; ++n) {
    lcm = std::lcm(lcm, n * per_node * acc);
    if (bad == 0 && global % (n * per_node * acc) != 0) bad = n * per_node;
  }
  if (bad == 0) return;
  const std::int64_t near = std::max<std::int64_t>(1, (global + lcm / 2) / lcm) * lcm;
  throw ConfigError(
      fmt::format("this elastic job (--nnodes {}:{}, {} rank{} a node) keeps its global batch of {} samples per step "
                  "({} rank{} x train.batch_size {} x accumulate {} at its first start), which does not split over {} "
                  "ranks",
                  wenv_.nnodes_min, wenv_.nnodes_max, per_node, per_node == 1 ? "" : "s", global, wenv_.world_size,
                  wenv_.world_size == 1 ? "" : "s", cfg_.train.batch_size, acc, bad),
      fmt::format("set train.global_batch_size to a multiple of {} (e.g. {}), which every world size of the range "
                  "splits, or train.allow_global_batch_change = true to let the global batch follow the world size",
                  lcm, near));
}

// --- build_loaders: each rank's micro-batch; the train, val and test loaders ---
void Loaders::build(const FitInputs& in_, Config& cfg_, const JobSetup& job, const ParallelState& par) {
  data::LoaderOptions lo;
  micro_batch_ = cfg_.train.batch_size;
  if (const std::int64_t kept = elastic_global_batch(in_, cfg_, job, par); kept > 0) {
    if (!par.resumed_state_) check_elastic_range(cfg_, job, kept);
    cfg_.train.global_batch_size = kept;  // config.toml records it: a restart before any checkpoint keeps it
    job.progress_->note(
        fmt::format("elastic job: {} samples per optimizer step at every world size (train.global_batch_size"
                    " = {} kept from the job's first start; set it to choose another)",
                    kept, kept));
  }
  if (const std::int64_t g = cfg_.train.global_batch_size; g > 0) {
    const std::int64_t w = job.wenv_.world_size, acc = cfg_.train.accumulate;
    if (g % (w * acc) != 0)
      throw ConfigError(
          fmt::format("train.global_batch_size = {} does not split over this job: {} rank{} x train.accumulate = {} "
                      "(each rank's micro-batch would be {:.3g} samples)",
                      g, w, w == 1 ? "" : "s", acc, double(g) / double(w * acc)),
          "choose a global batch divisible by world size x accumulate for every world size the job may have (for "
          "--nnodes MIN:MAX: a multiple of each count of ranks from MIN to MAX nodes)");
    micro_batch_ = g / (w * acc);
    lo.global_batch = g;
  }
  lo.batch_size = micro_batch_;
  lo.seed = static_cast<std::uint64_t>(cfg_.train.seed);
  lo.prefetch = cfg_.data.prefetch;
  lo.device = job.dev_;
  lo.device_resident = cfg_.data.device_resident;
  lo.drop_last = job.graphs_;  // a captured graph has one batch shape
  lo.shard = job.wenv_.rank;
  lo.shards = job.wenv_.world_size;
  lo.shuffle_buffer = cfg_.data.shuffle_buffer;
  train_loader_.emplace(in_.splits.train, lo);
  lo.shuffle_buffer = 0;
  lo.shard = 0;
  lo.shards = 1;  // every rank evaluates the whole split (identical weights, identical result)
  lo.shuffle = false;
  lo.drop_last = false;
  lo.batch_size = cfg_.train.eval_batch_size;
  test_loader_.emplace(in_.splits.test, lo);
  if (cfg_.debug.sample_log) {
    std::error_code ec;
    fs::create_directories(in_.o.run_dir + "/samples", ec);
    sample_log_.reset(std::fopen(
        fmt::format("{}/samples/attempt_{}_rank_{}.jsonl", in_.o.run_dir, job.wenv_.restart_count, job.wenv_.rank)
            .c_str(),
        "w"));
  }
  if (in_.splits.val && in_.splits.val != in_.splits.test && in_.splits.val->size() > 0)
    val_loader_ = std::make_unique<data::BatchLoader>(in_.splits.val, lo);
  val_split_ = in_.splits.val ? "val" : "test";
}

// --- plan_schedule: steps per epoch, where the run stops, the learning rate per step ---
void StepPlan::build(const Config& cfg_, const Loaders& feed) {
  batches_ = feed.train_loader_->batches_per_epoch();
  if (batches_ == 0)
    throw ConfigError(fmt::format("train.batch_size = {} is larger than the training set ({} samples)",
                                  cfg_.train.batch_size, feed.train_loader_->samples()),
                      "lower train.batch_size or raise data.limit");
  steps_per_epoch_ = (batches_ + cfg_.train.accumulate - 1) / cfg_.train.accumulate;
  total_steps_ = steps_per_epoch_ * cfg_.train.epochs;
  if (cfg_.train.max_steps > 0) total_steps_ = std::min(total_steps_, cfg_.train.max_steps);
  schedule_.emplace(cfg_.schedule, cfg_.optim.lr, total_steps_, steps_per_epoch_);
  stop_epoch_ = std::min(cfg_.train.epochs, (total_steps_ - 1) / steps_per_epoch_ + 1) - 1;
}

// --- restore_or_start: a resumed run restores what the uninterrupted one has in memory ---
void LoopState::build(const FitInputs& in_, const Config& cfg_, const JobSetup& job, const ResumeChoice& resume,
                      ParallelState& par, const Loaders& feed, const StepPlan& plan) {
  if (par.resumed_state_) {
    if (is_sharded_checkpoint(*resume.resume_dir_))  // rank files: resharded to this world and stage
      load_sharded_optimizer_rng(*resume.resume_dir_, par.ddp_.get(), *par.opt_, *in_.module);
    else if (par.sharded())  // the whole state, written at any world size and stage: this rank takes its slice
      load_checkpoint_optimizer_rng(
          *resume.resume_dir_,
          [&](torch::serialize::InputArchive& ar) { load_optimizer_shard(*par.ddp_, *par.opt_, par.params_, ar); },
          job.dev_);
    else
      load_checkpoint_optimizer_rng(*resume.resume_dir_, *par.opt_, job.dev_);
    start_ = par.resumed_state_->pos;
    continue_at_world(cfg_, job, resume, feed, par.resumed_state_->layout);
    par.scaler_->load_state(par.resumed_state_->scaler);
    job.progress_->note(
        fmt::format("resuming from {} (epoch {}, step {})", *resume.resume_dir_, start_.epoch + 1, start_.step));
    note_schedule_change(cfg_, job, par.resumed_state_->lr, plan);
  }
  if (!resume.resume_dir_) par.opt_->set_lr(plan.schedule_->lr(0));  // warm-up starts at the very first step
  n_.step = start_.step;
  n_.samples = start_.samples;
  n_.last_checkpoint = resume.resume_dir_.value_or("");
  n_.stopped_at = {cfg_.train.epochs, 0, 0, 0};
  n_.last_epoch = std::max<std::int64_t>(0, start_.epoch - 1);
  if (cfg_.train.max_steps > 0 && n_.step >= cfg_.train.max_steps) {  // resumed at the limit: nothing left to train
    n_.stop = true;
    n_.stopped_at = start_;
  }
  window_.loss = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(job.dev_));
  window_.target_loss = torch::zeros_like(window_.loss);
  window_.targets = torch::zeros_like(window_.loss);
  window_.bad = torch::zeros({}, torch::TensorOptions().dtype(torch::kInt64).device(job.dev_));
  in_.module->train();
  par.opt_->zero_grad();
}

// A resume whose schedule gives the next step another rate than the checkpoint's run would have
// (a larger train.max_steps stretches a cosine over the new length, and the rate rises again):
// said once, as it is what the user changed. Checkpoints written before `lr` was kept read as -1.
void LoopState::note_schedule_change(const Config& cfg_, const JobSetup& job, double saved_lr,
                                     const StepPlan& plan) const {
  const double now = plan.schedule_->lr(start_.step);
  if (saved_lr < 0 || std::abs(now - saved_lr) <= 1e-9 * std::abs(saved_lr)) return;
  job.progress_->note(fmt::format(
      "note: the learning rate schedule changed since the checkpoint: step {} runs at lr {:.3g}, where the "
      "checkpoint's run was at {:.3g} (schedule.name = {} now spans {}; a larger train.max_steps or train.epochs "
      "re-stretches it); resume with the checkpoint's train.max_steps and train.epochs to keep its rates",
      start_.step + 1, now, saved_lr, cfg_.schedule.name, plural(plan.total_steps_, "step")));
}

// An elastic resume: the checkpoint's place in its epoch (a global sample cursor) as this
// world's batch index; refused when the global batch differs, unless the config allows it.
void LoopState::continue_at_world(const Config& cfg_, const JobSetup& job, const ResumeChoice& resume,
                                  const Loaders& feed, const DataLayout& was) {
  const std::int64_t micro_batch_ = feed.micro_batch_;
  const std::int64_t w = job.wenv_.world_size, global = micro_batch_ * w * cfg_.train.accumulate;
  if (was.world_size == 0) return;  // written before layouts were kept: the batch index stands
  if (was.world_size == w && (was.global_batch == global || cfg_.train.global_batch_size == 0))
    return;  // same world: the batch index stands (a changed train.batch_size was always the user's call)
  if (was.global_batch != global && !cfg_.train.allow_global_batch_change)
    throw ConfigError(
        fmt::format("{} was trained with a global batch of {} samples per step ({} ranks); this job's is {} ({} "
                    "rank{} x {} x accumulate {})",
                    *resume.resume_dir_, was.global_batch, was.world_size, global, w, w == 1 ? "" : "s", micro_batch_,
                    cfg_.train.accumulate),
        fmt::format("set train.global_batch_size = {} to keep it at every world size, or "
                    "train.allow_global_batch_change = true to go on with the new one",
                    was.global_batch));
  const std::int64_t per_batch = micro_batch_ * w;
  start_.batch = was.cursor / per_batch;  // exact when the global batch is kept: checkpoints are at step boundaries
  resized_ = nlohmann::json{{"event", "resize"},          {"step", start_.step},    {"world_before", was.world_size},
                            {"world_after", w},           {"global_batch", global}, {"cursor", was.cursor},
                            {"micro_batch", micro_batch_}};
  job.progress_->note(
      fmt::format("elastic resume: world {} -> {}; global batch {} = {} rank{} x {} x accumulate {}; the "
                  "epoch goes on at sample {}",
                  was.world_size, w, global, w, w == 1 ? "" : "s", micro_batch_, cfg_.train.accumulate, was.cursor));
}

// --- read_first_batch: the first batch read (images: decoded) before anything is written ---
// Every other input was read whole at start-up; images are decoded as they are trained on, so a
// file that does not decode (data.on_bad_image = "error") in the first batch is found here and
// leaves the run dir as it was: a fresh one removed, an existing one unchanged.
void FirstBatch::build(const Config& cfg_, Heartbeat& hb_, const LoopState& loop, Loaders& feed) {
  if (loop.done(cfg_, loop.start_.epoch)) return;
  hb_.beat(loop.n_.step, "data");  // a heartbeat only: a debug stall at "data" happens in run_epoch
  feed.train_loader_->start_epoch(loop.start_.epoch, loop.start_.batch);
  primed_batch_ = feed.train_loader_->next();
  primed_ = true;
}

// --- open_outputs: the first write to the run dir, now that everything was checked ---
void RunOutputs::build(const FitInputs& in_, const Config& cfg_, const JobSetup& job, ResumeChoice& resume,
                       const ParallelState& par, const StepPlan& plan, const LoopState& loop) {
  if (job.rank0_) write_text_atomic(in_.o.run_dir + "/config.toml", in_.config_toml(cfg_));
  resume.fresh_dir_->commit();
  if (job.rank0_) log_.open(in_.o.run_dir, cfg_.output.tensorboard);
  if (job.rank0_ && loop.resized_) log_.write(*loop.resized_);
  // What will run: a max_steps stop before the last epoch's end is named as such.
  const std::int64_t total_steps_ = plan.total_steps_, steps_per_epoch_ = plan.steps_per_epoch_;
  const std::string what_runs =
      total_steps_ < steps_per_epoch_ * cfg_.train.epochs
          ? fmt::format("{} by train.max_steps, {}/epoch",
                        loop.start_.step > 0 ? fmt::format("to step {}", total_steps_) : plural(total_steps_, "step"),
                        plural(steps_per_epoch_, "step"))
          : fmt::format("{}/epoch, {}", plural(steps_per_epoch_, "step"), plural(cfg_.train.epochs, "epoch"));
  job.progress_->note(fmt::format(
      "trainbox train: {} on {}{}, {} ({}), run dir {}", in_.model_label(cfg_), job.dev_.str(),
      par.pg_ ? fmt::format(" (rank {} of {}, {})", job.wenv_.rank, job.wenv_.world_size, par.pg_->backend_name()) : "",
      in_.splits.description, what_runs, in_.o.run_dir));
  if (job.rank0_)  // the stage and the compression, and a note where their figures would surprise
    for (const auto& n : gradient_exchange_notes(cfg_.dist, job.wenv_.world_size, par.pg_ != nullptr, total_steps_))
      job.progress_->note(n);
}

// --- prepare_cuda_graph: micro_step + optimizer_step captured once, replayed per batch ---
void FitLoop::prepare_cuda_graph() {
  if (!graphs_) return;
#ifdef TRAINBOX_WITH_CUDA
  model_state_ = model().parameters();
  for (const auto& b : model().buffers()) model_state_.push_back(b);
  graph_step_ = std::make_unique<CudaGraphStep>(
      dev_, GraphStepHooks{[this](const torch::Tensor& x, const torch::Tensor& y) { return graph_body(x, y); },
                           [this] { warmup_snapshot_.emplace(model_state_, *opt_); },
                           [this] {
                             warmup_snapshot_->restore(model_state_, *opt_);
                             warmup_snapshot_.reset();
                           }});
#else
  throw SystemError("this trainbox was built without CUDA support; cuda_graphs is unavailable");
#endif
}

#ifdef TRAINBOX_WITH_CUDA
// What the graph captures: one whole step.
torch::Tensor FitLoop::graph_body(const torch::Tensor& x, const torch::Tensor& y) {
  auto l = train_step_->micro_step(x, y);
  train_step_->optimizer_step();
  return l;
}
#endif

// --- run_epoch: the batches of one epoch (from the resume point in the first) ---
EpochStats FitLoop::run_epoch(std::int64_t epoch) {
  n_.last_epoch = epoch;
  if (!primed_) train_loader_->start_epoch(epoch, epoch == start_.epoch ? start_.batch : 0);
  window_.t = Clock::now();     // evaluation time is not training time
  if (comm_) comm_->restart();  // nor its collectives (nor a checkpoint's) the step's communication
  std::int64_t micro = 0;       // micro-batches into the current optimizer step
  const std::int64_t samples_at_start = n_.samples;
  const auto t_epoch = Clock::now();
  while (true) {
    mark(n_.step, "data");
    std::optional<data::Batch> b;
    if (primed_) {  // the batch read_first_batch() checked
      b = std::move(primed_batch_);
      primed_batch_.reset();
      primed_ = false;
    } else {
      b = train_loader_->next();
    }
    if (!b) break;
    if (!train_micro_batch(*b, micro)) continue;  // accumulating
    ++n_.step;
    ++window_.steps;
    opt_->set_lr(schedule_->lr(n_.step));  // the rate for the next step
    if (n_.step % cfg_.train.log_every == 0) flush_window(epoch, b->index + 1);
    if (cfg_.checkpoint.every_steps > 0 && n_.step % cfg_.checkpoint.every_steps == 0) {
      flush_window(epoch, b->index + 1);
      save_checkpoint(epoch, b->index + 1);
    }
    if (cfg_.train.max_steps > 0 && n_.step >= cfg_.train.max_steps) {
      n_.stop = true;
      n_.stopped_batch = b->index + 1;
      n_.stopped_at = b->index + 1 < batches_ ? Position{epoch, b->index + 1, 0, 0} : Position{epoch + 1, 0, 0, 0};
      break;
    }
  }
  flush_window(epoch, n_.stop ? n_.stopped_batch : batches_);  // a max_steps stop: the batch it stopped after
  const EpochStats trained{seconds_since(t_epoch), n_.samples - samples_at_start};  // training only
  n_.train_s += trained.train_s;
  progress_->finish_line();
  return trained;
}

// Forward and backward of one micro-batch, then the optimizer on the last one of a step.
// Returns whether an optimizer step was taken.
bool FitLoop::train_micro_batch(const data::Batch& b, std::int64_t& micro) {
  if (sample_log_) {
    const auto idx = b.samples.to(torch::kCPU).contiguous();
    const auto* p = idx.data_ptr<std::int64_t>();
    nlohmann::json line = {{"epoch", n_.last_epoch}, {"step", n_.step + 1},
                           {"batch", b.index},       {"world", wenv_.world_size},
                           {"rank", wenv_.rank},     {"samples", std::vector<std::int64_t>(p, p + idx.numel())}};
    std::fputs((line.dump() + "\n").c_str(), sample_log_.get());
    std::fflush(sample_log_.get());  // a SIGKILL must not lose what was trained
  }
  torch::Tensor l;
  const bool last_micro = (micro + 1) % cfg_.train.accumulate == 0 || b.index + 1 == batches_;
  mark(n_.step, "forward_backward");
  try {
    if (graphs_) {
#ifdef TRAINBOX_WITH_CUDA
      l = (*graph_step_)(b.x, b.y);
#endif
    } else {
      l = train_step_->micro_step(b.x, b.y, last_micro);  // with DDP the wait for gradients is phase "allreduce"
      if (last_micro) {
        mark(n_.step, "optimizer");
        train_step_->optimizer_step();
        if (n_.first_step_s == 0) n_.first_step_s = process_age_s();  // start-up: the first step of this process
      }
    }
  } catch (const c10::OutOfMemoryError& e) {  // one line: rank, allocation, the plan's breakdown, the fix
    throw_device_out_of_memory(e.what_without_backtrace(), model(), cfg_, wenv_.rank, wenv_.world_size, micro_batch_);
  }
  ++micro;
  const std::int64_t n = b.y.size(0);
  n_.sequence = b.y.dim() > 1;
  n_.samples += n;
  n_.tokens += b.y.numel();
  window_.samples += n;
  window_.tokens += b.y.numel();
  window_.loss += l.to(torch::kFloat64);
  if (const auto& cnt = train_step_->last_targets(); cnt.defined()) {
    const auto c = cnt.to(torch::kFloat64);
    window_.target_loss += l.to(torch::kFloat64) * c;
    window_.targets += c;
    window_.per_target = true;
  }
  window_.bad += l.isfinite().logical_not().to(torch::kInt64);
  ++window_.micro;
  if (!last_micro) return false;
  micro = 0;
  return true;
}

// Loss check + log; at log points, before checkpoints and at epoch ends. Every rank reaches
// the same log points.
void FitLoop::flush_window(std::int64_t epoch, std::int64_t batch) {
  if (window_.steps == 0) return;
  // before the loss's allreduce below: the window's own communication, every rank's (a collective)
  const CommFigures comm = comm_ ? comm_->window(window_.steps) : CommFigures{};
  if (pg_) {  // average the loss, count bad steps everywhere
    hb_.phase("allreduce");
#ifdef TRAINBOX_WITH_CUDA
    if (faults_->hang_gpu_before_collective(n_.step) && dev_.is_cuda()) {
      std::fprintf(stderr, "trainbox: debug.stall: rank %d hangs its GPU stream before the allreduce at step %lld\n",
                   wenv_.rank, static_cast<long long>(n_.step));
      enqueue_gpu_hang();  // the collective below cannot start: NCCL's watchdog times it out
    }
#endif
    pg_->allreduce(window_.loss, /*average=*/true);
    if (window_.per_target) {
      auto both = torch::stack({window_.target_loss, window_.targets});
      pg_->allreduce(both, /*average=*/false);
      window_.target_loss.copy_(both[0]);
      window_.targets.copy_(both[1]);
    }
    auto bad_all = window_.bad.to(torch::kFloat64);
    pg_->allreduce_op(bad_all, c10d::ReduceOp::MAX);  // the worst rank decides, on every rank
    window_.bad.copy_(bad_all.to(torch::kInt64));
  }
  // the mean per valid target (token targets, built-in loss), else the mean micro-batch loss
  const double mean = window_.per_target
                          ? window_.target_loss.item<double>() / std::max(1.0, window_.targets.item<double>())
                          : window_.loss.item<double>() / double(window_.micro);
  const std::int64_t bad = window_.bad.item<std::int64_t>();
  // fp16: GradScaler skips overflowing steps; only a window mostly non-finite is divergence.
  const bool diverged = scaler_->enabled() ? bad * 2 > window_.micro : bad > 0;
  if (diverged) {
    progress_->finish_line();
    throw DivergedError(fmt::format("training diverged: loss became {} at step {} (epoch {}); last good checkpoint: {}",
                                    std::isnan(mean) ? "NaN" : "inf", n_.step, epoch + 1,
                                    n_.last_checkpoint.empty() ? "none" : n_.last_checkpoint),
                        "lower optim.lr, set train.clip_grad_norm (e.g. 1.0), or use train.amp = \"bf16\"; "
                        "--resume auto restarts from the last good checkpoint");
  }
  const double dt = seconds_since(window_.t);
  const double rate = dt > 0 ? double(window_.samples) * wenv_.world_size / dt : 0;  // the whole job's rate
  const double token_rate = dt > 0 ? double(window_.tokens) * wenv_.world_size / dt : 0;
  const double eta =
      rate > 0
          ? double((total_steps_ - n_.step) * cfg_.train.batch_size * cfg_.train.accumulate * wenv_.world_size) / rate
          : -1;
  const double lr = opt_->lr();
  // metrics.jsonl counts for the whole job, as the console and the summary line do
  // (docs/trainer.md, "metrics.jsonl"): samples since this start on every rank, the job's rate,
  // and the global batch with the world it is split over (a reader's per-rank figure).
  nlohmann::json line = {{"event", "train"},
                         {"epoch", epoch + 1},
                         {"step", n_.step},
                         {"loss", mean},
                         {"lr", lr},
                         {"samples_per_s", rate},
                         {"samples", (n_.samples - start_.samples) * wenv_.world_size},
                         {"global_batch", micro_batch_ * wenv_.world_size * cfg_.train.accumulate},
                         {"world_size", wenv_.world_size}};
  if (n_.sequence) line["tokens_per_s"] = token_rate;
  if (!comm.empty()) line["comm"] = comm_to_json(comm);
  if (auto* m = dynamic_cast<models::Model*>(in_.module.get()))
    if (auto moe = routing_window(*m, pg_.get(), cfg_.model.moe_top_k, cfg_.model.moe_collapse_share, window_, log_,
                                  *progress_, rank0_, n_.step);
        !moe.is_null())
      line["moe"] = std::move(moe);
  log_.write(line);
  fresh_dir_->keep();
  log_.scalar("train/loss", mean, n_.step);
  log_.scalar("train/lr", lr, n_.step);
  log_.scalar("train/samples_per_s", rate, n_.step);
  if (n_.sequence) log_.scalar("train/tokens_per_s", token_rate, n_.step);
  log_.scalar("system/peak_memory_bytes", double(peak_memory(dev_)), n_.step);
  // The real stop: with train.max_steps the last epoch shown is the one the limit ends in,
  // and its batch count is where it ends (not the full epoch's).
  const std::int64_t shown_batches =
      epoch == stop_epoch_ ? std::min(batches_, (total_steps_ - stop_epoch_ * steps_per_epoch_) * cfg_.train.accumulate)
                           : batches_;
  progress_->update({epoch + 1, std::min(cfg_.train.epochs, stop_epoch_ + 1), std::min(batch, shown_batches),
                     shown_batches, n_.step, total_steps_, mean, lr, rate, eta, n_.sequence ? token_rate : 0.0});
  if (in_.on_step) in_.on_step({epoch + 1, n_.step, mean, lr, rate, n_.sequence ? token_rate : 0.0});
  window_.loss.zero_();
  window_.bad.zero_();
  window_.target_loss.zero_();
  window_.targets.zero_();
  window_.steps = window_.micro = window_.samples = window_.tokens = 0;
  window_.t = Clock::now();
  if (comm_) comm_->restart();  // the logging collectives above are not the next window's
}

bool ParallelState::weights_finite() const {
  torch::NoGradGuard ng;
  const auto ts = sharded() ? ddp_->optimizer_params() : params_;
  auto ok = torch::stack(at::_foreach_norm(ts, 2)).isfinite().all().to(torch::kInt32).reshape({1});
  if (!sharded()) return ok.item<int>() == 1;
  auto bad = (1 - ok).to(ts.front().device());  // a rank whose shard went non-finite stops every rank
  ddp_->allreduce_max(bad);
  return bad.item<int>() == 0;
}

// --- save_checkpoint: every rank at the same step; rank 0 writes, atomically ---
void FitLoop::save_checkpoint(std::int64_t epoch, std::int64_t next_batch) {
  mark(n_.step, "checkpoint");
  // never checkpoint weights that already went non-finite (the loss lags the update by a step)
  if (!weights_finite())
    throw DivergedError(fmt::format("training diverged: parameters became NaN/inf by step {}; last good checkpoint: {}",
                                    n_.step, n_.last_checkpoint.empty() ? "none" : n_.last_checkpoint),
                        "lower optim.lr, set train.clip_grad_norm (e.g. 1.0), or use train.amp = \"bf16\"");
  const std::string name = fmt::format("step_{}", n_.step);
  if (fs::path(n_.last_checkpoint).filename() == name) return;  // this step is saved already
  if (pg_) pg_->barrier();  // every rank has finished this step before the checkpoint is written
  // Every rank's gradient compression state (PowerSGD), gathered to rank 0: grad_compression.pt.
  const CompressionEntries comp = ddp_ ? gather_compression_state(*ddp_) : CompressionEntries{};
  if (sharded()) {  // every rank writes its shard; rank 0 commits (sharded_checkpoint.h)
    n_.last_checkpoint = save_sharded(epoch, next_batch, comp);
  } else if (!rank0_) {
    n_.last_checkpoint = store_->dir() + "/" + name;
  } else {
    const CheckpointState st = checkpoint_state(epoch, next_batch);
    const std::string config_toml = in_.config_toml(cfg_);
    n_.last_checkpoint = store_->save(
        n_.step,
        [&](const std::string& dir) {
          write_checkpoint(dir, model(), *opt_, st, config_toml);
          write_compression_state(dir, comp);
        },
        [this] { faults_->before_checkpoint_commit(); });
  }
  if (pg_) pg_->barrier();  // no rank runs ahead of a checkpoint that is not yet complete
  // The save's collectives (its barriers, the gather of PowerSGD's error feedback: a gradient's
  // worth a rank) are not the next window's step communication (docs/distributed.md).
  if (comm_) comm_->restart();
  if (!rank0_) return;
  log_.write({{"event", "checkpoint"}, {"step", n_.step}, {"path", n_.last_checkpoint}});
  if (in_.on_checkpoint) in_.on_checkpoint({n_.step, n_.last_checkpoint});
}

CheckpointState FitLoop::checkpoint_state(std::int64_t epoch, std::int64_t next_batch) const {
  CheckpointState st;
  st.pos = {epoch, next_batch, n_.step, n_.samples};
  st.layout = {wenv_.world_size, micro_batch_ * wenv_.world_size * cfg_.train.accumulate,
               next_batch * micro_batch_ * wenv_.world_size};
  st.scaler = scaler_->state();
  st.lr = opt_->lr();
  st.sample_shape = in_.splits.sample_shape;
  st.classes = in_.splits.classes;
  st.extra = in_.meta;
  return st;
}

// A sharded checkpoint (dist.zero_stage > 0): rank 0 creates the staging dir; every rank writes
// its shard (rank_<r>.*, fsync'ed); one allreduce says whether all of them did; only then rank 0
// writes its own files and the manifest and commits, as an unsharded save does. A rank that
// dies before the allreduce fails the others' collective: nothing is committed and `latest`
// stays where it was (tests/integration/crash_loop.sh).
std::string FitLoop::save_sharded(std::int64_t epoch, std::int64_t next_batch, const CompressionEntries& comp) {
  const std::int64_t step = n_.step;
  // Whether every rank got through its part, agreed by one collective (a failing rank still takes part).
  auto all_ok = [&](bool ok) {
    auto flag = torch::tensor({ok ? 0.0f : 1.0f}, torch::TensorOptions().device(params_.front().device()));
    ddp_->allreduce_sum(flag);
    return flag.item<float>() == 0.0f;
  };
  std::exception_ptr failed;
  try {
    if (rank0_) store_->begin_staged(step);
  } catch (...) {
    failed = std::current_exception();
  }
  if (!all_ok(!failed)) {
    if (failed) std::rethrow_exception(failed);
    throw SystemError("checkpoint save failed on rank 0 (it names the reason)", "see rank 0's error line");
  }
  try {
    // Rank-local entries (RankLocalEntries) of this rank's shard; the gradient compression state
    // is not one of them: it is gathered to rank 0's grad_compression.pt, as in unsharded saves.
    const RankLocalEntries local;
    write_rank_shard(store_->staging_dir(step), *ddp_, *opt_, step, local, [this] { faults_->in_shard_write(); });
  } catch (...) {
    failed = std::current_exception();
  }
  if (!all_ok(!failed)) {
    if (rank0_) store_->abandon_staged(step);
    const auto prev = read_file(store_->dir() + "/latest");
    const std::string still = prev ? "`latest` still names " + trim(*prev) : "no checkpoint was saved before";
    if (failed) try {
        std::rethrow_exception(failed);
      } catch (const SystemError&) {
        throw;                             // already "checkpoint save failed: …" with its fix
      } catch (const std::exception& e) {  // a write error (a full disk: "No space left on device")
        throw SystemError(fmt::format("checkpoint save failed on rank {}: {} (step_{} in {}; {})", wenv_.rank, e.what(),
                                      step, store_->dir(), still),
                          "check the run dir's file system (free space); --resume auto continues from `latest`");
      }
    throw SystemError(fmt::format("checkpoint save of step_{} failed on another rank (it names the reason)", step),
                      "see the other ranks' error lines; --resume auto continues from `latest`");
  }
  if (!rank0_) return store_->dir() + "/" + fmt::format("step_{}", step);
  const CheckpointState st = checkpoint_state(epoch, next_batch);
  const std::string config_toml = in_.config_toml(cfg_);
  return store_->save_staged(
      step,
      [&](const std::string& dir) {
        write_sharded_rest(dir, model(), *ddp_, st, config_toml);
        write_compression_state(dir, comp);
      },
      [this] { faults_->before_checkpoint_commit(); }, sharding_json(*ddp_, *opt_, step));
}

// --- evaluate_epoch: the val split (else test) at each epoch end ---
void FitLoop::evaluate_epoch(std::int64_t epoch, const EpochStats& trained) {
  mark(n_.step, "eval");
  const EvalWeights weights(*this);  // stage 3: evaluation runs outside the training step
  const EvalResult ev =
      evaluate(model(), in_.forward, in_.loss, in_.metric_fns, val_loader_ ? *val_loader_ : *test_loader_, eval_opts_);
  n_.last_eval = ev;
  n_.last_eval_step = n_.step;
  report_eval(val_split_, epoch, ev);
  log_.scalar("eval/loss", ev.loss, n_.step);
  log_.scalar("eval/accuracy", ev.accuracy, n_.step);
  if (n_.sequence) log_.scalar("eval/perplexity", std::exp(ev.loss), n_.step);
  log_.flush();
  const double rate = trained.train_s > 0 ? double(trained.samples) * wenv_.world_size / trained.train_s : 0.0;
  const auto& shape = in_.splits.sample_shape;
  progress_->note(n_.sequence ? fmt::format("epoch {}/{}: {} loss {:.4f}, perplexity {:.2f}, {} tokens/s", epoch + 1,
                                            stop_epoch_ + 1, val_split_, ev.loss, std::exp(ev.loss),
                                            metrics::Progress::format_rate(rate * double(shape.empty() ? 1 : shape[0])))
                              : fmt::format("epoch {}/{}: {} loss {:.4f}, accuracy {:.2f}%, {} samples/s", epoch + 1,
                                            stop_epoch_ + 1, val_split_, ev.loss, 100 * ev.accuracy,
                                            metrics::Progress::format_rate(rate)));
}

// --- checkpoint_epoch: checkpoint.every_epochs (the last epoch's is finish()'s) ---
void FitLoop::checkpoint_epoch(std::int64_t epoch) {
  const bool final_epoch = epoch + 1 == cfg_.train.epochs || n_.stop;
  if (!final_epoch && cfg_.checkpoint.every_epochs > 0 && (epoch + 1) % cfg_.checkpoint.every_epochs == 0)
    save_checkpoint(epoch + 1, 0);
}

void FitLoop::report_eval(const char* split, std::int64_t epoch, const EvalResult& ev) {
  const bool final = std::string(split) == "final";
  nlohmann::json line = {
      {"event", final ? "test" : "eval"}, {"step", n_.step}, {"loss", ev.loss}, {"accuracy", ev.accuracy}};
  if (!final) {
    line["split"] = split;
    line["epoch"] = epoch + 1;
  }
  if (n_.sequence) line["perplexity"] = std::exp(ev.loss);
  for (const auto& [k, v] : ev.metrics) line[k] = v;
  log_.write(line);
  if (!in_.on_eval) return;
  EvalInfo info;
  info.split = final ? "test" : split;
  info.epoch = epoch + 1;
  info.step = n_.step;
  info.final = final;
  info.loss = ev.loss;
  info.accuracy = ev.accuracy;
  info.metrics = ev.metrics;
  in_.on_eval(info);
}

// --- finish: the final checkpoint, the test split, the summary, the process group down ---
TrainSummary FitLoop::finish() {
  if (ddp_ && ddp_->zero_stage() >= 3 && in_.o.whole_weights_after_fit) {  // the module fit() leaves behind
    ddp_->gather_parameters();
    whole_ = true;
  }
  if (n_.last_checkpoint.empty() || fs::path(n_.last_checkpoint).filename() != fmt::format("step_{}", n_.step))
    save_checkpoint(n_.stopped_at.epoch, n_.stopped_at.batch);
  mark(n_.step, "eval");
  // The text dataset's test split is its val split: evaluated at this step already, not twice.
  const EvalResult test = [&] {
    if (in_.splits.test == in_.splits.val && n_.last_eval_step == n_.step && n_.last_eval) return *n_.last_eval;
    const EvalWeights weights(*this);  // stage 3: released before the process group goes
    return evaluate(model(), in_.forward, in_.loss, in_.metric_fns, *test_loader_, eval_opts_);
  }();
  report_eval("final", n_.last_epoch, test);

  TrainSummary sum;
  sum.run_dir = in_.o.run_dir;
  sum.device = dev_.str();
  sum.dataset = in_.splits.description;
  sum.resumed = resumed_state_.has_value();
  sum.checkpoint = n_.last_checkpoint;
  sum.epochs = n_.last_epoch + 1;
  sum.steps = n_.step;
  sum.samples = (n_.samples - start_.samples) * wenv_.world_size;
  sum.test_loss = test.loss;
  sum.test_accuracy = test.accuracy;
  sum.train_s = n_.train_s;
  sum.samples_per_s = n_.train_s > 0 ? double(sum.samples) / n_.train_s : 0;
  if (n_.sequence) {
    sum.tokens_per_s = n_.train_s > 0 ? double(n_.tokens * wenv_.world_size) / n_.train_s : 0;
    sum.test_perplexity = std::exp(test.loss);
  }
  sum.peak_memory_bytes = peak_memory(dev_);
  record_model_state(cfg_, sum);
  if (comm_) sum.comm = comm_->run();

  record_memory(sum, model(), cfg_, dev_, wenv_.rank, wenv_.world_size,  // every rank's peaks, next to the plan's
                pg_ ? std::function<void(torch::Tensor&)>([this](torch::Tensor& t) {
                  auto d = t.to(dev_);
                  pg_->allreduce(d, /*average=*/false);
                  t.copy_(d.cpu());
                })
                    : std::function<void(torch::Tensor&)>());
  const data::SkippedSamples skipped = in_.splits.train->skipped();
  sum.skipped_samples = skipped.count;
  sum.skipped_examples = skipped.first;
  sum.wall_s = seconds_since(t_start_);
  sum.first_step_s = n_.first_step_s;
  nlohmann::json final_line = summary_to_json(sum);
  final_line["event"] = "summary";
  final_line["global_batch"] = micro_batch_ * wenv_.world_size * cfg_.train.accumulate;
  final_line["world_size"] = wenv_.world_size;
  log_.write(final_line);
  fresh_dir_->keep();
  hb_.phase("done");
  if (pg_) {
    pg_->barrier();  // nobody tears down the group while another rank still needs it
    unit_hooks_.reset();
    ddp_.reset();
    pg_->shutdown();
  }
  return sum;
}

}  // namespace

struct Trainer::Impl {
  FitInputs in;
  TrainSummary fit();
};

Trainer::Trainer(TrainOptions options) : impl_(std::make_unique<Impl>()) { impl_->in.o = std::move(options); }
Trainer::~Trainer() = default;
Trainer& Trainer::model(std::shared_ptr<torch::nn::Module> module, ForwardFn forward) {
  // Module::name() is the type's demangled name unless the module was given one.
  const bool builtin = dynamic_cast<const models::Model*>(module.get()) != nullptr;
  impl_->in.program_module = builtin || !module ? "" : module->name();
  if (builtin)
    impl_->in.meta.erase("trainer_module");
  else
    impl_->in.meta["trainer_module"] = impl_->in.program_module;
  impl_->in.module = std::move(module);
  impl_->in.forward = std::move(forward);
  return *this;
}
Trainer& Trainer::data(data::Splits splits) {
  impl_->in.splits = std::move(splits);
  return *this;
}
Trainer& Trainer::loss(LossFn loss) {
  impl_->in.loss = std::move(loss);
  return *this;
}
Trainer& Trainer::metric(std::string name, MetricFn metric) {
  impl_->in.metric_fns.emplace_back(std::move(name), std::move(metric));
  return *this;
}
Trainer& Trainer::on_step(std::function<void(const StepInfo&)> cb) {
  impl_->in.on_step = std::move(cb);
  return *this;
}
Trainer& Trainer::on_eval(std::function<void(const EvalInfo&)> cb) {
  impl_->in.on_eval = std::move(cb);
  return *this;
}
Trainer& Trainer::on_checkpoint(std::function<void(const CheckpointInfo&)> cb) {
  impl_->in.on_checkpoint = std::move(cb);
  return *this;
}
Trainer& Trainer::checkpoint_meta(std::string key, std::string value) {
  impl_->in.meta[key] = value;
  return *this;
}
TrainSummary Trainer::fit() { return impl_->fit(); }

// The job, stage by stage (llm.c's main is the model: one screen, top to bottom). A failure
// before open_outputs() leaves the run dir as it was (read_first_batch() brings the first
// batch's images within that rule).
TrainSummary Trainer::Impl::fit() {
  FitLoop loop(in);
  try {
    loop.configure();             // the config checked; torch's settings; who this process is; its device
    loop.resolve_resume();        // the run dir locked; the checkpoint to continue from, verified
    loop.build_parallel_state();  // the process group; the model on its device; DDP; optimizer; the step
    loop.build_loaders();         // each rank's micro-batch; the train, val and test loaders
    loop.plan_schedule();         // steps per epoch, where the run stops, the learning rate per step
    loop.restore_or_start();      // resumed: optimizer, RNG, loss scale, position; fresh: warm-up's first rate
    loop.read_first_batch();      // decoded before anything is written: a bad image in it leaves nothing behind
    loop.open_outputs();          // config.toml, metrics.jsonl, TensorBoard: the run dir is committed
    loop.prepare_cuda_graph();    // train.cuda_graphs: the whole step captured once, replayed per batch
    for (std::int64_t epoch = loop.first_epoch(); !loop.done(epoch); ++epoch) {
      const EpochStats trained = loop.run_epoch(epoch);  // batches; log points; checkpoint.every_steps
      loop.evaluate_epoch(epoch, trained);               // the val split (else test)
      loop.checkpoint_epoch(epoch);                      // checkpoint.every_epochs
    }
    return loop.finish();  // the final checkpoint, the test split, the summary
  } catch (const Error& e) {
    if (e.exit_code() == kExitUsage) loop.abandon_outputs();  // bad input before the first train line: no husk
    throw;
  }
}

}  // namespace trainbox::train
