// trainbox/train/device_choice.h — the old name of dist::choose_device with an origin
// (trainbox/distributed/device.h), kept for programs written against it.
#pragma once
#include <string>

#include <trainbox/distributed/device.h>
#include <trainbox/train/device.h>

namespace trainbox::train {

[[deprecated(
    "use trainbox::dist::choose_device(spec, local_rank, local_world_size, origin) from "
    "<trainbox/distributed/device.h>")]] inline DeviceChoice
choose_device_from(const std::string& origin, const std::string& spec, int local_rank = 0, int local_world_size = 1) {
  return dist::choose_device(spec, local_rank, local_world_size, origin);
}

}  // namespace trainbox::train
