#include <trainbox/distributed/device.h>

#include <fmt/format.h>
#include <torch/torch.h>
#ifdef TRAINBOX_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <trainbox/util/errors.h>

namespace trainbox::dist {

namespace {

int visible_gpus() { return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0; }

torch::Device make_current(torch::Device d) {
#ifdef TRAINBOX_WITH_CUDA
  if (d.is_cuda()) c10::cuda::set_device(d.index());
#endif
  return d;
}

}  // namespace

DeviceChoice choose_device(const std::string& spec, int local_rank, int local_world_size, const std::string& origin) {
  // "train.device = \"cuda\"" for the config key, "--device cuda" for a flag
  const std::string named = origin.rfind("--", 0) == 0 ? origin + " " + spec : origin + " = \"" + spec + "\"";
  DeviceChoice c;
  const int gpus = visible_gpus();
  if (spec == "auto") {
    if (gpus == 0) return c;
    if (local_world_size > gpus) {
      c.note = fmt::format(
          "note: device auto: {} ranks on this node but {} GPU{} visible, so every rank trains on the CPU (Gloo); "
          "start at most {} rank{} per node (--nproc-per-node gpu) to use the GPU{}",
          local_world_size, gpus, gpus == 1 ? " is" : "s are", gpus, gpus == 1 ? "" : "s", gpus == 1 ? "" : "s");
      return c;
    }
    c.device = make_current(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank)));
    return c;
  }
  torch::Device d(torch::kCPU);
  try {
    d = torch::Device(spec);
  } catch (const std::exception&) {
    throw ConfigError(named + " is not a device", "use auto, cpu, cuda or cuda:N");
  }
  if (d.is_cpu()) {
    c.device = d;
    return c;
  }
  if (!d.is_cuda()) throw ConfigError(named + ": only cpu and cuda are supported", "use auto, cpu or cuda:N");
  if (gpus == 0)
    throw UsageError(named + " but torch sees no CUDA GPU", "run `trainbox doctor` to see why, or use --device cpu");
  if (!d.has_index()) {
    if (local_rank >= gpus)
      throw UsageError(
          fmt::format("{} gives local rank {} its own GPU, but only {} GPU(s) are "
                      "visible for {} ranks on this node",
                      named, local_rank, gpus, local_world_size),
          "start at most one rank per GPU (--nproc-per-node gpu), or use --device auto to fall back to CPU");
    d = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
  }
  if (d.index() >= gpus)
    throw UsageError(fmt::format("{} but only {} GPU(s) are visible", named, gpus),
                     "pick an index below the count, or check CUDA_VISIBLE_DEVICES");
  c.device = make_current(d);
  return c;
}

}  // namespace trainbox::dist
