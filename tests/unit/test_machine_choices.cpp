// The decisions that depend on the machine (train/machine_choices.h, util/cpu_features.h):
// /proc/cpuinfo's flags → native bf16; train.amp = "auto" and an explicit bf16 per device
// and CPU; train.threads against OMP_NUM_THREADS.
#include <gtest/gtest.h>

#include "temp_dir.h"
#include <trainbox/train/config.h>
#include <trainbox/train/machine_choices.h>
#include <trainbox/util/cpu_features.h>

using namespace trainbox;
using train::Amp;

namespace {
// Excerpts of real /proc/cpuinfo files (one core each; the lines other than flags trimmed).
constexpr const char* kSkylake =  // Xeon Gold 6148: AVX-512, no BF16
    "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz\n"
    "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sse sse2 avx avx2 fma avx512f avx512dq avx512cd avx512bw "
    "avx512vl\nbogomips\t: 4800.00\n\n";
constexpr const char* kSapphireRapids =  // Xeon Platinum 8480: AMX and AVX-512 BF16/FP16
    "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8 avx512_fp16\n";
constexpr const char* kNeoverseV1 =  // Graviton 3: aarch64 with BF16
    "processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp "
    "asimdhp cpuid asimdrdm bf16 i8mm\nCPU implementer\t: 0x41\n";
constexpr const char* kEpyc2 =  // EPYC 7B12 (Zen 2): AVX2 only
    "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma bmi2\n";
}  // namespace

TEST(CpuFeatures, NativeBf16FromTheFlagsLine) {
  EXPECT_FALSE(parse_cpuinfo(kSkylake).native_bf16());
  EXPECT_TRUE(parse_cpuinfo(kSkylake).has("avx512f"));
  EXPECT_TRUE(parse_cpuinfo(kSapphireRapids).native_bf16());
  EXPECT_TRUE(parse_cpuinfo(kSapphireRapids).native_fp16());
  EXPECT_TRUE(parse_cpuinfo(kNeoverseV1).native_bf16());
  EXPECT_TRUE(parse_cpuinfo(kNeoverseV1).native_fp16());
  EXPECT_FALSE(parse_cpuinfo(kEpyc2).native_bf16());
  EXPECT_FALSE(parse_cpuinfo(kEpyc2).native_fp16());
  EXPECT_EQ(parse_cpuinfo(kEpyc2).source, "/proc/cpuinfo");
  // No flags line (another OS, a masked /proc): unknown, not "absent"
  EXPECT_FALSE(parse_cpuinfo("processor : 0\nmodel name : x\n").known());
  // "bf16" as part of another flag's name does not count
  EXPECT_FALSE(parse_cpuinfo("flags : avx512_bf16x\n").native_bf16());
}

TEST(CpuFeatures, EnvironmentOverridesProcCpuinfo) {
  test::TempDir dir;
  dir.write("cpuinfo", kSapphireRapids);
  const CpuFeatures real = cpu_features(map_env({}), dir / "cpuinfo");
  EXPECT_TRUE(real.native_bf16());
  EXPECT_EQ(real.source, "/proc/cpuinfo");
  const CpuFeatures forced = cpu_features(map_env({{"TRAINBOX_CPU_FLAGS", "avx2,fma avx512f"}}), dir / "cpuinfo");
  EXPECT_FALSE(forced.native_bf16());
  EXPECT_TRUE(forced.has("avx512f") && forced.has("fma"));
  EXPECT_EQ(forced.source, "TRAINBOX_CPU_FLAGS");
  EXPECT_FALSE(cpu_features(map_env({}), dir / "no-such-file").known());
}

