#include "dashboard_feed.h"

#include <trainbox/util/errors.h>

#include "outcome.h"

namespace trainbox::launch {

void DashboardFeed::cause(const RootCause& c) { cause(describe_cause(c), c.rank); }

void DashboardFeed::ended(int code) {
  exit_code_ = code;
  status_ = code == kExitOk ? "succeeded" : "failed";
}

void DashboardFeed::publish(FeedView v) {
  if (!on()) return;
  published_ = Clock::now();
  dashboard::DashboardInput in;
  dashboard::DashJob& j = in.job;
  j.command = dashboard::redact_command(v.cfg.command);
  j.run_id = v.cfg.run_id;
  j.host = v.host;
  j.nnodes = v.cfg.nnodes;
  j.world_size = v.cfg.world_size();
  j.node_rank = v.cfg.node_rank;
  j.attempt = v.attempt;
  j.max_restarts = v.cfg.max_restarts;
  j.stall_timeout_s = v.cfg.stall_timeout_s;
  j.root_cause = root_cause_;
  j.root_cause_rank = root_cause_rank_;
  j.exit_code = exit_code_;
  j.status = !status_.empty() ? status_ : v.running ? "running" : "stopping";
  for (const auto& p : v.ranks) {
    dashboard::DashRank r;
    r.rank = p.who.rank;
    r.local_rank = p.who.local_rank;
    r.node_rank = p.remote ? p.node_rank : j.node_rank;
    r.host = p.remote ? p.host : j.host;
    r.pid = p.who.pid;
    r.reporting = p.reporting;
    r.finished = p.finished;
    r.step = p.step;
    r.phase = p.phase;
    r.state = p.kernel.known ? p.kernel.state : '?';
    r.heartbeat_age_s = p.reporting ? p.idle_s : -1;
    in.ranks.push_back(std::move(r));
  }
  if (v.stall) {
    in.stalled = v.stall->stalled;
    in.culprits = v.stall->culprits;
    j.stall_headline = v.stall->headline;
    if (status_.empty()) j.status = "stalled";
  }
  if (v.cfg.log_dir_given) in.log_dirs = std::move(v.logs);
  board_->publish(std::move(in));
}

}  // namespace trainbox::launch
