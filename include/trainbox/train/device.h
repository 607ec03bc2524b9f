// trainbox/train/device.h — the device the config key train.device names ("auto", "cpu",
// "cuda", "cuda:N"): dist::choose_device (trainbox/distributed/device.h, where the rule and its
// contract live: one GPU per local rank, the GPU made current) with errors that name the key.
//
//   DeviceChoice c = choose_device(cfg.train.device, env.local_rank, env.local_world_size);
//   if (!c.note.empty()) progress.note(c.note);   // what "auto" decided, when not the obvious
//   torch::Device d = c.device;                    // throws UsageError/ConfigError on bad input
#pragma once
#include <string>

#include <trainbox/distributed/device.h>

namespace trainbox::train {

using DeviceChoice = dist::DeviceChoice;

inline DeviceChoice choose_device(const std::string& spec, int local_rank = 0, int local_world_size = 1) {
  return dist::choose_device(spec, local_rank, local_world_size, "train.device");
}

}  // namespace trainbox::train
