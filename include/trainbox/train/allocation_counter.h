// trainbox/train/allocation_counter.h — the counting CPU allocator's switch and the process's
// peak RSS, torch-free, for a program's main (train/memory_stats.h has the rest: per-device
// figures and the measurement of a step). See memory_stats.h for what is counted.
//
//   int main() { trainbox::train::install_cpu_allocation_counter(); ... }
#pragma once
#include <cstdint>

namespace trainbox::train {

// Installs the counting CPU allocator (once; later calls do nothing) around the CPU allocator
// in use. false: another allocator registered with a higher priority is in use, and nothing
// is counted. Process-wide: call it from main, before tensors that should be counted exist.
bool install_cpu_allocation_counter();
bool cpu_allocation_counter_installed();

// glibc: every allocation of kMappedAllocationBytes or more mapped and unmapped on its own (a
// fixed M_MMAP_THRESHOLD), so a freed tensor's memory leaves the process at once. glibc's
// default threshold climbs to 32 MiB after the first large free, and tensors under it then come
// from the heap, where freed ones stay resident: a ZeRO stage-3 rank with 544 MiB of tensors
// peaked at 1.4-1.7 GiB RSS, 0.94 GiB with this (docs/decisions.md, "Tensors and malloc").
// The cost: every large tensor of every step is faulted in afresh (a CPU GPT with 4 MiB
// attention matrices stepped about 14 % slower, ATen's attention alone 1.7x), so `trainbox
// train` maps large allocations only at dist.zero_stage >= 2, where the memory is the point, and
// otherwise keeps large blocks in the heap (process_setup.h). Nothing when MALLOC_MMAP_THRESHOLD_
// is set (the user's choice) or on another C library. For a program's main, after
// configure_process() and before tensors exist; process-wide.
inline constexpr std::int64_t kMappedAllocationBytes = 2 << 20;
void map_large_allocations();

// The process's peak resident set (getrusage ru_maxrss), in bytes.
std::int64_t peak_rss_bytes();

}  // namespace trainbox::train
