// trainbox/util/cpu_features.h — what this CPU runs natively, from the flags the kernel lists
// in /proc/cpuinfo (x86: "flags", aarch64: "Features"). Torch-free, pure apart from
// cpu_features(), which reads the machine.
//
// Why: torch runs bfloat16 on any CPU, but without AVX-512 BF16 or AMX (x86) or the BF16
// extension (aarch64) every product is converted and done in fp32 element by element: a
// resnet18 step under bf16 autocast took 15x an fp32 step on such a CPU, and a 2048^3 bf16
// matrix product ran at 0.001 TFLOP/s. train.amp = "auto" (train/machine_choices.h) and
// `trainbox bench gemm` decide from this.
//
// TRAINBOX_CPU_FLAGS="avx2 fma" replaces the flags read from /proc/cpuinfo: to see what a
// machine without a feature would do, and for the tests.
//
//   const CpuFeatures cpu = cpu_features();
//   if (cpu.known() && !cpu.native_bf16()) note("bf16 is emulated on this CPU");
#pragma once
#include <set>
#include <string>

#include <trainbox/util/job_env.h>

namespace trainbox {

struct CpuFeatures {
  std::set<std::string> flags;
  std::string source;  // "/proc/cpuinfo", "TRAINBOX_CPU_FLAGS", or "" when nothing listed the flags

  bool known() const { return !source.empty(); }
  bool has(const std::string& flag) const { return flags.count(flag) > 0; }
  // Matrix products in bfloat16 without a conversion to fp32: x86 avx512_bf16 or amx_bf16,
  // aarch64 bf16.
  bool native_bf16() const { return has("avx512_bf16") || has("amx_bf16") || has("bf16"); }
  // The same for float16: x86 avx512_fp16 or amx_fp16, aarch64 fphp with asimdhp.
  bool native_fp16() const { return has("avx512_fp16") || has("amx_fp16") || (has("fphp") && has("asimdhp")); }
};

// The flags of a /proc/cpuinfo text: the first "flags" or "Features" line (every core lists
// the same); source "/proc/cpuinfo", or "" when the text has neither line.
CpuFeatures parse_cpuinfo(const std::string& cpuinfo_text);

// This machine's: TRAINBOX_CPU_FLAGS (space- or comma-separated) when set, else /proc/cpuinfo.
CpuFeatures cpu_features(const EnvLookup& env = process_env(), const std::string& cpuinfo_path = "/proc/cpuinfo");

// "avx512_bf16 or amx_bf16" (x86) — the flag names a message about bf16 names.
inline constexpr const char* kBf16FlagNames = "avx512_bf16 or amx_bf16";

}  // namespace trainbox
