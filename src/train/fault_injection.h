// src/train/fault_injection.h — fault injection, for checking how a setup (and trainbox's own
// tests) handle failures. Private to the trainer.
//   debug.stall_*  rank stall_rank sleeps forever when it reaches phase stall_phase at optimizer
//                  step stall_step, on launcher attempt stall_attempt (-1: every attempt;
//                  docs/config.md). stall_phase = "gpu_collective": from stall_step on, its GPU
//                  stream hangs before the loss allreduce of a log point (CUDA; NCCL's watchdog
//                  then times the collective out).
//   TRAINBOX_FAULT=checkpoint_commit[:N]  the Nth checkpoint commit of this fit() (default the
//                  first) exits 86 after its files are written and fsync'ed, before the rename,
//                  as a crash or kill -9 would. Only on a launcher's first attempt, so that a
//                  restarted job can complete (tests/integration/crash_loop.sh, train_resume.sh).
//   TRAINBOX_FAULT=shard_write[:N[:RANK]]  at the Nth sharded checkpoint save (dist.zero_stage > 0)
//                  of this fit(), rank RANK (default 1) exits 86 in the middle of writing its
//                  shard (its parameters written, its optimizer state not), as a kill would.
//                  First attempt only, as above.
// One object per fit(), owned by the loop's state: the commit count starts at 0 with every
// fit() and nothing is static. Everything is decided at construction; at() costs the loop one
// compare per phase.
//
//   FaultInjection faults(cfg.debug, env.rank, env.restart_count, std::getenv("TRAINBOX_FAULT"));
//   faults.at(step, "data");                                            // may never return
//   store.save(step, write_files, [&] { faults.before_checkpoint_commit(); });
#pragma once
#include <cstdint>
#include <string>

#include <trainbox/train/config.h>

namespace trainbox::train {

// Sleeps until the process is killed, in a frame of its own, so that a stack dump names it:
// `sleep ← fault_injection_stall ← FitLoop::run_epoch`, under Trainer::Impl::fit (hang.sh).
[[noreturn]] __attribute__((noinline)) void fault_injection_stall(int rank, std::int64_t step, const char* phase);

class FaultInjection {
 public:
  // fault_spec: TRAINBOX_FAULT's value, or null.
  FaultInjection(const DebugConfig& debug, int rank, int restart_count, const char* fault_spec);

  // At each heartbeat phase of the loop: stalls when (step, phase) is the configured one.
  void at(std::int64_t step, const char* phase) const {
    if (stall_here_ && step == stall_step_ && stall_phase_ == phase) fault_injection_stall(rank_, step, phase);
  }
  // Whether this rank's GPU stream should hang before the next loss allreduce (gpu_collective).
  bool hang_gpu_before_collective(std::int64_t step) const {
    return stall_here_ && stall_phase_ == "gpu_collective" && step >= stall_step_;
  }
  // CheckpointStore::save's hook between the fsync'ed files and the rename that commits them.
  void before_checkpoint_commit();
  // write_rank_shard's hook between a rank's two shard files.
  void in_shard_write();

 private:
  int rank_ = 0;
  bool stall_here_ = false;  // debug.stall_rank is this rank, on this attempt
  std::int64_t stall_step_ = 0;
  std::string stall_phase_;
  std::string fault_spec_;   // TRAINBOX_FAULT, for the message
  int commit_fault_at_ = 0;  // the commit that exits (1-based); 0: none
  int commits_ = 0;          // commits reached in this fit()
  int shard_fault_at_ = 0;   // shard_write: the sharded save that exits (1-based); 0: none
  int shard_fault_rank_ = 1;
  int shard_writes_ = 0;
};

}  // namespace trainbox::train
