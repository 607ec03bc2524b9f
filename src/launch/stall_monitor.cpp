#include "stall_monitor.h"

#include <cstdio>

#include <fmt/format.h>

#include "console.h"

namespace trainbox::launch {

namespace {

// How often each node sends its ranks' progress and kernel view to the others (control
// channel "ranks"): well under any useful --stall-timeout, a few hundred bytes a rank.
constexpr std::chrono::seconds kRanksEvery{1};

}  // namespace

bool StallMonitor::ranks_due() const { return Clock::now() - ranks_sent_ >= kRanksEvery; }

msg::Ranks StallMonitor::ranks_message(int attempt, const std::string& host) {
  ranks_sent_ = Clock::now();
  return msg::Ranks{attempt, cfg_.node_rank, host, watch_.snapshot()};
}

std::optional<StallReport> StallMonitor::judge_job(const std::vector<RankProgress>& ranks) const {
  if (!enabled()) return std::nullopt;
  return judge_stall(ranks, cfg_.stall_timeout_s, /*any_node=*/true);
}

void StallMonitor::print_stacks(const std::vector<RankProgress>& ranks, const std::vector<int>& culprits,
                                const std::string& attempt_dir) {
  const auto deadline = std::chrono::milliseconds(static_cast<long long>(cfg_.stack_timeout_s * 1000));
  std::string text;
  for (const auto& l : dump_stacks(ranks, culprits, attempt_dir + "/stacks", deadline)) text += l + "\n";
  std::fputs(text.c_str(), stderr);
}

void StallMonitor::dump_all(const std::string& attempt_dir) {
  note("SIGUSR1: writing every worker's stacks; the job goes on");
  std::vector<RankProgress> ranks;
  for (const auto& p : watch_.snapshot())
    if (!p.finished) ranks.push_back(p);
  print_stacks(ranks, {}, attempt_dir);
}

void StallMonitor::announce(const StallReport& r, int attempt, const std::string& attempt_dir) {
  note(fmt::format("stalled: {} (no progress for {:g} s: --stall-timeout)", r.headline, cfg_.stall_timeout_s));
  print_stacks(r.ranks, r.culprits, attempt_dir);
  if (cfg_.on_stall == StallAction::kDump) {
    note("--on-stall dump: the job goes on (stop it with Ctrl-C, or it may recover)");
    return;
  }
  note(cfg_.on_stall == StallAction::kRestart && attempt < cfg_.max_restarts
           ? fmt::format("--on-stall restart: stopping every worker for restart {} of {}", attempt + 1,
                         cfg_.max_restarts)
           : fmt::format("--on-stall {}: stopping every worker (trainbox run exits {})",
                         stall_action_name(cfg_.on_stall), kExitStalled));
}

}  // namespace trainbox::launch
