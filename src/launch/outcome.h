// What this node says as an attempt ends (private to src/launch): the failure summary, the
// restart's line, the root cause in one line. Text only; the Supervisor (launcher.cpp) decides
// which is said.
#pragma once
#include <optional>
#include <string>

#include <trainbox/launch/messages.h>
#include <trainbox/launch/run_config.h>

#include "attempt.h"
#include "dashboard_feed.h"
#include "worker_group.h"

namespace trainbox::launch {

// "rank 3 (local rank 1, pid 4242) on node 0 (a): exit code 1 — …": the root cause in one line
// (the dashboard's banner, the restart's note).
std::string describe_cause(const RootCause& c);

// The failure summary (failure_report.h) on stderr, with this node's other workers, and the
// NCCL flight recorder dumps the attempt left.
void print_failure(const std::optional<RootCause>& root, const std::optional<LostNode>& lost, const WorkerGroup& group,
                   const RunConfig& cfg, const std::string& host);

// A usage error (exit 2) as the job's root cause, with every other worker here refused too or
// stopped by the launcher: the one line that says it ("trainbox run: usage error (exit 2) from
// every rank (2): …", the worker's error file's message), said instead of the failure report.
// nullopt for any other end, or when a worker here failed on its own some other way.
std::optional<std::string> usage_error_line(const AttemptOutcome& o, const WorkerGroup& group, const RunConfig& cfg);

// What this node says as the job ends with `o`, and trainbox run's exit code for it: 0, the
// failed rank's (launcher_exit_code), 124 for a stall, 125 for a lost node, 128 + a signal.
int say_end(const AttemptOutcome& o, const WorkerGroup& group, const RunConfig& cfg, const std::string& host);

// The stall as a root cause: the first culprit (on this node or, named by the kernel view
// another node sent, on that one), exit code 124, the headline as its message.
RootCause stall_cause(const StallReport& r, const WorkerGroup& group, const RunConfig& cfg);

// Without c10d: this node's attempt is the job's (its stop cause, or success).
AttemptOutcome local_outcome(const WorkerGroup& group, const RunConfig& cfg);

// A restart follows `o`: the dashboard's cause, and the console's line (a failure here or
// elsewhere; a lost node's and an admission's line follow with the new world).
void announce_restart(const AttemptOutcome& o, const WorkerGroup& group, const RunConfig& cfg, DashboardFeed& feed);

// "rank 1 (local_rank 1) failed with exit code 3; restarting all 2 workers (restart 1 of 3)".
std::string restart_note(const WorkerFailed& f, const WorkerGroup& group, const RunConfig& cfg);

}  // namespace trainbox::launch
