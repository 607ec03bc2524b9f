// --stall-timeout on this node (private to src/launch): the heartbeat watch (launch/stall.h)
// over this attempt's workers and, with c10d, the other nodes' ranks as they send them; what the
// console says when a rank stalls and the stacks it writes. What a stall does to the job
// (--on-stall: dump, kill, restart) is the Supervisor's (launcher.cpp, on_stall).
//   StallMonitor s(cfg);
//   s.start(group.watched());
//   if (auto r = s.check()) … else if (s.ranks_due()) channel.send(s.ranks_message(…));
#pragma once
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <trainbox/launch/messages.h>
#include <trainbox/launch/run_config.h>
#include <trainbox/launch/stall.h>

namespace trainbox::launch {

class StallMonitor {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StallMonitor(const RunConfig& cfg) : cfg_(cfg), watch_(cfg.stall_timeout_s) {}
  bool enabled() const { return watch_.enabled(); }
  void start(std::vector<WatchedRank> ranks) { watch_.start(std::move(ranks)); }
  void exited(pid_t pid) { watch_.exited(pid); }
  std::optional<StallReport> check() { return watch_.check(); }

  // --- c10d: this node's ranks to the others, theirs for this node's verdict ---
  bool ranks_due() const;  // kRanksEvery since the last ranks_message()
  msg::Ranks ranks_message(int attempt, const std::string& host);
  void set_remote(msg::Ranks r) { watch_.set_remote(r.node_rank, std::move(r.ranks)); }

  // Every rank, this node's and the others' (the dashboard's rows).
  std::vector<RankProgress> everyone() { return watch_.everyone(); }
  // The verdict over everyone, any node (the dashboard's): nullopt without a stall or when off.
  std::optional<StallReport> judge_job(const std::vector<RankProgress>& ranks) const;

  // --- the console ---
  // SIGUSR1: where is every rank? Stacks of the unfinished ones, under attempt_dir/stacks.
  void dump_all(const std::string& attempt_dir);
  // The "stalled: …" lines and the stacks; then what --on-stall will do (restart is possible
  // while attempt < --max-restarts).
  void announce(const StallReport& r, int attempt, const std::string& attempt_dir);

 private:
  void print_stacks(const std::vector<RankProgress>& ranks, const std::vector<int>& culprits,
                    const std::string& attempt_dir);
  const RunConfig& cfg_;
  StallWatch watch_;
  Clock::time_point ranks_sent_{};
};

}  // namespace trainbox::launch
