// Fault injection (src/train/fault_injection.h): decided once per fit(), counted per object.
#include <gtest/gtest.h>

#include "train/fault_injection.h"

using trainbox::train::DebugConfig;
using trainbox::train::FaultInjection;

TEST(FaultInjection, TheNthCommitOfThisObjectExits) {
  const DebugConfig off;
  FaultInjection first(off, 0, 0, "checkpoint_commit:2");
  first.before_checkpoint_commit();  // the first commit goes through
  EXPECT_EXIT(first.before_checkpoint_commit(), ::testing::ExitedWithCode(86),
              "TRAINBOX_FAULT=checkpoint_commit:2: exiting abruptly");
  // No static counter: another fit() counts from zero again.
  FaultInjection second(off, 0, 0, "checkpoint_commit:2");
  second.before_checkpoint_commit();
  EXPECT_EXIT(second.before_checkpoint_commit(), ::testing::ExitedWithCode(86), "exiting abruptly");
  FaultInjection bare(off, 0, 0, "checkpoint_commit");  // no count: the first
  EXPECT_EXIT(bare.before_checkpoint_commit(), ::testing::ExitedWithCode(86), "exiting abruptly");
}

TEST(FaultInjection, ARestartedAttemptOrAnotherFaultNeverExits) {
  const DebugConfig off;
  FaultInjection restarted(off, 0, /*restart_count=*/1, "checkpoint_commit:1");
  FaultInjection other(off, 0, 0, "something_else:1");
  FaultInjection none(off, 0, 0, nullptr);
  for (int i = 0; i < 3; ++i) {
    restarted.before_checkpoint_commit();
    other.before_checkpoint_commit();
    none.before_checkpoint_commit();
  }
  SUCCEED();
}

TEST(FaultInjection, TheStallIsForOneRankStepPhaseAndAttempt) {
  DebugConfig d;
  d.stall_rank = 1;
  d.stall_step = 40;
  d.stall_phase = "data";
  d.stall_attempt = 0;
  const FaultInjection other_rank(d, 0, 0, nullptr), later_attempt(d, 1, 1, nullptr), here(d, 1, 0, nullptr);
  other_rank.at(40, "data");  // none of these stall
  later_attempt.at(40, "data");
  here.at(39, "data");
  here.at(40, "optimizer");
  EXPECT_FALSE(here.hang_gpu_before_collective(40));
  d.stall_phase = "gpu_collective";
  const FaultInjection gpu(d, 1, 0, nullptr);
  EXPECT_FALSE(gpu.hang_gpu_before_collective(39));
  EXPECT_TRUE(gpu.hang_gpu_before_collective(40));
  EXPECT_TRUE(gpu.hang_gpu_before_collective(41));
}
