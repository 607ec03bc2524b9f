// Stack summaries the launcher prints per rank: the injected sleep, a collective wait, and
// Python frames from py-spy, each as the innermost meaningful frames.
#include <gtest/gtest.h>

#include <unistd.h>

#include <trainbox/launch/stacks.h>

using trainbox::launch::innermost_frames;

TEST(Stacks, NativeSleepInTheFaultInjection) {
  const std::string eu = R"(=== eu-stack -p 16702 ===
PID 16702 - process
TID 16702:
#0  0x00007f1b768ed545 clock_nanosleep@GLIBC_2.2.5
#1  0x00007f1b768f1e53 __nanosleep
#2  0x0000558af73042d7 trainbox::train::(anonymous namespace)::fault_injection_stall(int, long, char const*)
#3  0x0000557601165112 trainbox::train::Trainer::Impl::fit()
#4  0x000055760116691c trainbox::train::Trainer::fit()
#5  0x0000557601169284 trainbox::train::run_training(trainbox::train::TrainOptions const&)
#6  0x000055760110aec7 trainbox::cli::(anonymous namespace)::run_train(trainbox::cli::(anonymous namespace)::TrainArgs const&)
#7  0x00005576010cc23c main
TID 16703:
#0  0x00007f1b768a3f16 __futex_abstimed_wait_common
)";
  EXPECT_EQ(innermost_frames(eu), "sleep ← fault_injection_stall ← Impl::fit");
}

TEST(Stacks, NativeCollectiveWait) {
  const std::string eu = R"(=== eu-stack -p 99 ===
PID 99 - process
TID 99:
#0  0x00007f00 __futex_abstimed_wait_common
#1  0x00007f01 pthread_cond_wait@@GLIBC_2.3.2
#2  0x00007f02 std::condition_variable::wait(std::unique_lock<std::mutex>&)
#3  0x00007f03 gloo::transport::tcp::UnboundBuffer::waitRecv(int*, std::chrono::duration<long, std::ratio<1l, 1000l> >)
#4  0x00007f04 c10d::ProcessGroupGloo::AsyncWork::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)
#5  0x00007f05 trainbox::dist::ProcessGroup::wait(c10::intrusive_ptr<c10d::Work> const&, std::string const&)
)";
  EXPECT_EQ(innermost_frames(eu, 4), "wait ← UnboundBuffer::waitRecv ← AsyncWork::wait ← ProcessGroup::wait");
}

TEST(Stacks, PythonFramesWinWhenPresent) {
  const std::string text = R"(=== py-spy dump --pid 42 ===
Process 42: python3 worker.py
Python v3.11.2 (/usr/bin/python3.11)

Thread 42 (idle): "MainThread"
    stall (/tmp/x/worker.py:14)
    train_step (/tmp/x/worker.py:22)
    <module> (/tmp/x/worker.py:40)
Thread 43 (idle): "pt_autograd_0"
    run (threading.py:1)
=== eu-stack -p 42 ===
TID 42:
#0  0x1 clock_nanosleep@GLIBC_2.2.5
)";
  EXPECT_EQ(innermost_frames(text), "stall (worker.py:14) ← train_step (worker.py:22) ← <module> (worker.py:40)");
}

TEST(Stacks, NothingReadableGivesEmpty) {
  EXPECT_EQ(innermost_frames(""), "");
  EXPECT_EQ(innermost_frames("=== eu-stack -p 1 ===\neu-stack: dwfl_linux_proc_report: No such process\n"), "");
}

TEST(Stacks, CapturesThisTestsOwnProcessOrSaysWhyNot) {
  auto c = trainbox::launch::capture_stacks(getpid(), std::chrono::seconds(10));
  if (!c.notes.empty() && c.text.empty()) GTEST_SKIP() << c.notes.front();
  EXPECT_FALSE(c.timed_out);
  EXPECT_NE(c.text.find("=== eu-stack -p"), std::string::npos) << c.text;
}
