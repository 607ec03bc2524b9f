#include "fault_injection.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <trainbox/util/parse.h>

namespace trainbox::train {

void fault_injection_stall(int rank, std::int64_t step, const char* phase) {
  std::fprintf(stderr, "trainbox: debug.stall: rank %d stalls at step %lld in phase %s (sleeping until stopped)\n",
               rank, static_cast<long long>(step), phase);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

FaultInjection::FaultInjection(const DebugConfig& debug, int rank, int restart_count, const char* fault_spec)
    : rank_(rank),
      stall_here_(debug.stall_rank == rank && (debug.stall_attempt < 0 || debug.stall_attempt == restart_count)),
      stall_step_(debug.stall_step),
      stall_phase_(debug.stall_phase) {
  if (!fault_spec || restart_count > 0) return;  // a restarted job completes
  fault_spec_ = fault_spec;
  const auto colon = fault_spec_.find(':');
  if (fault_spec_.substr(0, colon) == "shard_write") {
    shard_fault_at_ = 1;
    if (colon == std::string::npos) return;
    const std::string rest = fault_spec_.substr(colon + 1);
    const auto c2 = rest.find(':');
    shard_fault_at_ = static_cast<int>(parse_integer(rest.substr(0, c2)).value_or(0));
    if (c2 != std::string::npos) shard_fault_rank_ = static_cast<int>(parse_integer(rest.substr(c2 + 1)).value_or(-1));
    return;
  }
  if (fault_spec_.substr(0, colon) != "checkpoint_commit") return;
  commit_fault_at_ =
      colon == std::string::npos ? 1 : static_cast<int>(parse_integer(fault_spec_.substr(colon + 1)).value_or(0));
}

void FaultInjection::before_checkpoint_commit() {
  if (++commits_ != commit_fault_at_) return;
  std::fprintf(stderr, "trainbox: TRAINBOX_FAULT=%s: exiting abruptly\n", fault_spec_.c_str());
  std::_Exit(86);
}

}  // namespace trainbox::train

namespace trainbox::train {

void FaultInjection::in_shard_write() {
  if (++shard_writes_ != shard_fault_at_ || rank_ != shard_fault_rank_) return;
  std::fprintf(stderr, "trainbox: TRAINBOX_FAULT=%s: rank %d exiting abruptly in the middle of its shard\n",
               fault_spec_.c_str(), rank_);
  std::_Exit(86);
}

}  // namespace trainbox::train
