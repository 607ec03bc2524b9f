// src/launch/rdzv_rounds.h (private) — the rendezvous server's attempts (rdzv_server.cpp): the job's
// phase, the attempt number, and the decisions between attempts, in one place: when the first
// attempt forms (all nodes, or elastic MIN plus last_call), the stop of an attempt, the restart
// once every node has stopped (the same nodes again, or a new world: the lost dropped, the waiting
// admitted), the admission back-off, the join deadline. The message handlers report what they
// heard (joined, stop, done) and read phase(); the Roster holds the members.
//
//   Rounds rounds(cfg, endpoint, roster);
//   rounds.joined(waiting);                 // after a member was added
//   rounds.stop_all(true, cause);           // a failure: every node stops, a restart follows
//   rounds.maybe_restart();                 // after each node's "stopped"
//   rounds.on_timer(Clock::now());          // about every 100 ms
#pragma once
#include <optional>
#include <string>

#include <trainbox/launch/messages.h>
#include <trainbox/launch/run_config.h>

#include "rdzv_roster.h"

namespace trainbox::launch::rdzv {

// The job as the server runs it: forming the first attempt, running one, stopping one (and, with
// restarting(), forming the next from the same connections), or over (ended, aborted, nobody left).
enum class Phase { kJoining, kRunning, kStopping, kFinished };

class Rounds {
 public:
  // All three outlive the Rounds (the server's own).
  Rounds(const RunConfig& cfg, const std::string& endpoint, Roster& roster)
      : cfg_(cfg), endpoint_(endpoint), roster_(roster) {}

  Phase phase() const { return phase_; }
  bool is(Phase p) const { return phase_ == p; }
  int attempt() const { return attempt_; }
  bool restarting() const { return restart_; }  // while kStopping: whether a new attempt follows
  bool elastic() const { return cfg_.elastic(); }
  int max_nodes() const { return elastic() ? cfg_.nnodes_max : cfg_.nnodes; }
  // Running, or stopping for a restart: a stop (a failure, a signal, a lost node) still applies.
  bool stoppable() const { return phase_ == Phase::kRunning || (phase_ == Phase::kStopping && restart_); }

  // A member was added (kJoined while forming, kWaiting while the job runs): the first attempt is
  // assigned once MAX are here, or last_call after MIN (elastic).
  void joined(bool waiting);
  // A stop for every node: the attempt ends (and, with `restart_after`, a new one follows).
  void stop_all(bool restart_after, decltype(msg::Stop::why) why);
  // A restart's stop is complete once every member of the attempt still here has stopped.
  void maybe_restart();
  // Every node of the attempt is done: the job ends.
  void end();
  // The job stops for everyone with this reason (a joiner that differs, the join deadline).
  void abort(msg::Abort why);
  // The timers of the rounds: last_call, the admission of waiting nodes, the join deadline.
  void on_timer(Clock::time_point now);

 private:
  // The attempt's membership (Roster::order_for_assignment), node ranks given in order, and one
  // `assign` line to each (attempt 0, or an elastic restart's attempt).
  void assign();
  void admit_waiting(Clock::time_point now);
  void log(const std::string& line) const { log_line(endpoint_, line); }

  const RunConfig& cfg_;
  const std::string& endpoint_;
  Roster& roster_;
  Phase phase_ = Phase::kJoining;
  bool restart_ = false;
  int attempt_ = 0;
  // --- elastic (--nnodes MIN:MAX) ---
  int changes_ = 0;                             // changes of membership so far (the admission back-off doubles)
  std::optional<Clock::time_point> last_call_;  // joining: MIN joined, the job starts at this time
  Clock::time_point last_arrival_{}, attempt_started_ = Clock::now(), started_ = Clock::now();
  bool admission_capped_noted_ = false;
};

}  // namespace trainbox::launch::rdzv
