// trainbox/train/device_choice.h — choose_device for a device named by a command-line flag.
#pragma once
#include <string>

#include <trainbox/train/device.h>

namespace trainbox::train {

// As choose_device(), with `origin` naming where spec came from in its errors: a flag
// ("--device": "--device cuda but torch sees no CUDA GPU") or a config key ("train.device",
// which is what choose_device() says).
DeviceChoice choose_device_from(const std::string& origin, const std::string& spec, int local_rank = 0,
                                int local_world_size = 1);

}  // namespace trainbox::train
