// trainbox/train/memory_stats.h — exact tensor memory on CPU and CUDA, and what one
// forward/backward of a model needs beyond its weights.
//
// CPU: torch has no allocator statistics for host memory. install_cpu_allocation_counter()
// puts a counting wrapper around the CPU allocator in use (c10::SetCPUAllocator): every tensor
// storage allocated from then on is counted when it is allocated and when it is freed, so
// the current and peak bytes of live CPU tensors are exact (oneDNN's and the allocator's own
// scratch, and tensors allocated before the install, are not tensors of ours and not counted).
// It is process-wide state: a program's main installs it (`trainbox train` does), before the
// model is built; the library never does. Thread-safe (atomics); costs 64 bytes of header per
// allocation. CUDA: the caching allocator's own statistics (allocated bytes, current and peak).
//
//   trainbox::train::install_cpu_allocation_counter();   // first thing in main
//   trainbox::train::reset_peak_allocated(torch::kCPU);
//   ... forward / backward ...
//   auto s = trainbox::train::allocated(torch::kCPU);    // {current, peak, exact = true}
#pragma once
#include <cstdint>
#include <functional>

#include <torch/nn/module.h>
#include <torch/types.h>

#include <trainbox/train/allocation_counter.h>
#include <trainbox/train/config.h>
#include <trainbox/train/types.h>

namespace trainbox::train {

struct AllocatedBytes {
  std::int64_t current = 0, peak = 0;
  bool exact = false;  // false: no counter on this device (CPU without the counter): both 0
};
// Tensor bytes allocated on `device`'s type (CPU: every thread's; CUDA: that device's).
AllocatedBytes allocated(const torch::Device& device);
// The peak starts again from the current bytes.
void reset_peak_allocated(const torch::Device& device);

// What one training micro-step of `module` needs beyond what is live before it: the peak of
// allocated bytes during forward (under `autocast`, when set) and backward, less the bytes
// live before it, with the gradients already allocated (a first, unmeasured step allocates
// them and warms the kernels up; the measured one accumulates into them in place). The
// module's gradients are zeroed afterwards. Needs an exact counter on `device` (UsageError
// otherwise). `step` runs forward + loss + backward once.
std::int64_t measure_step_activation_bytes(torch::nn::Module& module, const torch::Device& device,
                                           const std::function<void()>& step);

// The run's memory record (TrainSummary's memory fields): the plan's model state for this
// module, optimizer and dist.zero_stage at `world` ranks, and every rank's measured peaks.
// `sum_over_ranks` sums a float64 CPU tensor over the ranks in place (empty: one process);
// every rank calls it, at the same point.
void record_memory(TrainSummary& summary, torch::nn::Module& module, const Config& config, const torch::Device& device,
                   int rank, int world, const std::function<void(torch::Tensor&)>& sum_over_ranks);

// A CUDA out-of-memory error (c10::OutOfMemoryError) where a training step runs, as one line
// naming the rank, the allocation, the plan's breakdown for this job and the fix (exit 1:
// the job failed; docs/troubleshooting.md), the fix in the line itself (no hint line).
struct DeviceOutOfMemory : Error {
  DeviceOutOfMemory(const std::string& what, std::string hint) : Error(what, std::move(hint), kExitFailed) {}
};
[[noreturn]] void throw_device_out_of_memory(const std::string& allocator_message, torch::nn::Module& module,
                                             const Config& config, int rank, int world, std::int64_t micro_batch);

}  // namespace trainbox::train
