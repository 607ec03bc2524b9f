// This node's place in a c10d job (private to src/launch): the rendezvous it may host, the
// control channel to it, the world it was assigned, and what the rendezvous said about the
// current attempt (JobWord). Translates the channel's messages into the launcher's vocabulary
// (attempt.h) and never touches a worker: what a word means for the workers is the
// Supervisor's (launcher.cpp).
//   Membership m(cfg, host);
//   m.join(signals);                       // SignalWhileJoining on Ctrl-C; fills cfg's world
//   m.begin_attempt(n);
//   ChannelNews news = m.service(revents); // after poll() on m.fd()
//   if (m.word().verdict) …
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <trainbox/launch/rendezvous.h>
#include <trainbox/launch/run_config.h>

#include "attempt.h"
#include "signals.h"

namespace trainbox::launch {

// A stopping signal (SIGINT, SIGTERM, …) arrived while this node waited for the others to join.
struct SignalWhileJoining {
  int sig;
};

// What the rendezvous said about one attempt.
struct JobWord {
  std::optional<AttemptOutcome> verdict;  // a stop, the end, or its loss (the heavier one stands)
  std::optional<int> next_port;           // it started the next attempt with this MASTER_PORT
  std::optional<Assignment> next_world;   // elastic: …at a new world (an `assign` instead of a `start`)
  // The rendezvous said the job restarts (a failure with restarts left, a lost node of an
  // elastic job, an admission).
  bool restarting() const;
};

// What one round of the control channel asks of this node's workers.
struct ChannelNews {
  std::vector<msg::Ranks> ranks;   // other nodes' ranks of this attempt (host filled in), for the stall verdict
  std::vector<std::string> stops;  // the rendezvous stopped the attempt: what to say (the first is said)
  std::optional<LostNode> lost;    // the server (node 0) is gone: this node stops too
};

class Membership {
 public:
  // cfg: the Supervisor's; join() and change_world() fill in the node rank, the world and the master.
  Membership(RunConfig& cfg, std::string host) : cfg_(cfg), host_(std::move(host)) {}
  // Lets the last broadcasts (stop, end, abort) reach the other nodes before this launcher,
  // which hosts their rendezvous, exits. 1 s: they are a few hundred bytes.
  ~Membership() {
    if (server_) server_->finish(1.0);
  }
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Hosts the rendezvous when this machine owns its address, meets the other launchers and
  // takes this node's place. Throws SignalWhileJoining, JobEndedWhileWaiting, UsageError.
  void join(SignalScope& signals);
  bool joined() const { return ctrl_ != nullptr; }
  int first_attempt() const { return first_attempt_; }  // elastic: a node admitted later starts at the job's attempt

  // --- the channel (after join) ---
  int fd() const { return ctrl_->fd(); }
  short poll_events() const { return ctrl_->poll_events(); }
  int timeout_ms() const { return ctrl_->timeout_ms(); }
  void send(const msg::Message& m) { ctrl_->send(m); }
  void expect_close() { ctrl_->expect_close(); }  // the job's end is decided: node 0 may exit first
  LostNode lost_server() const { return ctrl_->lost_server(); }
  ChannelNews service(short revents);

  // --- the rendezvous's word on the current attempt ---
  void begin_attempt(int number) {
    attempt_ = number;
    word_ = {};
  }
  const JobWord& word() const { return word_; }
  void says(AttemptOutcome o);  // of two, the heavier stands (weight())

  // Elastic: the next attempt runs at a new world. One line on every node, and a record in
  // --log-dir's membership.jsonl: "world 3 → 2: lost node 2 (c, …); resuming from step_40".
  void change_world(const Assignment& a, const AttemptOutcome& why);

 private:
  void take_place(const Assignment& a);
  void on_stop(const msg::Stop& s, ChannelNews& news);
  std::string describe_stop(const msg::Stop& s) const;

  RunConfig& cfg_;
  std::string host_;
  std::unique_ptr<RendezvousServer> server_;  // when this launcher hosts the rendezvous
  std::unique_ptr<ControlClient> ctrl_;       // set once this node has joined
  int first_attempt_ = 0;
  Assignment world_;  // this attempt's world, as the rendezvous assigned it
  int attempt_ = 0;
  JobWord word_;
};

}  // namespace trainbox::launch
