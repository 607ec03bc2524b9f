#include "dashboard_feed.h"

#include <trainbox/util/errors.h>

#include "outcome.h"

namespace trainbox::launch {

void DashboardFeed::cause(const RootCause& c) { cause(describe_cause(c), c.rank); }

void DashboardFeed::ended(int code, const AttemptOutcome& o) {
  exit_code_ = code;
  status_ = code == kExitOk ? "succeeded" : "failed";
  if (const auto* f = std::get_if<WorkerFailed>(&o)) cause(f->cause);
  if (const auto* l = std::get_if<NodeLost>(&o)) cause(l->node.describe() + ": " + l->node.why);
}

void DashboardFeed::publish(const RunConfig& cfg, const WorkerGroup& group, StallMonitor& stall) {
  if (!on()) return;
  published_ = Clock::now();
  const std::vector<RankProgress> ranks = stall.everyone();
  dashboard::DashboardInput in;
  dashboard::DashJob& j = in.job;
  j.command = dashboard::redact_command(cfg.command);
  j.run_id = cfg.run_id;
  j.host = group.host();
  j.nnodes = cfg.nnodes;
  j.world_size = cfg.world_size();
  j.node_rank = cfg.node_rank;
  j.attempt = group.number();
  j.max_restarts = cfg.max_restarts;
  j.stall_timeout_s = cfg.stall_timeout_s;
  j.root_cause = root_cause_;
  j.root_cause_rank = root_cause_rank_;
  j.exit_code = exit_code_;
  j.status = !status_.empty() ? status_ : group.running() ? "running" : "stopping";
  for (const auto& p : ranks) {
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
  if (auto verdict = stall.judge_job(ranks)) {
    in.stalled = verdict->stalled;
    in.culprits = verdict->culprits;
    j.stall_headline = verdict->headline;
    if (status_.empty()) j.status = "stalled";
  }
  if (cfg.log_dir_given) in.log_dirs = group.log_dirs();
  board_->publish(std::move(in));
}

}  // namespace trainbox::launch
