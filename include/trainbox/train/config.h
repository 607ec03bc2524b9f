// trainbox/train/config.h — the training configuration: TOML file + `--set key=value`.
//
// Every key has a default, a type, a range or a set of choices, and a line of
// documentation, all in one table (config.cpp, `config_fields()`); docs/config.md lists
// the same keys and a test keeps the two in step. Errors are ConfigError with the key,
// the value and what is allowed; an unknown key names the closest valid one.
//
//   Config c = load_config("configs/fashion_mlp.toml");     // or Config{} for the defaults
//   apply_override(c, "optim.lr=3e-4");
//   validate(c);                                             // cross-field rules
//   write_file(run_dir + "/config.toml", to_toml(c));        // the resolved config
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <trainbox/data/config.h>
#include <trainbox/models/config.h>

namespace trainbox::train {

// ModelConfig lives with the models (models/config.h), DataConfig with the data (data/config.h).
using ModelConfig = models::ModelConfig;
using DataConfig = data::DataConfig;

// train.amp: mixed precision. Parsed from its TOML spelling once, when the config is read, and
// compared as an enum everywhere else (autocast dtype: train/amp.h, autocast_dtype()).
enum class Amp {
  kOff,   // "off": fp32
  kBf16,  // "bf16": autocast to bfloat16 (CUDA or CPU), no loss scale needed
  kFp16,  // "fp16": autocast to float16 with a dynamic loss scale (GradScaler; CUDA only)
  kAuto,  // "auto": bf16 on CUDA and on a CPU with native bf16, else off (train/machine_choices.h)
};
// The TOML spelling: "off", "bf16", "fp16", "auto".
const char* amp_name(Amp a);

struct TrainSection {
  std::int64_t epochs = 10;
  std::int64_t batch_size = 64;
  std::int64_t eval_batch_size = 1000;
  std::int64_t accumulate = 1;
  // Elastic jobs (docs/distributed.md, "Elastic jobs"): the samples per optimizer step over all
  // ranks, kept at every world size: each rank's micro-batch is global / (world × accumulate),
  // the epoch's order is one global permutation with its tail (N mod global) dropped, and a
  // checkpoint's place is a global sample cursor. 0 = off: batch_size per rank.
  std::int64_t global_batch_size = 0;
  // Resume from a checkpoint trained with another global batch (it is refused otherwise): the
  // cursor is rounded down to the new step size, so a few samples of that epoch may repeat.
  bool allow_global_batch_change = false;
  double clip_grad_norm = 0.0;  // 0 = off
  std::int64_t max_steps = 0;   // stop after N optimizer steps (0 = no limit)
  Amp amp = Amp::kOff;          // off | bf16 | fp16 | auto
  std::int64_t seed = 0;
  bool deterministic = false;
  bool cudnn_benchmark = false;
  bool cuda_graphs = false;
  std::int64_t threads = 0;     // intra-op threads (0 = torch's default, which follows OMP_NUM_THREADS)
  std::string device = "auto";  // auto | cpu | cuda | cuda:N
  std::int64_t log_every = 100;
};

struct OptimConfig {
  std::string name = "adam";  // sgd | adam | adamw
  double lr = 1e-3;
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  std::vector<double> betas = {0.9, 0.999};
  double eps = 1e-8;
};

struct ScheduleConfig {
  std::string name = "constant";  // constant | step | cosine
  std::int64_t warmup_steps = 0;  // linear warm-up from 0 (any schedule)
  std::int64_t step_epochs = 1;   // step: multiply by gamma every N epochs
  double gamma = 0.1;
  double min_lr = 0.0;  // cosine: floor
};

struct CheckpointConfig {
  std::int64_t every_steps = 0;   // 0 = off
  std::int64_t every_epochs = 1;  // 0 = off (a final checkpoint is always written)
  std::int64_t keep = 3;
  bool export_safetensors = false;  // also write <run_dir>/model.safetensors at the end
};

struct OutputConfig {
  bool tensorboard = true;
  std::string progress = "auto";  // auto | bar | lines | off
};

struct DistConfig {              // used when launched with WORLD_SIZE > 1
  std::string backend = "auto";  // auto (nccl on CUDA, gloo on CPU) | gloo | nccl
  std::int64_t timeout_s = 300;  // rendezvous and every collective
  double bucket_cap_mb = 25.0;
  double first_bucket_mb = 1.0;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  std::int64_t zero_stage = 0;  // ZeRO: 0 plain DDP, 1 optimizer state sharded, 2 gradients too (3: refused)
  // Gradient compression (distributed/compression.h): none | fp16 | bf16 | powersgd, and
  // PowerSGD's settings (PyTorch's PowerSGDState defaults).
  std::string grad_compression = "none";
  std::int64_t powersgd_rank = 1;
  std::int64_t powersgd_start_step = 1000;
  double powersgd_min_compression_rate = 2.0;
  bool powersgd_error_feedback = true;
  bool powersgd_warm_start = true;
};

// Fault injection, for checking a setup's hang diagnosis (and trainbox's own tests): rank
// stall_rank sleeps forever when it reaches phase stall_phase at optimizer step stall_step,
// on launcher attempt stall_attempt (TORCHELASTIC_RESTART_COUNT; -1 = every attempt).
struct DebugConfig {
  std::int64_t stall_rank = -1;  // -1: off
  std::int64_t stall_step = 0;
  std::string stall_phase = "data";  // data | forward_backward | optimizer | checkpoint | eval | gpu_collective
  std::int64_t stall_attempt = -1;
  // <run_dir>/samples/attempt_<A>_rank_<R>.jsonl: each micro-batch's sample indices (the
  // elastic tests check that every sample of an epoch is seen exactly once).
  bool sample_log = false;
};

struct Config {
  ModelConfig model;
  DataConfig data;
  TrainSection train;
  OptimConfig optim;
  ScheduleConfig schedule;
  CheckpointConfig checkpoint;
  OutputConfig output;
  DistConfig dist;
  DebugConfig debug;
};

// One documented key of the config table.
struct FieldInfo {
  std::string key;            // "optim.lr"
  std::string type;           // "int", "float", "bool", "string", "int list", "float list"
  std::string default_value;  // as TOML text
  std::string allowed;        // "> 0", "one of: sgd, adam, adamw", ...
  std::string doc;
};
std::vector<FieldInfo> config_fields();

// Throws ConfigError (file, line:column, key, value, what is allowed).
Config load_config(const std::string& path);
Config parse_config(const std::string& toml_text, const std::string& origin = "<string>");
// "a.b=value": value is TOML (3e-4, true, [256, 128], "text"); bare words are strings.
void apply_override(Config& c, const std::string& assignment);
// Rules between keys (e.g. cuda_graphs needs accumulate = 1). Throws ConfigError.
void validate(const Config& c);
// The resolved config as TOML, every key present.
std::string to_toml(const Config& c);
// The key table (key, type, default, allowed, meaning) as Markdown, for docs/config.md.
std::string config_reference_markdown();

}  // namespace trainbox::train
