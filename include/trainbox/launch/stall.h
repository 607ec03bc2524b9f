// trainbox/launch/stall.h — stall detection for `trainbox run`: which rank stopped making
// progress, which ranks wait on it, and where every rank is. Torch-free.
//
// Two sources, combined into one verdict (docs/distributed.md, "Hangs", has the rule):
//   - progress, from each worker's heartbeat file (util/heartbeat.h: step and phase). A rank
//     whose record has not changed for `timeout_s` is stalled. A rank with no record yet is
//     stalled at start-up when it has written none for `timeout_s` while another rank has
//     been writing for as long (it never reached the point the others did);
//   - the kernel's view (launch/proc_state.h), sampled every check while a rank is idle for
//     1 s or more or has no record: stopped (T, t, a cgroup freezer), uninterruptible sleep
//     (D) and its wait channel, and whether its CPU time moves. A rank stopped, or in D for
//     most of the timeout, for the whole timeout is stalled even when no rank writes records
//     (a non-trainbox program, Python without the heartbeat lines).
// The culprits are the stalled ranks of the first kind in this order: stopped; in D for most
// of the window; stalled outside a waiting phase (allreduce, barrier, rendezvous), or with no
// record at all; waiting — then those whose CPU time stood still before those burning CPU in
// the wait, then the lowest step. So a waiting rank is never named over a stopped or D one.
//   rank 1 (pid 4242) is stopped (state T: SIGSTOP, a debugger or a freezer), last in `allreduce` at step 663 5.0 s
//   ago; ranks 0, 2 wait in allreduce rank 1 (pid 4242) has been in `data` at step 40 for 5.1 s; ranks 0, 2 wait in
//   allreduce
// After a report, the same stall is not reported again until some rank makes progress.
// Across nodes each launcher sends its ranks' views over the control channel (launch/messages.h
// msg::Ranks; set_remote),
// so every node's verdict can name a culprit on another node.
//
//   StallWatch w(180);
//   w.start({{0, 0, pid0, dir0 + "/heartbeat"}, …});
//   if (auto r = w.check(Clock::now())) { puts(r->headline.c_str()); … }
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainbox::launch {

// trainbox run's exit code when it tore a job down for a stall (--on-stall kill, or restart
// with no restarts left): 124, as timeout(1) — "ran out of time", not a worker's own code.
inline constexpr int kExitStalled = 124;

struct WatchedRank {
  int rank = 0, local_rank = 0;
  pid_t pid = 0;
  std::string heartbeat_path;
  bool operator==(const WatchedRank&) const = default;
};

// The kernel's view of a rank over the stall window (the last timeout_s), from samples of
// launch/proc_state.h taken while it is idle.
struct KernelView {
  bool known = false;    // sampled at least once
  char state = '?';      // the latest sample's: T t D R S Z
  bool frozen = false;   // by a cgroup freezer
  std::string wchan;     // the latest sample's wait channel
  std::string d_wchan;   // the wait channel of the latest sample in D
  int d_tid = 0;         // the thread in D when it is not the main thread
  double stopped_s = 0;  // stopped (T, t or frozen) without a break, until now
  double d_s = 0;        // in D within the window
  double window_s = 0;   // the span the samples cover, at most timeout_s
  double cpu_s = -1;     // CPU time (utime + stime) used within the window; -1: unknown
  bool stopped() const { return known && (state == 'T' || state == 't' || frozen); }
  // In D for most (more than half) of the sampled window.
  bool mostly_d() const { return known && window_s > 0 && d_s > 0.5 * window_s; }
  // Its CPU time stood still: under 2 % of one core over the window (ticks are 10 ms).
  bool cpu_still() const { return known && cpu_s >= 0 && window_s > 0 && cpu_s < 0.02 * window_s; }
  bool operator==(const KernelView&) const = default;
};

struct RankProgress {
  WatchedRank who;
  bool reporting = false;  // has written a record
  bool finished = false;   // phase "done", or the process has exited
  std::int64_t step = 0;
  std::string phase;
  double idle_s = 0;       // since its record last changed (without one: since it started)
  double reporting_s = 0;  // since its first record (0 without one)
  KernelView kernel;
  // Another node's rank, as its launcher reported it over the control channel.
  bool remote = false;
  int node_rank = 0;
  std::string host;
  bool operator==(const RankProgress&) const = default;
};

struct StallReport {
  std::vector<RankProgress> ranks;              // every watched rank (this node's, then the others'), by rank
  std::vector<int> stalled, culprits, waiting;  // ranks
  std::string headline;
  bool is_culprit(int rank) const;
  const RankProgress* find(int rank) const;
};

// The verdict (the rule above) over every rank, this node's and the others': nullopt unless
// at least one of this node's ranks (remote == false) is stalled — or, with any_node (the
// dashboard's view of the whole job), any rank. Pure: unit-tested from parsed views.
std::optional<StallReport> judge_stall(std::vector<RankProgress> ranks, double timeout_s, bool any_node = false);

class StallWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // proc_root: where the kernel's view is read ("/proc"; tests pass a fixture folder).
  explicit StallWatch(double timeout_s, std::string proc_root = "/proc")
      : timeout_s_(timeout_s), proc_root_(std::move(proc_root)) {}
  bool enabled() const { return timeout_s_ > 0; }
  void start(std::vector<WatchedRank> ranks, Clock::time_point now = Clock::now());
  void exited(pid_t pid);  // a rank's process ended: never stalled
  // Reads every heartbeat and samples idle ranks' /proc; a report when judge_stall finds one.
  std::optional<StallReport> check(Clock::time_point now = Clock::now());
  // The current progress of this node's ranks (for SIGUSR1's dump and for the other nodes),
  // without judging.
  std::vector<RankProgress> snapshot(Clock::time_point now = Clock::now());
  // snapshot() and then the other nodes' ranks as last sent, ages advanced to `now`.
  std::vector<RankProgress> everyone(Clock::time_point now = Clock::now());
  // Another node's ranks as its launcher last sent them (ages are advanced from `now`).
  void set_remote(int node_rank, std::vector<RankProgress> ranks, Clock::time_point now = Clock::now());

 private:
  struct Sample {
    Clock::time_point at;
    char state;
    bool frozen;
    std::uint64_t cpu_ticks;
    std::string wchan;
    int d_tid;
  };
  struct State {
    WatchedRank who;
    std::string last;  // last record seen
    Clock::time_point changed, first_record;
    bool reporting = false, exited = false;
    std::int64_t step = 0;
    std::string phase;
    std::vector<Sample> samples;  // while idle, oldest first, the last timeout_s (+ one before)
  };
  struct Remote {
    std::vector<RankProgress> ranks;
    Clock::time_point received;
  };
  void read_all(Clock::time_point now);
  KernelView kernel_view(const State& s, Clock::time_point now) const;
  double timeout_s_;
  std::string proc_root_;
  std::vector<State> ranks_;
  std::vector<std::pair<int, Remote>> remote_;  // by node rank
  bool reported_ = false;                       // re-armed by progress
};

// Captures every rank's stacks in parallel (launch/stacks.h; each tool bounded by `deadline`),
// writes them to <dir>/rank_<R>.txt with the kernel's view (state, wait channel, CPU time,
// /proc/<pid>/stack where readable) and returns one console line per rank:
//   "  rank 1 (pid 4242, data @ step 40): sleep ← fault_injection_stall ← run_training   <-- stalled"
//   "  rank 1 (pid 4242, allreduce @ step 663): wait ← … ← ProcessGroup::wait   <-- stalled (state T: …)"
// plus notes (a missing tool with its install command, an abandoned capture). Another node's
// ranks get a line without frames (their stacks are on their node). Never throws.
std::vector<std::string> dump_stacks(const std::vector<RankProgress>& ranks, const std::vector<int>& culprits,
                                     const std::string& dir, std::chrono::milliseconds deadline);

}  // namespace trainbox::launch
