// src/launch/failure_report.h (private) — the block `trainbox run` prints on stderr when a job fails.
//
// Laid out like torchrun's "Root Cause (first observed failure)" block, so people who know
// torchrun find every field where they expect it, plus what torchrun leaves out: the signal's
// name, the root cause's last stderr lines, how every other worker ended, and — in a c10d
// job — the same global root cause on every node (carried over the control channel), or the
// node that was lost, with a note when this node's workers only failed as a consequence.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <trainbox/launch/rendezvous.h>

#include "worker.h"

namespace trainbox::launch {

struct FailureReport {
  std::string command;  // the user's command, for the title
  std::string host;     // this node
  int node_rank = 0, nnodes = 1;
  int restarts = 0;                    // restarts used before this failure
  std::optional<RootCause> root;       // the first failing worker, on this node or another
  std::optional<LostNode> lost;        // or the node whose launcher was lost
  int exit_code = 1;                   // what trainbox run exits with
  std::vector<const Worker*> workers;  // this node's workers, the root cause excepted
};

// The root cause as this node's launcher saw its worker end (error file read now).
RootCause root_cause_of(const Worker& w, const std::string& host, int node_rank, const std::string& error_file);

std::string render_failure(const FailureReport& r);

// How a worker other than the root cause ended, saying who ended it: "succeeded",
// "exited on its own (exit code 4)", "stopped by trainbox run (SIGTERM)",
// "stopped by trainbox run (SIGKILL after SIGTERM)", "exited with code 0 after trainbox
// run's SIGTERM", "still running", "left behind: not gone after SIGKILL (unkillable)". Only a signal sent while the
// process still ran counts (Worker::stop_signal): one that reached a zombie changed nothing.
std::string how_it_ended(const Worker& w);

}  // namespace trainbox::launch
