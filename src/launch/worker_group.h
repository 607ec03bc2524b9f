// This node's workers of one attempt, from spawn to the last reap (torchelastic's WorkerGroup):
// the phase (running, stopping, killing) and its deadline, why the stop began, the signals sent,
// the output relayed, the exits reaped, the unkillable left behind. Private to src/launch. No
// policy: the Supervisor (launcher.cpp) decides what a failure or a stall means for the job; this
// only carries out "stop" and "kill" and tells it what ended.
//   WorkerGroup g(cfg, exe, host, watchdog);
//   g.spawn(attempt);                          // throws when a worker cannot start
//   while (!g.all_reaped()) { poll(…); auto r = g.reap(); if (r.failed) …; }
//   g.drain();                                 // nothing of the attempt outlives it
#pragma once
#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <trainbox/launch/run_config.h>
#include <trainbox/launch/stall.h>

#include "attempt.h"
#include "watchdog.h"
#include "worker.h"

namespace trainbox::launch {

class WorkerGroup {
 public:
  using Clock = std::chrono::steady_clock;
  // cfg: the Supervisor's, which the rendezvous fills in (node rank, world) before each spawn.
  WorkerGroup(const RunConfig& cfg, std::string exe, std::string host, Watchdog& watchdog)
      : cfg_(cfg), exe_(std::move(exe)), host_(std::move(host)), watchdog_(watchdog) {}

  // Starts attempt `number`: spawns all, then waits for their execs (which overlap). A worker
  // that cannot start takes the others with it (SIGKILL, reaped) and throws.
  void spawn(int number);
  int number() const { return number_; }
  const std::string& host() const { return host_; }
  WorkerPhase phase() const { return phase_; }
  bool running() const { return phase_ == WorkerPhase::kRunning; }
  const std::vector<Worker>& workers() const { return workers_; }
  // Each worker's heartbeat file, for the stall watch.
  std::vector<WatchedRank> watched() const;
  // Each worker's global rank and folder (--log-dir), for the dashboard's logs.
  std::vector<std::pair<int, std::string>> log_dirs() const;
  // The folder of this attempt's worker folders (stacks/, NCCL's flight recorder dumps).
  std::string attempt_dir() const;

  // --- why the stop began: the first failure, a stall, a signal (a signal replaces the others) ---
  const std::optional<StopCause>& cause() const { return cause_; }
  void set_cause(StopCause c) { cause_ = std::move(c); }
  int signal_here() const;  // the signal that stopped this node's workers, 0 when none

  // Reaps what ended. The first worker that fails while the group runs becomes the cause,
  // and the stop begins (SIGTERM).
  struct Reaped {
    Worker* failed = nullptr;  // that first failure, when it came in this round
    std::vector<pid_t> ended;  // every pid reaped (for the stall watch)
  };
  Reaped reap();
  bool all_reaped() const;  // reaped, or abandoned as unkillable

  // --- stopping ---
  // stop_signal to every group, SIGKILL after --grace-period (enforce_deadline).
  void begin_stop(int sig);
  // SIGKILL now; the unkillable are abandoned after kUnkillableWait (enforce_deadline).
  void kill_now(const std::string& why);
  // At the phase's deadline: SIGKILL (stopping), or leave the unkillable behind (killing).
  // True when supervision must end; `abandoned` gets the pids left behind.
  bool enforce_deadline(std::vector<pid_t>& abandoned);
  // Milliseconds until the phase's deadline; -1 while running (no deadline).
  int deadline_ms() const;
  // SIGUSR2 and the like: to every live worker's group; the job goes on.
  void forward(int sig);

  // --- output ---
  // Every open stream of every worker, for poll(), after `fds`' first entries.
  void add_streams(std::vector<pollfd>& fds, std::vector<std::pair<Worker*, Worker::Stream*>>& owners);
  // Reads what a failed worker wrote before it died (≤ 64 MiB), so the stderr tail that
  // travels with its root cause is complete (the exit can be seen before the last lines).
  static void drain_pipes(Worker& w);
  // Nothing of this attempt outlives it: leftover process groups, open pipes (kDrainWait for EOF).
  void drain();

  // --- root causes, for the summary and the other nodes ---
  RootCause root_cause(const Worker& w) const;

 private:
  Worker* find(pid_t pid);
  void signal_all(int sig);
  void abandon_unkillable(std::vector<pid_t>& abandoned);

  const RunConfig& cfg_;
  std::string exe_, host_;
  Watchdog& watchdog_;
  int number_ = 0;
  std::vector<Worker> workers_;
  WorkerPhase phase_ = WorkerPhase::kRunning;
  int stop_signal_ = SIGTERM;
  Clock::time_point deadline_{};  // kStopping: SIGKILL; kKilling: give up on the unkillable
  std::optional<StopCause> cause_;
  std::set<pid_t> abandoned_;  // unkillable workers left behind
};

}  // namespace trainbox::launch
