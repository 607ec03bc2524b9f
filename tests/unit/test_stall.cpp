// The stall verdict from the kernel's view: /proc-style fixture folders (stat, wchan, task/,
// stack) read by the real reader, heartbeat files written as workers write them, and a
// clock the test advances. T, t, D, R and S ranks, frozen CPU time, start-up stalls, ranks
// that write no records at all, and another node's ranks.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <trainbox/launch/messages.h>
#include <trainbox/launch/proc_state.h>
#include <trainbox/launch/stall.h>

#include "temp_dir.h"

using namespace trainbox::launch;
using Clock = StallWatch::Clock;
using trainbox::test::TempDir;

namespace {

// A /proc/<pid>/stat line as Linux writes it (52 fields); utime and stime in clock ticks.
std::string stat_line(int pid, char state, unsigned long utime, unsigned long stime = 0,
                      const std::string& comm = "trainbox-torch") {
  return fmt::format(
      "{} ({}) {} 1 {} {} 0 -1 4194560 2000 0 3 0 {} {} 0 0 20 0 12 0 3400 901234688 40000 "
      "18446744073709551615 1 1 0 0 0 0 0 4096 17642 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
      pid, comm, state, pid, pid, utime, stime);
}

// A fake job: N ranks with pids 100 + rank, heartbeat files and a /proc fixture under `dir`.
struct Job {
  TempDir dir;
  int n;
  Clock::time_point t0 = Clock::now();
  StallWatch watch;
  explicit Job(int ranks, double timeout_s = 5) : n(ranks), watch(timeout_s, dir.path + "/proc") {
    std::vector<WatchedRank> w;
    for (int r = 0; r < n; ++r) {
      w.push_back({r, r, 100 + r, fmt::format("{}/hb{}", dir.path, r)});
      proc(r, 'S', 0, "futex_wait_queue");
    }
    watch.start(w, t0);
  }
  void beat(int rank, long step, const std::string& phase) {
    std::string rec = fmt::format("{} {} {}", step, phase, 1700000000000LL + step);
    rec.resize(63, ' ');
    dir.write(fmt::format("hb{}", rank), rec + "\n");
  }
  void proc(int rank, char state, unsigned long ticks, const std::string& wchan) {
    const int pid = 100 + rank;
    dir.write(fmt::format("proc/{}/stat", pid), stat_line(pid, state, ticks));
    dir.write(fmt::format("proc/{}/wchan", pid), wchan.empty() ? "0" : wchan);
    dir.write(fmt::format("proc/{}/task/{}/stat", pid, pid), stat_line(pid, state, ticks));
  }
  Clock::time_point at(double s) const {
    return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  // Checks every 250 ms (as the launcher does) from `from` to `to` seconds; the first report.
  // `each` runs before every check (to move CPU time on).
  template <class Each>
  std::optional<StallReport> run(double from, double to, Each each) {
    for (double t = from; t <= to + 1e-9; t += 0.25) {
      each(t);
      if (auto r = watch.check(at(t))) return r;
    }
    return std::nullopt;
  }
  std::optional<StallReport> run(double from, double to) {
    return run(from, to, [](double) {});
  }
};

}  // namespace

// The verdict's headline holds TEXT (printed whole when it does not).
void expect_headline_has(const StallReport& r, std::string_view text) {
  EXPECT_NE(r.headline.find(text), std::string::npos) << r.headline;
}

TEST(ProcState, ParsesStatWithSpacesAndParensInTheName) {
  char st = '?';
  std::uint64_t ticks = 0;
  ASSERT_TRUE(parse_proc_stat(stat_line(7, 'T', 120, 30, "a (b) c"), st, ticks));
  EXPECT_EQ(st, 'T');
  EXPECT_EQ(ticks, 150u);
  EXPECT_FALSE(parse_proc_stat("7 (short) S 1 2", st, ticks));
  EXPECT_FALSE(parse_proc_stat("garbage", st, ticks));
}

TEST(ProcState, ReadsStateWchanAndAThreadInD) {
  TempDir d;
  const std::string root = d.path + "/proc";
  d.write("proc/42/stat", stat_line(42, 'S', 10, 5));
  d.write("proc/42/wchan", "futex_wait_queue");
  d.write("proc/42/task/42/stat", stat_line(42, 'S', 10, 5));
  d.write("proc/42/task/43/stat", stat_line(43, 'S', 1, 0));
  d.write("proc/42/task/44/stat", stat_line(44, 'D', 1, 0));
  d.write("proc/42/task/44/wchan", "nfs_wait_bit_killable");
  d.write("proc/42/stack", "[<0>] futex_wait_queue+0x60/0x90\n");
  auto s = read_proc(42, root, true);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, 'D');  // the data loader thread in D makes the process D
  EXPECT_EQ(s->d_tid, 44);
  EXPECT_EQ(s->wchan, "nfs_wait_bit_killable");
  EXPECT_EQ(s->cpu_ticks, 15u);
  EXPECT_NE(s->kernel_stack.find("futex_wait_queue"), std::string::npos);
  EXPECT_TRUE(s->uninterruptible());
  EXPECT_EQ(describe_state(*s), "state D in nfs_wait_bit_killable (thread 44)");
  EXPECT_FALSE(read_proc(43, root));  // not a process of the fixture

