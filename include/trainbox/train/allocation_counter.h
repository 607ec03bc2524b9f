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

// The process's peak resident set (getrusage ru_maxrss), in bytes.
std::int64_t peak_rss_bytes();

}  // namespace trainbox::train
