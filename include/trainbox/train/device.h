// trainbox/train/device.h — "auto" / "cpu" / "cuda" / "cuda:N" to a torch::Device, with the
// errors users need (no GPU visible, index out of range). Under a launcher "auto" and
// "cuda" mean this process's own GPU (LOCAL_RANK).
//   torch::Device d = resolve_device(cfg.train.device, env.local_rank);   // throws UsageError/ConfigError
#pragma once
#include <string>

#include <torch/types.h>

namespace trainbox::train {

torch::Device resolve_device(const std::string& spec, int local_rank = 0);

}  // namespace trainbox::train