  d.write("proc/42/stat", stat_line(42, 'T', 10, 5));
  d.write("proc/42/wchan", "do_signal_stop");
  s = read_proc(42, root);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->stopped());
  EXPECT_EQ(describe_state(*s), "state T: SIGSTOP, a debugger or a freezer");
  d.write("proc/42/stat", stat_line(42, 't', 10, 5));
  EXPECT_EQ(describe_state(*read_proc(42, root)), "state t: stopped by a debugger (ptrace)");
  d.write("proc/42/stat", stat_line(42, 'S', 10, 5));
  d.write("proc/42/task/44/stat", stat_line(44, 'S', 1, 0));
  d.write("proc/42/wchan", "do_freezer_trap");  // cgroup v2 freezer: S in do_freezer_trap
  s = read_proc(42, root);
  EXPECT_TRUE(s->stopped());
  EXPECT_TRUE(s->frozen());
}

TEST(ProcState, ReadsThisProcess) {
  auto s = read_proc(getpid());
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->state == 'R' || s->state == 'S') << s->state;
  EXPECT_FALSE(s->stopped());
}

// The case: every rank last reported `allreduce` at step 663; rank 1 is stopped.
TEST(StallVerdict, StoppedRankIsTheCulpritOverWaitingRanks) {
  Job j(3);
  for (int r = 0; r < 3; ++r) j.beat(r, 663, "allreduce");
  j.proc(1, 'T', 500, "do_signal_stop");
  EXPECT_FALSE(j.run(0, 4.75));
  auto r = j.run(5, 5.5);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->culprits, std::vector<int>{1});
  EXPECT_EQ(r->waiting, (std::vector<int>{0, 2}));
  EXPECT_EQ(r->headline,
            "rank 1 (pid 101) is stopped (state T: SIGSTOP, a debugger or a freezer), last in `allreduce` at step 663 "
            "5.0 s ago; ranks 0, 2 wait in allreduce");
}

TEST(StallVerdict, StoppedRankWinsEvenAtAHigherStepThanAWaitingOne) {
  Job j(2);
  j.beat(0, 10, "allreduce");
  j.beat(1, 11, "allreduce");
  j.proc(1, 't', 500, "ptrace_stop");  // a debugger holds it
  auto r = j.run(0, 6);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->culprits, std::vector<int>{1});
  expect_headline_has(*r, "rank 1 (pid 101) is stopped (state t: stopped by a debugger (ptrace))");
}

TEST(StallVerdict, DRankNamedWithItsWaitChannelOverARankStalledElsewhere) {
  Job j(3);
  j.beat(0, 40, "data");  // rank 0 idles outside a collective, but sleeps (S)
  j.beat(1, 40, "data");
  j.beat(2, 40, "allreduce");
  j.proc(1, 'D', 300, "nfs_wait_bit_killable");
  auto r = j.run(0, 6);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->culprits, std::vector<int>{1});
  // sampled from 1 s idle: D for the 4 s of the window it covers
  expect_headline_has(*r,
                      "rank 1 (pid 101) is in uninterruptible sleep in nfs_wait_bit_killable (D for 4.0 s of 5 s)"
                      ", last in `data` at step 40 5.0 s ago");
  expect_headline_has(*r, "rank 2 waits in allreduce");
}

TEST(StallVerdict, BriefDIsNotUninterruptibleSleep) {
  Job j(2);
  j.beat(0, 40, "allreduce");
  j.beat(1, 40, "checkpoint");
  // rank 1 flickers into D (a write now and then) for a quarter of its samples
  auto r = j.run(0, 6, [&](double t) {
    const bool d = static_cast<int>(t * 4) % 4 == 0;
    j.proc(1, d ? 'D' : 'S', 300, d ? "folio_wait_bit" : "do_epoll_wait");
  });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->culprits, std::vector<int>{1});
  EXPECT_EQ(r->headline.rfind("rank 1 (pid 101) has been in `checkpoint` at step 40 for 5.0 s", 0), 0u) << r->headline;
}

