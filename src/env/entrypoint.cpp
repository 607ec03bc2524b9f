#include <trainbox/env/entrypoint.h>

#include <fmt/format.h>

#include <trainbox/util/commands.h>
#include <trainbox/util/strings.h>

namespace trainbox::env {

EntrypointPlan plan_entrypoint(const EnvReport& r, const std::vector<Finding>& findings, const std::string& image) {
  EntrypointPlan p;
  p.banner.push_back(fmt::format("== trainbox {} ==", r.trainbox_version.empty() ? "?" : r.trainbox_version));
  if (!image.empty()) p.banner.push_back("image: " + image);
  if (r.torch.found) {
    p.banner.push_back(
        fmt::format("LibTorch {} (CUDA {}, cuDNN {}, NCCL {}), compiled for {}", r.torch.version,
                    r.torch.cuda_version.empty() ? "none" : r.torch.cuda_version,
                    r.torch.cudnn_version.empty() ? "-" : r.torch.cudnn_version,
                    r.torch.nccl_version.empty() ? "-" : r.torch.nccl_version,
                    r.torch.arch_list.empty() ? "CPU only" : fmt::format("{}", fmt::join(r.torch.arch_list, " "))));
  }
  const std::string driver =
      !r.driver.driver_version.empty() ? r.driver.driver_version : r.driver.kernel_module_version;
  if (!driver.empty())
    p.banner.push_back(fmt::format("NVIDIA driver {} (CUDA {}.{})", driver, r.driver.cuda_driver_version / 1000,
                                   (r.driver.cuda_driver_version % 1000) / 10));
  if (!r.gpus.empty()) {
    p.banner.push_back(
        fmt::format("GPUs: {} x {}{}", r.gpus.size(), r.gpus.front().name,
                    r.gpus.front().mem_total_bytes > 0
                        ? " (" + human_bytes(static_cast<std::uint64_t>(r.gpus.front().mem_total_bytes)) + ")"
                        : ""));
  }
  if (r.host.shm_bytes >= 0)
    p.banner.push_back("/dev/shm: " + human_bytes(static_cast<std::uint64_t>(r.host.shm_bytes)));
  for (const auto& f : findings) {
    if (f.severity == Severity::kInfo && f.id != "no-gpu-cpu-fallback") continue;
    std::string what = f.message;
    if (f.id == "no-gpu-cpu-fallback") what = "CPU only: no GPU is visible in this container";
    p.notices.push_back(fmt::format("{}: {} [{}]", severity_name(f.severity), what, f.id));
    std::string fix = f.fix;
    // No GPU reached the container at all (no device nodes): the usual cause is a missing --gpus.
    if (f.id == "no-gpu-cpu-fallback" && !r.host.container.empty() && r.gpus.empty() && r.driver.device_nodes.empty())
      fix = "to use GPUs, start the container with --gpus all (NVIDIA Container Toolkit on the host)";
    p.notices.push_back("  fix: " + fix);
  }
  return p;
}

bool is_entrypoint_shorthand(const std::string& word) {
  const CommandInfo* c = find_command(word);
  return c && std::string_view(c->name) != "entrypoint";
}

std::vector<std::string> resolve_entrypoint_command(std::vector<std::string> command, const std::string& trainbox_exe,
                                                    const std::function<bool(const std::string&)>& on_path) {
  if (command.empty() || command.front().find('/') != std::string::npos) return command;
  if (is_entrypoint_shorthand(command.front()) && !on_path(command.front()))
    command.insert(command.begin(), trainbox_exe);
  return command;
}

}  // namespace trainbox::env
