// The rendezvous server's attempts (rdzv_rounds.h).
#include "rdzv_rounds.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <trainbox/util/clock.h>
#include <trainbox/util/net.h>

namespace trainbox::launch::rdzv {

void Rounds::joined(bool waiting) {
  last_arrival_ = Clock::now();
  if (waiting) return;
  const int n = static_cast<int>(roster_.members.size());
  if (n == max_nodes()) {
    assign();
  } else if (n >= cfg_.nnodes && !last_call_) {  // elastic: MIN are here; the rest have last_call to come
    last_call_ = Clock::now() + seconds(cfg_.rdzv.last_call_s);
  }
}

void Rounds::assign() {
  const int n = roster_.order_for_assignment(max_nodes());
  auto& members = roster_.members;
  // Node 0 reached its own endpoint over loopback (its host name resolves to 127.0.1.1, as
  // Debian's /etc/hosts has it) but other hosts joined: they reached this machine at a real
  // address, and that is node 0's address as they see it.
  Member& node0 = *members[0];
  if (is_loopback_host(node0.addr) && !node0.addr_given)
    for (const auto& m : members)
      if (!is_loopback_host(m->peer)) {
        node0.addr = m->server_addr;
        break;
      }
  msg::Assign a;
  a.attempt = attempt_;
  a.assignment.nnodes = n;
  a.assignment.world_size = 0;
  a.assignment.master_addr = node0.addr;
  a.assignment.master_port = node0.free_port;
  std::vector<msg::AssignedPlace> places;
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
    Member& m = *members[i];
    m.node_rank = static_cast<int>(i);
    m.state.to(MemberState::kRunning);  // from kJoined (attempt 0, admitted) or kStopped (a restart)
    if (i == 0) a.assignment.nodes.push_back({m.node_rank, m.host, m.addr, m.nproc});
    places.push_back({m.node_rank, a.assignment.world_size});
    a.assignment.world_size += m.nproc;
  }
  // Each line names node 0 only (all a launcher uses of the others: where the rendezvous
  // and MASTER_ADDR are). The whole node list in every line was N lines of N nodes — the
  // O(N^2) bytes that made forming grow faster than N (docs/distributed.md, "Scale").
  const std::vector<std::string> lines = msg::encode_assign_lines(a, places);
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) members[i]->ch.send_line(lines[i]);
  phase_ = Phase::kRunning;
  last_call_.reset();
  attempt_started_ = Clock::now();
}

void Rounds::maybe_restart() {
  if (phase_ != Phase::kStopping || !restart_) return;
  if (!roster_.every_active_is(MemberState::kStopped)) return;
  ++attempt_;
  if (roster_.active() == 0) {  // nobody left to restart (an elastic job whose members all went)
    phase_ = Phase::kFinished;
    return;
  }
  if (roster_.changes_at_restart(max_nodes())) {
    ++changes_;
    assign();  // the new world's `assign` lines, with this attempt's number
    return;
  }
  for (auto& o : roster_.members)
    if (o->active()) o->state.to(MemberState::kRunning);  // kStopped -> kRunning: the same nodes again
  phase_ = Phase::kRunning;
  attempt_started_ = Clock::now();
  roster_.broadcast(msg::Start{attempt_, roster_.members[0]->free_port});
}

void Rounds::stop_all(bool restart_after, decltype(msg::Stop::why) why) {
  restart_ = restart_after;
  phase_ = Phase::kStopping;
  roster_.broadcast(msg::Stop{attempt_, restart_after, std::move(why)});
}

void Rounds::end() {
  roster_.broadcast(msg::End{0});
  phase_ = Phase::kFinished;
}

void Rounds::abort(msg::Abort why) {
  roster_.broadcast(why);
  phase_ = Phase::kFinished;
}

void Rounds::on_timer(Clock::time_point now) {
  if (phase_ == Phase::kJoining && last_call_ && now >= *last_call_) assign();  // elastic: MIN or more came
  if (phase_ == Phase::kRunning) admit_waiting(now);
  if (phase_ == Phase::kJoining && now - started_ > seconds(cfg_.rdzv.join_timeout_s))
    abort(msg::Abort{
        fmt::format("only {} of {}{} nodes joined job '{}' at {} within join_timeout={:g}s", roster_.members.size(),
                    elastic() ? "at least " : "", cfg_.nnodes, cfg_.run_id, endpoint_, cfg_.rdzv.join_timeout_s),
        "start a launcher on every node with the same --rdzv-endpoint and --rdzv-id"});
}

// Elastic: nodes waiting while the job runs are admitted by a restart once arrivals have
// settled (last_call since the latest) and the back-off since this attempt began has passed:
// admit_backoff, doubled with every change of membership so far (at most 60 s), so a node
// that flaps cannot restart the job over and over; each admission is a restart and counts
// against --max-restarts, as in torchelastic.
void Rounds::admit_waiting(Clock::time_point now) {
  const std::vector<std::string> hosts = roster_.waiting_hosts();
  if (hosts.empty() || roster_.active() >= max_nodes()) return;
  const double backoff = std::min(60.0, cfg_.rdzv.admit_backoff_s * std::pow(2.0, std::min(changes_, 6)));
  if (now < last_arrival_ + seconds(cfg_.rdzv.last_call_s) || now < attempt_started_ + seconds(backoff)) return;
  if (attempt_ >= cfg_.max_restarts) {
    if (!admission_capped_noted_)
      log(fmt::format("{} waiting: not admitted, --max-restarts {} is used up",
                      fmt::format("{} node{}", hosts.size(), hosts.size() == 1 ? "" : "s"), cfg_.max_restarts));
    admission_capped_noted_ = true;
    return;
  }
  log(fmt::format("admitting {}: every node restarts at the new world", fmt::join(hosts, ", ")));
  stop_all(true, msg::Admitting{hosts});
}

}  // namespace trainbox::launch::rdzv
