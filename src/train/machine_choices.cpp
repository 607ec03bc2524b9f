// train.amp = "auto" and train.threads against OMP_NUM_THREADS (train/machine_choices.h).
#include <trainbox/train/machine_choices.h>

#include <fmt/format.h>

#include <trainbox/util/parse.h>
#include <trainbox/util/strings.h>

namespace trainbox::train {

AmpChoice choose_amp(Amp requested, bool cuda, const CpuFeatures& cpu) {
  if (cuda) return {requested == Amp::kAuto ? Amp::kBf16 : requested, ""};
  const bool native = cpu.known() && cpu.native_bf16();
  const std::string why =
      cpu.known() ? fmt::format("this CPU has no native bf16 ({} absent from {})", kBf16FlagNames, cpu.source)
                  : "this CPU's features are unknown (no /proc/cpuinfo flags)";
  if (requested == Amp::kAuto) {
    if (native) return {Amp::kBf16, "train.amp = \"auto\": bf16 on this CPU (it does bf16 natively)"};
    return {Amp::kOff, fmt::format("train.amp = \"auto\": off on this CPU: {}", why)};
  }
  if (requested == Amp::kBf16 && !native)
    return {Amp::kBf16,
            fmt::format("warning: train.amp = \"bf16\" on a CPU that would emulate it: {}; each step may be 15x "
                        "slower than fp32 — fix: set train.amp = \"off\" (or \"auto\": bf16 on a GPU, off here)",
                        why)};
  return {requested, ""};
}

ThreadChoice choose_threads(std::int64_t config_threads, const std::optional<std::string>& omp) {
  if (config_threads <= 0) return {};  // torch's own count: OMP_NUM_THREADS when set
  ThreadChoice t;
  t.threads = static_cast<int>(config_threads);
  if (!omp) return t;
  const auto env_count = parse_integer(trim(*omp));
  if (env_count && *env_count == config_threads) return t;
  t.note = fmt::format(
      "train.threads = {} overrides OMP_NUM_THREADS={} (the config's count wins; set train.threads = 0 to follow "
      "the environment)",
      config_threads, trim(*omp));
  return t;
}

}  // namespace trainbox::train
