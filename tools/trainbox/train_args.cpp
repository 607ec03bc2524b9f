// `trainbox train`'s arguments, their config, and that config's keys for a job digest.
#include "train_args.h"

#include <filesystem>

#include <trainbox/train/checkpoint_path.h>
#include <trainbox/train/config_rules.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

#include "validators.h"

namespace trainbox::cli {

void add_train_options(CLI::App& app, TrainArgs& a) {
  app.add_option("config", a.config_path,
                 "TOML config (default: the built-in Fashion-MNIST MLP, configs/fashion_mlp.toml)")
      ->check(CLI::ExistingFile);
  app.add_option("--set", a.overrides, "Override a key: --set optim.lr=3e-4 (repeatable)");
  app.add_option("--device", a.device, "auto, cpu, cuda or cuda:N (overrides train.device)");
  app.add_option("--run-dir", a.run_dir,
                 "Where config, metrics, TensorBoard logs and checkpoints go (default runs/<model>-<time>)");
  app.add_option("--resume", a.resume,
                 "auto (the run dir's latest checkpoint, if any), a checkpoint dir (<run_dir>/checkpoints/step_N), "
                 "<run_dir>/checkpoints/latest, or a run dir (= --run-dir DIR --resume auto)");
  app.add_flag("--json", a.json, "Print the final summary as JSON on stdout");
  app.add_flag("--quiet", a.quiet, "No progress output");
  app.add_flag("--print-config", a.print_config, "Print the resolved config and exit");
  app.add_flag("--config-reference", a.reference, "Print every config key with type, default and meaning (Markdown)");
  app.add_flag("--plan", a.plan,
               "Print the memory plan per rank (parameters, gradients, optimizer state, measured activations, "
               "buffers) and exit; nothing is trained or written (docs/trainer.md)");
  app.add_option("--budget", a.budget,
                 "With --plan: memory per rank, gated on the job's largest phase (training step, evaluation, "
                 "checkpoint save); names the cheapest change that fits. A number of bytes, or with K, M, G or T: "
                 "8GiB, 1.5G, 0.5 GB, 512M. Binary units: 8GB = 8GiB = 8 x 2^30 bytes (never 8 x 10^9)")
      ->transform(size_value());
  app.add_option("--world", a.world,
                 "With --plan: plan for N ranks (default: --nproc-per-node's count, planned in this process; else the "
                 "launcher's world size)")
      ->check(whole_number(1));
  // Handled by maybe_launch_self() before parsing; declared here for --help.
  app.add_option("--nproc-per-node", a.nproc,
                 "Launch N data-parallel workers of this job on this machine (via trainbox run)");
}

void normalize_resume(TrainArgs& a) {
  if (a.resume.empty() || a.resume == "auto") return;
  if (train::is_run_dir(a.resume)) {
    const std::string newest = train::resolve_checkpoint(a.resume);  // DataError when it has none: nothing to resume
    if (a.run_dir.empty()) a.run_dir = a.resume;
    a.resume = a.run_dir == a.resume ? "auto" : newest;
    return;
  }
  a.resume = train::resolve_checkpoint(a.resume);
}

train::Config resolve_config(const TrainArgs& a) {
  train::Config cfg;
  if (!a.config_path.empty()) {
    cfg = train::load_config(a.config_path);
  } else if (a.resume == "auto" && !a.run_dir.empty() && read_file(a.run_dir + "/config.toml")) {
    cfg = train::load_config(a.run_dir + "/config.toml");  // continue a run with the config it started with
  }
  for (const auto& s : a.overrides) train::apply_override(cfg, s);
  if (!a.device.empty()) train::apply_override(cfg, "train.device=\"" + a.device + "\"");
  train::validate(cfg);
  if (!a.plan && (a.budget > 0 || a.world > 0))
    throw UsageError(fmt::format("{} applies to --plan only", a.budget > 0 ? "--budget" : "--world"),
                     "add --plan, or drop the option");
  if (a.resume == "auto" && a.run_dir.empty())
    throw UsageError("--resume auto needs --run-dir (which run to continue?)", "pass --run-dir DIR");
  return cfg;
}

std::optional<launch::WorkerKeys> train_worker_keys(const std::vector<std::string>& command) {
  if (command.size() < 2 || command[1] != "train") return std::nullopt;
  const std::string program = std::filesystem::path(command.front()).filename().string();
  if (program != "trainbox" && program != "trainbox-torch") return std::nullopt;
  CLI::App app{"trainbox train"};
  TrainArgs a;
  add_train_options(app, a);
  std::vector<std::string> args(command.rbegin(), command.rend() - 2);  // CLI11 takes them reversed
  try {
    app.parse(args);
    // --resume RUN_DIR continues that run's config; the checkpoint itself is not read here
    // (normalize_resume would verify it: a digest at start-up reads no checkpoint).
    if (a.config_path.empty() && !a.resume.empty() && a.resume != "auto" && train::is_run_dir(a.resume)) {
      if (a.run_dir.empty()) a.run_dir = a.resume;
      if (a.run_dir == a.resume) a.resume = "auto";
    }
    const train::Config cfg = resolve_config(a);
    launch::WorkerKeys keys;
    for (const auto& f : train::config_fields())
      (train::key_may_differ_between_nodes(f.key) ? keys.per_node : keys.shared)
          .emplace_back(f.key, train::config_value(cfg, f.key));
    return keys;
  } catch (const CLI::Error&) {  // the worker prints CLI11's message (or --help) itself
  } catch (const Error&) {       // ConfigError, UsageError, DataError: the worker's one line
  }
  return std::nullopt;
}

}  // namespace trainbox::cli
