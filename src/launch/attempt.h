// The launcher's vocabulary for one attempt (torchelastic's WorkerState and RunResult): how the
// workers of this node are doing (WorkerPhase), why this node stopped them (StopCause), and how
// the attempt ended for the job (AttemptOutcome). Private to src/launch: the Supervisor
// (launcher.cpp) makes the restart decision and the exit code from an AttemptOutcome in one
// place (Supervisor::run_attempts, restarts, conclude); the other pieces only produce them.
#pragma once
#include <signal.h>

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <trainbox/launch/messages.h>
#include <trainbox/launch/stall.h>

#include "worker.h"

namespace trainbox::launch {

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;  // clang 14 (the fuzz build) has no aggregate deduction yet

// --- how an attempt ended ---
// Every worker (in a c10d job: every node's) exited 0.
struct Succeeded {};
// A worker failed: on this node (no c10d), or the job's first failure as the rendezvous broadcast it.
struct WorkerFailed {
  RootCause cause;
  const Worker* here = nullptr;      // without c10d: this node's failed worker
  std::optional<bool> job_restarts;  // c10d: the rendezvous's decision; unset: this launcher decides
};
// --on-stall kill or restart stopped the workers (without c10d: a c10d job reports a stall
// as its failure, with exit code 124).
struct Stalled {
  RootCause cause;
};
// A node of the c10d job is gone (or the rendezvous, or its word).
struct NodeLost {
  LostNode node;
  bool job_restarts = false;  // elastic: the survivors go on at a smaller world
};
// Elastic: nodes waiting to join are admitted; every node restarts at the larger world.
struct Admitted {
  std::vector<std::string> hosts;
};
// A stopping signal, here or on another node of a c10d job.
struct Interrupted {
  int signal = SIGTERM;
  std::optional<msg::SignalElsewhere> elsewhere{};  // unset: this node got it
  bool stopped_workers = true;                      // here: it is what stopped this node's workers
};
using AttemptOutcome = std::variant<Succeeded, WorkerFailed, Stalled, NodeLost, Interrupted, Admitted>;

// Two verdicts of the rendezvous for one attempt: a lost node or a signal overrides a failure.
inline int weight(const AttemptOutcome& o) {
  return std::visit(Overloaded{[](const Succeeded&) { return 0; }, [](const WorkerFailed&) { return 1; },
                               [](const Stalled&) { return 1; }, [](const Admitted&) { return 1; },
                               [](const Interrupted&) { return 2; }, [](const NodeLost&) { return 3; }},
                    o);
}

// --- one attempt on this node ---
// The workers run; then stopping (stop_signal sent, SIGKILL at the deadline); then killing
// (SIGKILL sent, the unkillable ones abandoned at the deadline).
enum class WorkerPhase { kRunning, kStopping, kKilling };
// Why this node stopped its workers before they all ended on their own.
struct LocalFailure {
  Worker* worker;  // the first one that failed: every later failure may be its consequence
};
struct LocalStall {
  StallReport report;
};
struct LocalSignal {
  int signal;
};
using StopCause = std::variant<LocalFailure, LocalStall, LocalSignal>;

}  // namespace trainbox::launch
