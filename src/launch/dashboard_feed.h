// The launcher's observer (private to src/launch): what `trainbox run --dashboard` shows,
// handed over to the Dashboard (dashboard/dashboard.h) as a copy, every kDashboardEvery and at
// each turn of the job; the page and its /metrics (Prometheus) are served from that copy. Holds
// what is published besides the ranks: the job's end and the last root cause. Without
// --dashboard every call is a no-op.
//   DashboardFeed feed(board);           // board: nullptr without --dashboard
//   feed.cause(root);                    // a failure, a stall, a lost node
//   if (feed.due()) feed.publish(cfg, group, stall);  // from the poll loop
#pragma once
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <trainbox/dashboard/dashboard.h>
#include <trainbox/launch/messages.h>
#include <trainbox/launch/run_config.h>
#include <trainbox/launch/stall.h>

#include "attempt.h"
#include "stall_monitor.h"
#include "worker_group.h"

namespace trainbox::launch {

class DashboardFeed {
 public:
  using Clock = std::chrono::steady_clock;
  // How often the launcher hands its ranks to the dashboard: twice per page refresh; a copy
  // of a few hundred bytes a rank.
  static constexpr std::chrono::milliseconds kEvery{500};

  explicit DashboardFeed(dashboard::Dashboard* board) : board_(board) {}
  bool on() const { return board_ != nullptr; }
  bool due() const { return on() && Clock::now() - published_ >= kEvery; }

  void cause(std::string what, int rank = -1) {
    root_cause_ = std::move(what);
    root_cause_rank_ = rank;
  }
  void cause(const RootCause& c);
  // The job ended with `o` and `code` (status succeeded or failed from then on; the failure or
  // the lost node as the root cause).
  void ended(int code, const AttemptOutcome& o);
  // Hands over the job as it is: the group's attempt and logs, every rank and the job's stall
  // verdict (StallMonitor). A no-op without --dashboard.
  void publish(const RunConfig& cfg, const WorkerGroup& group, StallMonitor& stall);

 private:
  dashboard::Dashboard* board_;
  Clock::time_point published_{};
  std::string status_, root_cause_;  // status "" while the job runs
  int root_cause_rank_ = -1;         // the rank root_cause names, while its logs are this attempt's
  int exit_code_ = -1;
};

}  // namespace trainbox::launch
