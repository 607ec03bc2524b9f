// trainbox/train/types.h — the Trainer's core types, torch-free: what a training job is given
// (TrainOptions: the config, the run dir, the resume point), what it returns (TrainSummary),
// and the error it stops with when the loss diverges. The Trainer (train/trainer.h) and the
// CLI's calls (train/run.h) both take them from here; neither header includes the other.
//
//   TrainOptions o;
//   o.config = load_config("configs/fashion_mlp.toml");
//   o.run_dir = "runs/a";
//   TrainSummary s = Trainer(o).model(net).data(splits).fit();   // or run_training(o)
//   std::puts(summary_to_json(s).dump().c_str());
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include <trainbox/train/config.h>
#include <trainbox/util/errors.h>

namespace trainbox::train {

struct TrainOptions {
  Config config;
  std::string run_dir;  // required
  std::string resume;   // "" (fresh; refuses a run dir that has checkpoints), "auto", or a checkpoint dir
  bool quiet = false;   // no progress output (the summary is still returned)
  // dist.zero_stage = 3: fit() leaves the module's whole weights in it (all-gathered at the end:
  // every rank holds the whole model for a moment). false: it stays sharded and unusable after
  // fit() (the final checkpoint holds the weights), so a model that only fits sharded never has
  // to fit whole; `trainbox train` passes false.
  bool whole_weights_after_fit = true;
};

// What the gradient exchange cost, per rank (index = rank): over one metrics.jsonl window or
// the whole run (train/comm_figures.h measures it; docs/distributed.md, "Reading the
// communication figures"). sent: bytes this rank sent per optimizer step, every collective of
// the step by the ring model (ProcessGroup's CommStats: gradients, BatchNorm buffer broadcasts,
// ZeRO's all-gathers); fp32: what an uncompressed fp32 gradient allreduce of the same model
// sends per step, 2(N-1)/N · gradient bytes; ratio = fp32 / sent (1 for plain DDP of a model
// without buffers, 2 for bf16, ≫ 1 for PowerSGD); wait: seconds per step blocked waiting for
// a collective (communication not hidden behind backward).
struct CommFigures {
  std::string compression = "none";  // dist.grad_compression
  std::int64_t steps = 0;            // optimizer steps counted
  std::int64_t fp32_bytes_per_step = 0;
  std::vector<double> rank_sent_bytes_per_step, rank_wait_s_per_step;
  bool empty() const { return rank_sent_bytes_per_step.empty(); }
  std::vector<double> rank_compression_ratio() const;  // 0 where a rank sent nothing
};
// {"compression", "steps", "fp32_bytes_per_step", "sent_bytes_per_step": [..], "wait_s_per_step":
// [..], "compression_ratio": [..]} (arrays indexed by rank).
nlohmann::json comm_to_json(const CommFigures& c);

struct TrainSummary {
  std::string device, run_dir, checkpoint, dataset;
  std::int64_t epochs = 0, steps = 0, samples = 0;  // epochs: reached (a max_steps stop ends early)
  double test_loss = 0, test_accuracy = 0;
  double wall_s = 0, train_s = 0, samples_per_s = 0;
  double first_step_s = 0;     // from the process's start to the end of its first optimizer step (start-up cost)
  double tokens_per_s = 0;     // sequence models (targets [B, T]): samples_per_s × T
  double test_perplexity = 0;  // sequence models: exp(test_loss)
  double unigram_loss = 0;     // text data: the unigram baseline (entropy of the training tokens, nats)
  std::int64_t peak_memory_bytes = 0;
  // Rank 0's model state at the end (parameters, gradients, optimizer state; counted from the
  // live tensors, each storage once): what dist.zero_stage shards.
  std::int64_t model_state_bytes = 0, param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0;
  std::int64_t zero_stage = 0;
  // Memory per rank (index = rank), measured, next to the plan's model state (train/memory_plan.h):
  // the peak of allocated tensor bytes (CPU: the counting allocator, when installed; CUDA: the
  // caching allocator's max allocated; 0: not counted) and the peak RSS (getrusage ru_maxrss).
  std::int64_t plan_model_state_bytes = 0;  // parameters + gradients + optimizer state, one rank
  std::string memory_counter;               // "cpu_allocator", "cuda_caching_allocator" or "none"
  std::vector<std::int64_t> rank_peak_allocated_bytes, rank_peak_rss_bytes;
  bool resumed = false;
  std::int64_t skipped_samples = 0;           // images that would not decode (data.on_bad_image = "skip")
  std::vector<std::string> skipped_examples;  // the first few, "file: reason"
  CommFigures comm;                           // with a process group: the whole run's (empty without)
};
// The summary as `trainbox train --json` prints it and metrics.jsonl's last line holds it.
nlohmann::json summary_to_json(const TrainSummary& s);

// Raised when the loss becomes NaN/inf (exit code 1). The last good checkpoint stays `latest`.
struct DivergedError : Error {
  explicit DivergedError(const std::string& what, std::string hint) : Error(what, std::move(hint), kExitFailed) {}
};

}  // namespace trainbox::train
