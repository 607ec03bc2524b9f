// `trainbox train`'s arguments and how they resolve to a config, shared by the command itself
// (trainbox-torch, cmd_train.cpp) and by `trainbox run`, whose c10d job digest compares the
// config a `trainbox train` worker will train on every node (launch/job_digest.h). Torch-free.
//
//   TrainArgs a; add_train_options(app, a); app.parse(argv);
//   normalize_resume(a);
//   train::Config cfg = resolve_config(a);   // ConfigError / UsageError: one line, exit 2
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <trainbox/launch/job_digest.h>
#include <trainbox/train/config.h>

namespace trainbox::cli {

struct TrainArgs {
  std::string config_path, device, run_dir, resume;
  std::vector<std::string> overrides;
  bool json = false, quiet = false, print_config = false, reference = false;
  std::string nproc;
  bool plan = false;        // --plan: the memory plan, nothing trained
  std::int64_t budget = 0;  // --budget SIZE (bytes; 0: none)
  int world = 0;            // --world N (0: the launcher's world size)
};

void add_train_options(CLI::App& app, TrainArgs& a);

// --resume RUN_DIR means --run-dir RUN_DIR --resume auto; --resume <…>/latest the step it names.
void normalize_resume(TrainArgs& a);

// The config this command trains: file (or the run dir's own, to continue it), overrides,
// rules. Everything here is checked before anything is started or written.
train::Config resolve_config(const TrainArgs& a);

// For `trainbox run`'s job digest: the config keys of a worker command `trainbox train …` (or
// `trainbox-torch train …`), split into what every node must share and what each may set
// (train/config_rules.h, key_may_differ_between_nodes); nullopt for any other command, or
// when the config does not resolve (the worker then says why).
std::optional<launch::WorkerKeys> train_worker_keys(const std::vector<std::string>& command);

}  // namespace trainbox::cli
