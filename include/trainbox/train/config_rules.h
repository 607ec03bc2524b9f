// trainbox/train/config_rules.h — what the field table says about a config beyond its values:
// which keys a model, optimizer, dataset or schedule ignores, and whether a checkpoint's
// config can be continued by this one. Pure functions of Config (torch-free).
//
//   for (auto& w : ignored_keys(cfg)) warn(w);
//   check_resume_config(load_config(ckpt + "/config.toml"), cfg, "the run dir runs/x");
#pragma once
#include <string>
#include <vector>

#include <trainbox/train/config.h>

namespace trainbox::train {

// One key's value as TOML text ("\"cnn\"", "[128]"); throws ConfigError for an unknown key.
std::string config_value(const Config& c, const std::string& key);

// What a key applies to, read from its doc: a doc that starts with "cnn: …" or "adam/adamw: …"
// names values of its section's selector (model.name, optim.name, data.dataset,
// schedule.name). False when the selector has another value; true for every other key.
bool key_applies(const Config& c, const std::string& key);

// Keys set away from their default that this config's model, optimizer, dataset or schedule
// ignores, each as one line: "model.hidden = [64] has no effect: it is for model.name = \"mlp\",
// and this config says \"cnn\"". `trainbox train` prints them as warnings.
std::vector<std::string> ignored_keys(const Config& c);

// Before resuming: the checkpoint's config (its config.toml) against this one, at the config
// level, so that a mistake is named before any tensor shape: every model key that applies to
// the checkpoint's model (but init_from and dropout), and optim.name. Throws ConfigError
// "<where> was trained with model.name = \"cnn\"; this config says \"mlp\"" (`where`: "the run
// dir runs/x", "checkpoint …").
void check_resume_config(const Config& checkpoint, const Config& now, const std::string& where);

// A multi-node job (launch/job_digest.h): whether a key may differ between the nodes. True for
// paths (data.path, data.val_path: the same data at a node-local path; model.init_from: DDP
// broadcasts rank 0's weights), per-machine resources (data.workers, data.prefetch,
// train.threads) and what only rank 0 or each rank for itself writes (output.*,
// checkpoint.keep, checkpoint.export_safetensors, debug.sample_log). Every other key changes the math (model,
// data, train, optim, schedule) or the sequence of collectives the ranks must run alike
// (train.log_every: the loss allreduce at each log point; dist.bucket_cap_mb: DDP's buckets;
// checkpoint.every_steps: the checkpoint barriers), so the nodes must share it.
bool key_may_differ_between_nodes(const std::string& key);

}  // namespace trainbox::train
