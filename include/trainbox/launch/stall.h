// trainbox/launch/stall.h — stall detection for `trainbox run`: which rank stopped making
// progress, which ranks wait on it, and where every rank is. Torch-free.
//
// Progress comes from each worker's heartbeat file (util/heartbeat.h: step and phase). A rank
// whose record has not changed for `timeout_s` is stalled; a worker that never wrote a record
// is opaque and never called stalled. When a rank stalls, the report names it and the ranks
// that wait for it (phase allreduce or barrier), e.g.
//   rank 1 (pid 4242) has been in `data` at step 40 for 5.1 s; ranks 0, 2 wait in allreduce
// A rank stalled outside a waiting phase is a culprit; when every stalled rank waits, the ones
// at the lowest step are. After a report, the same stall is not reported again until some
// rank makes progress.
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

// What trainbox run does on a stall (--on-stall).
enum class StallAction { kDump, kKill, kRestart };
// trainbox run's exit code when it tore a job down for a stall (--on-stall kill, or restart
// with no restarts left): 124, as timeout(1) — "ran out of time", not a worker's own code.
inline constexpr int kExitStalled = 124;

struct WatchedRank {
  int rank = 0, local_rank = 0;
  pid_t pid = 0;
  std::string heartbeat_path;
};

struct RankProgress {
  WatchedRank who;
  bool reporting = false;   // has written a record
  bool finished = false;    // phase "done", or the process has exited
  std::int64_t step = 0;
  std::string phase;
  double idle_s = 0;        // since its record last changed
};

struct StallReport {
  std::vector<RankProgress> ranks;  // every watched rank, by rank
  std::vector<int> culprits, waiting;  // ranks
  std::string headline;
  bool is_culprit(int rank) const;
};

class StallWatch {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StallWatch(double timeout_s) : timeout_s_(timeout_s) {}
  bool enabled() const { return timeout_s_ > 0; }
  void start(std::vector<WatchedRank> ranks, Clock::time_point now = Clock::now());
  void exited(pid_t pid);  // a rank's process ended: never stalled
  // Reads every heartbeat; a report when a reporting rank has been idle for the timeout.
  std::optional<StallReport> check(Clock::time_point now = Clock::now());
  // The current progress of every rank (for SIGUSR1's on-demand dump), without judging.
  std::vector<RankProgress> snapshot(Clock::time_point now = Clock::now());

 private:
  struct State {
    WatchedRank who;
    std::string last;  // last record seen
    Clock::time_point changed;
    bool reporting = false, exited = false;
    std::int64_t step = 0;
    std::string phase;
  };
  void read_all(Clock::time_point now);
  double timeout_s_;
  std::vector<State> ranks_;
  bool reported_ = false;  // re-armed by progress
};

// Captures every rank's stacks in parallel (launch/stacks.h; each tool bounded by `deadline`),
// writes them to <dir>/rank_<R>.txt and returns one console line per rank:
//   "  rank 1 (pid 4242, data @ step 40): sleep ← fault_injection_stall ← run_training   <-- stalled"
// plus notes (a missing tool with its install command, an abandoned capture). Never throws.
std::vector<std::string> dump_stacks(const std::vector<RankProgress>& ranks, const std::vector<int>& culprits,
                                     const std::string& dir, std::chrono::milliseconds deadline);

}  // namespace trainbox::launch