TEST(MachineChoices, AmpAutoIsBf16OnCudaAndOnANativeCpuElseOff) {
  const CpuFeatures native = parse_cpuinfo(kSapphireRapids), emulated = parse_cpuinfo(kSkylake), unknown{};
  EXPECT_EQ(train::choose_amp(Amp::kAuto, /*cuda=*/true, emulated).amp, Amp::kBf16);
  EXPECT_EQ(train::choose_amp(Amp::kAuto, true, emulated).note, "");
  const auto on_native = train::choose_amp(Amp::kAuto, false, native);
  EXPECT_EQ(on_native.amp, Amp::kBf16);
  const auto off = train::choose_amp(Amp::kAuto, false, emulated);
  EXPECT_EQ(off.amp, Amp::kOff);
  EXPECT_EQ(off.note,
            "train.amp = \"auto\": off on this CPU: this CPU has no native bf16 (avx512_bf16 or amx_bf16 absent from "
            "/proc/cpuinfo)");
  EXPECT_EQ(train::choose_amp(Amp::kAuto, false, unknown).amp, Amp::kOff);  // fp32 is never the slow choice
}

TEST(MachineChoices, ExplicitBf16OnAnEmulatingCpuIsKeptWithAWarningNamingTheFix) {
  const auto w = train::choose_amp(Amp::kBf16, false, parse_cpuinfo(kSkylake));
  EXPECT_EQ(w.amp, Amp::kBf16);
  EXPECT_NE(w.note.find("warning: train.amp = \"bf16\" on a CPU that would emulate it"), std::string::npos) << w.note;
  EXPECT_NE(w.note.find("fix: set train.amp = \"off\""), std::string::npos) << w.note;
  EXPECT_EQ(train::choose_amp(Amp::kBf16, false, parse_cpuinfo(kSapphireRapids)).note, "");
  EXPECT_EQ(train::choose_amp(Amp::kBf16, true, parse_cpuinfo(kSkylake)).note, "");  // the GPU does the math
  for (Amp a : {Amp::kOff, Amp::kFp16}) {  // the rest stays as asked (fp16 on CPU is the Trainer's error)
    EXPECT_EQ(train::choose_amp(a, false, parse_cpuinfo(kSkylake)).amp, a);
    EXPECT_EQ(train::choose_amp(a, false, parse_cpuinfo(kSkylake)).note, "");
  }
}

TEST(MachineChoices, ThreadsFromTheConfigWinOverOmpNumThreadsAndSaySo) {
  // 0: torch's own count (which reads OMP_NUM_THREADS): nothing to set, nothing to say
  EXPECT_EQ(train::choose_threads(0, std::nullopt).threads, 0);
  EXPECT_EQ(train::choose_threads(0, "1").threads, 0);
  EXPECT_EQ(train::choose_threads(0, "1").note, "");
  // N without the variable, or with the same count: N, silently
  EXPECT_EQ(train::choose_threads(2, std::nullopt).threads, 2);
  EXPECT_EQ(train::choose_threads(2, std::nullopt).note, "");
  EXPECT_EQ(train::choose_threads(2, " 2 ").note, "");
  // N against another count: N, in one line that says how to follow the environment
  const auto t = train::choose_threads(2, "1");
  EXPECT_EQ(t.threads, 2);
  EXPECT_EQ(t.note,
            "train.threads = 2 overrides OMP_NUM_THREADS=1 (the config's count wins; set train.threads = 0 to follow "
            "the environment)");
  EXPECT_NE(train::choose_threads(4, "4,2").note, "");  // a nested OMP list is not 4
}

TEST(MachineChoices, AmpAutoIsAConfigWord) {
  train::Config c;
  train::apply_override(c, "train.amp=auto");
  EXPECT_EQ(c.train.amp, Amp::kAuto);
  EXPECT_EQ(train::parse_config(train::to_toml(c)).train.amp, Amp::kAuto);  // config.toml keeps "auto"
}

TEST(MachineChoices, ShippedConfigsPinNoThreadsAndChooseAmpByDevice) {
  for (const char* name : {"imagefolder_resnet18", "cifar10_resnet", "text_gpt"}) {
    const auto c = train::load_config(std::string(TRAINBOX_SOURCE_DIR) + "/configs/" + name + ".toml");
    EXPECT_EQ(c.train.threads, 0) << name << ": a pinned count would override OMP_NUM_THREADS";
    EXPECT_NE(c.train.amp, Amp::kBf16) << name << ": bf16 is emulated on many CPUs; use \"auto\"";
  }
}