TEST(StallVerdict, SleepingAndRunningRanksKeepTheHeartbeatVerdict) {
  Job j(3);
  j.beat(0, 40, "allreduce");
  j.beat(1, 40, "data");
  j.beat(2, 40, "allreduce");
  j.proc(1, 'R', 0, "");  // a busy loop in the data loader
  auto r = j.run(0, 6, [&](double t) { j.proc(1, 'R', static_cast<unsigned long>(t * 100), ""); });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->culprits, std::vector<int>{1});
  EXPECT_EQ(r->headline, "rank 1 (pid 101) has been in `data` at step 40 for 5.0 s; ranks 0, 2 wait in allreduce");
}

TEST(StallVerdict, FrozenCpuTimeRanksAboveCpuBurningWaiters) {
  Job j(3);
  for (int r = 0; r < 3; ++r) j.beat(r, 663, "allreduce");
  // ranks 0 and 2 poll (a busy-wait in the collective: CPU time grows 1 s a second); rank 1's
  // CPU time stands still though it sleeps (S), e.g. a deadlock inside its own process
  auto r = j.run(0, 6, [&](double t) {
    for (int k : {0, 2}) j.proc(k, 'R', 1000 + static_cast<unsigned long>(t * 100), "");
    j.proc(1, 'S', 777, "futex_wait_queue");
  });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->culprits, std::vector<int>{1});
  expect_headline_has(*r, "rank 1 (pid 101) has been in `allreduce` at step 663 for 5.0 s (its CPU time stood still");
  expect_headline_has(*r, "ranks 0, 2 wait in allreduce");
}

TEST(StallVerdict, AllWaitingAndAllStillNamesTheLowestStepAsBefore) {
  Job j(3);
  j.beat(0, 663, "allreduce");
  j.beat(1, 662, "allreduce");
  j.beat(2, 663, "allreduce");
  auto r = j.run(0, 6);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->culprits, std::vector<int>{1});
  EXPECT_EQ(r->headline,
            "rank 1 (pid 101) has been in `allreduce` at step 662 for 5.0 s; ranks 0, 2 wait in allreduce");
}

// Rank 1's record is seen one read after the others' (a sampled Python record trails its rank):
// the waiters cross the timeout first, and the verdict waits that read for the rank they wait on.
TEST(StallVerdict, TheRankTheWaitersWaitOnIsNamedWhenSeenAReadLate) {
  Job j(3);
  j.beat(0, 21, "allreduce");
  j.beat(2, 21, "allreduce");
  j.beat(1, 20, "optimizer");
  EXPECT_FALSE(j.watch.check(j.at(0)));
  j.beat(1, 21, "data");
  EXPECT_FALSE(j.run(0.25, 5.0));  // at 5.0 only the waiters have been idle 5 s: not them
  auto r = j.run(5.25, 5.25);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->culprits, std::vector<int>{1});
  EXPECT_EQ(r->headline, "rank 1 (pid 101) has been in `data` at step 21 for 5.0 s; ranks 0, 2 wait in allreduce");
}

// A rank that keeps changing its record is never "about to stall": the waiters are named at the timeout.
TEST(StallVerdict, WaitersAreNamedWhenNoOtherRankIsCloseToTheTimeout) {
  Job j(2);
  j.beat(0, 21, "allreduce");
  auto r = j.run(0, 6, [&](double t) { j.beat(1, static_cast<long>(t * 4), "data"); });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->culprits, std::vector<int>{0});
  EXPECT_EQ(r->headline.rfind("rank 0 (pid 100) has been in `allreduce` at step 21 for 5.0 s", 0), 0u) << r->headline;
}

// Ranks 0 and 2 reach the rendezvous and say so; rank 1 never writes a record.
TEST(StallVerdict, StartUpStallTimedFromTheOthersFirstRecords) {
  Job j(3);
  EXPECT_FALSE(j.run(0, 0.75));
  j.beat(0, 0, "rendezvous");
  j.beat(2, 0, "rendezvous");
  j.proc(1, 'S', 40, "do_epoll_wait");
  // at 5.75 s rank 1 has been silent for more than 5 s, but the others have written for 4.75 s only
  EXPECT_FALSE(j.run(1, 5.75));
  auto r = j.run(6, 6.5);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->culprits, std::vector<int>{1});
  EXPECT_EQ(r->headline,
            "start-up stall: rank 1 (pid 101) has written no heartbeat in 6.0 s while ranks 0, 2 have "
            "(state S in do_epoll_wait); ranks 0, 2 wait in rendezvous");
}

