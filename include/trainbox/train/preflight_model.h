// trainbox/train/preflight_model.h — the job's model as `trainbox preflight --config` needs it
// to judge the links for it (distributed/link_advice.h): its trainable gradient shapes, its
// compression settings, and one training step's compute seconds, measured here on one real
// batch of the config's data at its micro-batch (forward, backward, optimizer; no DDP; the
// median of 3 steps after one warm-up). Every rank may call it; each measures its own.
//
//   dist::PreflightOptions o;
//   o.model = train::preflight_model(load_config("configs/text_gpt.toml"));
#pragma once
#include <trainbox/distributed/link_advice.h>
#include <trainbox/train/config.h>

namespace trainbox::train {

// Throws what the trainer would for a bad config or data (UsageError, ConfigError, DataError).
dist::LinkAdviceInputs preflight_model(const Config& cfg);

}  // namespace trainbox::train
