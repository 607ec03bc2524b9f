// trainbox/train/machine_choices.h — config keys whose best value depends on the machine, resolved
// against it once, at the start of a job. Pure functions of (config value, machine facts), torch-free;
// the Trainer calls them and prints each note once (rank 0).
//
//   train.amp = "auto"   bf16 on a CUDA device; on a CPU bf16 where the CPU does bf16 natively
//                        (util/cpu_features.h: avx512_bf16 or amx_bf16, aarch64 bf16), else off,
//                        with a one-line note. An explicit "bf16" on a CPU that would emulate it is
//                        kept, with one warning that names the fix: emulated bf16 made a resnet18
//                        step 15x slower than fp32.
//   train.threads        0 (the default, and every shipped config's): torch's own count, which follows
//                        OMP_NUM_THREADS. N > 0 is a choice made in the config and wins over the
//                        environment, as torch.set_num_threads() in a script wins over OMP_NUM_THREADS;
//                        when OMP_NUM_THREADS says otherwise, one note says which count is used.
//
//   const AmpChoice a = choose_amp(cfg.train.amp, dev.is_cuda(), cpu_features());
//   if (!a.note.empty()) progress.note(a.note);
//   const ThreadChoice t = choose_threads(cfg.train.threads, process_env()("OMP_NUM_THREADS"));
//   if (t.threads > 0) torch::set_num_threads(t.threads);
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <trainbox/train/config.h>
#include <trainbox/util/cpu_features.h>

namespace trainbox::train {

struct AmpChoice {
  Amp amp = Amp::kOff;  // what autocast runs: never Amp::kAuto
  std::string note;     // one line when the choice is not the obvious one; empty otherwise
};
AmpChoice choose_amp(Amp requested, bool cuda, const CpuFeatures& cpu);

struct ThreadChoice {
  int threads = 0;   // intra-op threads to set; 0: leave torch's own count (OMP_NUM_THREADS, else the cores)
  std::string note;  // one line when the config's count overrides a different OMP_NUM_THREADS
};
ThreadChoice choose_threads(std::int64_t config_threads, const std::optional<std::string>& omp_num_threads);

}  // namespace trainbox::train