TEST(StallVerdict, StoppedBeforeTheRendezvousNamedWithinTheStallTimeout) {
  Job j(3);
  j.proc(1, 'T', 3, "do_signal_stop");
  j.beat(0, 0, "rendezvous");
  auto r = j.run(0, 5.5);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->culprits, std::vector<int>{1});
  EXPECT_EQ(r->headline,
            "rank 1 (pid 101) is stopped (state T: SIGSTOP, a debugger or a freezer) before its first heartbeat; "
            "rank 0 waits in rendezvous");
}

// Python without the heartbeat lines, or any other program: only the kernel's view.
TEST(StallVerdict, NoRecordsAnywhere) {
  Job quiet(2);
  EXPECT_FALSE(quiet.run(0, 30));  // sleeping ranks with no records: never stalled

  Job stopped(2);
  stopped.proc(0, 'T', 3, "do_signal_stop");
  EXPECT_FALSE(stopped.run(0, 4.75));
  auto r = stopped.run(5, 5.5);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->culprits, std::vector<int>{0});
  EXPECT_EQ(r->headline,
            "rank 0 (pid 100) is stopped (state T: SIGSTOP, a debugger or a freezer) before its first heartbeat");

  Job d(2);
  d.proc(1, 'D', 3, "request_wait_answer");
  r = d.run(0, 6);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->culprits, std::vector<int>{1});
  expect_headline_has(*r, "rank 1 (pid 101) is in uninterruptible sleep in request_wait_answer");
}

TEST(StallVerdict, ProgressRearmsAndDoneIsNeverStalled) {
  Job j(2);
  j.beat(0, 5, "allreduce");
  j.beat(1, 5, "done");
  j.proc(0, 'T', 3, "do_signal_stop");
  auto r = j.run(0, 6);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->culprits, std::vector<int>{0});
  EXPECT_FALSE(j.run(6.25, 20));  // reported once
  j.beat(0, 6, "allreduce");      // progress
  j.proc(0, 'S', 3, "futex_wait_queue");
  EXPECT_FALSE(j.run(20.25, 24));
  EXPECT_TRUE(j.run(24.25, 27));  // idle for the timeout again
}

// Node 0's two ranks wait; rank 3, on node 1, is stopped: node 0's verdict names it.
TEST(StallVerdict, AnotherNodesStoppedRankIsNamed) {
  std::vector<RankProgress> ranks;
  for (int r = 0; r < 2; ++r) {
    RankProgress p;
    p.who = {r, r, 200 + r, ""};
    p.reporting = true;
    p.step = 40;
    p.phase = "allreduce";
    p.idle_s = 5.2;
    p.reporting_s = 30;
    ranks.push_back(p);
  }
  RankProgress far;
  far.who = {3, 1, 4242, ""};
  far.reporting = true;
  far.step = 40;
  far.phase = "allreduce";
  far.idle_s = 5.1;
  far.reporting_s = 30;
  far.kernel.known = true;
  far.kernel.state = 'T';
  far.kernel.wchan = "do_signal_stop";
  far.kernel.stopped_s = 4.1;
  far.kernel.window_s = 4.1;
  far.kernel.cpu_s = 0;
  far.remote = true;
  far.node_rank = 1;
  far.host = "node-b";
  // it travels over the control channel (launch/messages.h; without what the receiver fills in)
  const auto sent = std::get<msg::Ranks>(msg::decode_line(msg::encode_line(msg::Ranks{0, 1, "node-b", {far}})));
  const RankProgress back = sent.ranks.at(0);
  EXPECT_EQ(back.who.rank, 3);
  EXPECT_EQ(back.who.pid, 4242);
  EXPECT_EQ(back.kernel.state, 'T');
  EXPECT_EQ(back.kernel.wchan, "do_signal_stop");
  EXPECT_DOUBLE_EQ(back.kernel.stopped_s, 4.1);
  EXPECT_EQ(back.phase, "allreduce");
  RankProgress remote = back;
  remote.remote = true;
  remote.node_rank = 1;
  remote.host = "node-b";
  ranks.push_back(remote);

  auto r = judge_stall(ranks, 5);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->culprits, std::vector<int>{3});
  EXPECT_EQ(
      r->headline,
      "rank 3 (pid 4242 on node-b) is stopped (state T: SIGSTOP, a debugger or a freezer), last in `allreduce` at "
      "step 40 5.1 s ago; ranks 0, 1 wait in allreduce");
  // a stall only on the other node is that node's to report
  for (auto& p : ranks)
    if (!p.remote) p.idle_s = 1;
  EXPECT_FALSE(judge_stall(ranks, 5));
  // a malformed view is a protocol error (test_messages.cpp has the texts), never a crash
  nlohmann::json bad = msg::encode(msg::Ranks{0, 1, "node-b", {far}});
  bad["ranks"][0]["kernel"]["state"] = 7;
  EXPECT_THROW(msg::decode(bad), ProtocolError);
}
