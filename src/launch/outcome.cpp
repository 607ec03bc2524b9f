#include "outcome.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

#include "console.h"
#include "failure_report.h"

namespace trainbox::launch {

namespace {

std::string join_command(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s.size() > 120 ? s.substr(0, 117) + "..." : s;
}

}  // namespace

std::string describe_cause(const RootCause& c) {
  std::string how = c.signal ? "killed by " + signal_name(c.signal) : fmt::format("exit code {}", c.exit_code);
  if (c.rank < 0)
    return fmt::format("node {} ({}) could not start its workers: {}", c.node_rank, c.host, c.error_message);
  return fmt::format("rank {} (local rank {}, pid {}) on node {} ({}): {}{}", c.rank, c.local_rank, c.pid, c.node_rank,
                     c.host, how, c.error_message.empty() ? "" : " — " + c.error_message);
}

void print_failure(const std::optional<RootCause>& root, const std::optional<LostNode>& lost, const WorkerGroup& group,
                   const RunConfig& cfg, const std::string& host) {
  FailureReport report;
  report.command = join_command(cfg.command);
  report.host = host;
  report.node_rank = cfg.node_rank;
  report.nnodes = cfg.nnodes;
  report.restarts = group.number();
  report.root = root;
  report.lost = lost;
  report.exit_code = root ? root->launcher_exit_code() : kExitNodeLost;
  const bool root_here = root && root->node_rank == cfg.node_rank;
  for (const auto& w : group.workers())
    if (!(root_here && w.rank == root->rank)) report.workers.push_back(&w);
  std::fputs(render_failure(report).c_str(), stderr);
  // NCCL's flight recorder (on by default for the workers): the dumps a timeout left
  std::vector<std::string> dumps;
  std::error_code ec;
  const std::string dir = group.attempt_dir();
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (starts_with(e.path().filename().string(), "nccl_trace_rank_")) dumps.push_back(e.path().string());
  std::sort(dumps.begin(), dumps.end());
  if (!dumps.empty())
    note(fmt::format(
        "NCCL flight recorder dumps: {} (read them with: python -m torch.distributed.flight_recorder.fr_trace "
        "{} --prefix nccl_trace_rank_)",
        fmt::join(dumps, " "), dir));
}

std::optional<std::string> usage_error_line(const AttemptOutcome& o, const WorkerGroup& group, const RunConfig& cfg) {
  const auto* f = std::get_if<WorkerFailed>(&o);
  // (A launcher that could not start its workers, rank -1, keeps the report: it is no worker's refusal.)
  if (!f || f->cause.rank < 0 || f->cause.signal || f->cause.exit_code != kExitUsage) return std::nullopt;
  // Every other worker here refused too, or ended because the launcher stopped it (it may not
  // have reached its own check); one that failed on its own some other way keeps the report.
  bool every_rank = cfg.nnodes == 1;
  for (const auto& w : group.workers()) {
    if (!w.reaped) return std::nullopt;  // left behind after SIGKILL: the report says so
    const bool refused = WIFEXITED(w.wait_status) && WEXITSTATUS(w.wait_status) == kExitUsage;
    if (!refused && w.failed() && !w.stop_signal) return std::nullopt;
    every_rank = every_rank && refused;
  }
  // The worker's own line (trainbox writes "trainbox.Error: what (fix: hint)"), else the last
  // line it printed (a program that does not write error files).
  std::string why = f->cause.error_message;
  if (starts_with(why, "trainbox.Error: ")) why = why.substr(16);
  for (auto it = f->cause.stderr_tail.rbegin(); why.empty() && it != f->cause.stderr_tail.rend(); ++it)
    if (!trim(*it).empty()) why = trim(*it);
  const RootCause& c = f->cause;
  const std::string who = every_rank
                              ? fmt::format("every rank ({})", group.workers().size())
                              : fmt::format("rank {}{} (the other ranks were stopped)", c.rank,
                                            cfg.nnodes > 1 ? fmt::format(" on node {} ({})", c.node_rank, c.host) : "");
  return fmt::format("trainbox run: usage error (exit 2) from {}: {}\n", who,
                     why.empty() ? "no message (see the workers' output above)" : why);
}

int say_end(const AttemptOutcome& o, const WorkerGroup& group, const RunConfig& cfg, const std::string& host) {
  return std::visit(
      Overloaded{
          [](const Succeeded&) { return kExitOk; },
          [&](const WorkerFailed& f) {
            if (const auto line = usage_error_line(o, group, cfg)) {  // one line, not a failure report
              std::fputs(line->c_str(), stderr);
              return kExitUsage;
            }
            print_failure(f.cause, std::nullopt, group, cfg, host);
            return f.cause.launcher_exit_code();
          },
          [&](const Stalled& s) {
            print_failure(s.cause, std::nullopt, group, cfg, host);
            return kExitStalled;
          },
          [&](const NodeLost& l) {
            print_failure(std::nullopt, l.node, group, cfg, host);
            return kExitNodeLost;
          },
          [](const Admitted&) {  // only a restart follows an admission; a stop did instead
            note("the job stopped while admitting new nodes");
            return kExitFailed;
          },
          [&](const Interrupted& i) {
            const std::size_t n = group.workers().size();
            if (i.elsewhere)
              note(fmt::format("node {} ({}) got {}; its launcher stopped the job", i.elsewhere->node_rank,
                               i.elsewhere->host, signal_name(i.signal)));
            else if (i.stopped_workers)
              note(fmt::format("stopped {} worker{} after {}", n, n == 1 ? "" : "s", signal_name(i.signal)));
            return 128 + i.signal;
          },
      },
      o);
}

std::string restart_note(const WorkerFailed& f, const WorkerGroup& group, const RunConfig& cfg) {
  const int restart = group.number() + 1;
  if (f.here)
    return fmt::format("rank {} (local_rank {}) failed with {}; restarting all {} workers (restart {} of {})",
                       f.here->rank, f.here->local_rank, describe_wait_status(f.here->wait_status),
                       group.workers().size(), restart, cfg.max_restarts);
  const RootCause& c = f.cause;
  return fmt::format(
      "rank {} on node {} ({}) failed with {}; restarting the workers of {} (restart {} of {})", c.rank, c.node_rank,
      c.host, c.signal ? fmt::format("signal {}", signal_name(c.signal)) : fmt::format("exit code {}", c.exit_code),
      cfg.nnodes == 1 ? std::string("the node") : fmt::format("all {} nodes", cfg.nnodes), restart, cfg.max_restarts);
}

RootCause stall_cause(const StallReport& r, const WorkerGroup& group, const RunConfig& cfg) {
  RootCause c;
  const RankProgress* first = r.culprits.empty() ? nullptr : r.find(r.culprits.front());
  if (first && first->remote) {
    c.host = first->host;
    c.node_rank = first->node_rank;
    c.rank = first->who.rank;
    c.local_rank = first->who.local_rank;
    c.pid = first->who.pid;
  } else {
    const Worker* culprit = group.workers().empty() ? nullptr : &group.workers().front();
    for (const auto& w : group.workers())
      if (r.is_culprit(w.rank)) {
        culprit = &w;
        break;
      }
    if (culprit) c = group.root_cause(*culprit);
    c.host = group.host();
    c.node_rank = cfg.node_rank;
  }
  c.signal = 0;
  c.exit_code = kExitStalled;
  c.error_message = "stalled: " + r.headline;
  c.time = std::time(nullptr);
  return c;
}

AttemptOutcome local_outcome(const WorkerGroup& group, const RunConfig& cfg) {
  if (!group.cause()) return Succeeded{};
  return std::visit(
      Overloaded{
          [&](const LocalFailure& f) -> AttemptOutcome {
            return WorkerFailed{group.root_cause(*f.worker), f.worker, std::nullopt};
          },
          [&](const LocalStall& s) -> AttemptOutcome { return Stalled{stall_cause(s.report, group, cfg)}; },
          [](const LocalSignal& s) -> AttemptOutcome { return Interrupted{.signal = s.signal}; },
      },
      *group.cause());
}

void announce_restart(const AttemptOutcome& o, const WorkerGroup& group, const RunConfig& cfg, DashboardFeed& feed) {
  if (const auto* l = std::get_if<NodeLost>(&o)) {
    feed.cause(l->node.describe() + ": " + l->node.why + " (the job goes on without it)");
    return;  // the new world's line follows with the rendezvous's assignment
  }
  const auto* f = std::get_if<WorkerFailed>(&o);
  if (!f) return;  // a stall: --on-stall restart said so as it stopped the workers; an admission: the new world
  feed.cause(describe_cause(f->cause) + " (restarted)");  // the new attempt's logs are not that rank's failure
  note(restart_note(*f, group, cfg));
}

}  // namespace trainbox::launch
