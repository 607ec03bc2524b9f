// Who is at the rendezvous server, and what is asked of them all (rdzv_roster.h).
#include "rdzv_roster.h"

#include <algorithm>
#include <cstdio>
#include <variant>

#include <fmt/format.h>

namespace trainbox::launch::rdzv {

void log_line(std::string_view endpoint, std::string_view line) {
  std::fputs(fmt::format("trainbox run: rendezvous {}: {}\n", endpoint, line).c_str(), stderr);
}

void Roster::broadcast(const msg::Message& m, const Member* except) {
  const std::string line = msg::encode_line(m);
  const bool to_waiting = std::holds_alternative<msg::Heartbeat>(m) || std::holds_alternative<msg::End>(m) ||
                          std::holds_alternative<msg::Abort>(m);
  for (auto& o : members)
    if (!o->is(MemberState::kGone) && o.get() != except && (to_waiting || !o->is(MemberState::kWaiting)))
      o->ch.send_line(line);
}

int Roster::active() const {
  return static_cast<int>(std::count_if(members.begin(), members.end(), [](const auto& m) { return m->active(); }));
}

int Roster::remaining() const {
  return static_cast<int>(
      std::count_if(members.begin(), members.end(), [](const auto& m) { return !m->is(MemberState::kGone); }));
}

bool Roster::every_active_is(MemberState s) const {
  return std::all_of(members.begin(), members.end(), [&](const auto& o) { return !o->active() || o->is(s); });
}

bool Roster::any_is(MemberState s) const {
  return std::any_of(members.begin(), members.end(), [&](const auto& m) { return m->is(s); });
}

bool Roster::changes_at_restart(int max_nodes) const {
  return any_is(MemberState::kGone) || (active() < max_nodes && any_is(MemberState::kWaiting));
}

std::string Roster::hosting_host() const {
  for (const auto& m : members)
    if (m->hosting) return m->host;
  return "the hosting node";
}

std::vector<std::string> Roster::waiting_hosts() const {
  std::vector<std::string> hosts;
  for (const auto& m : members)
    if (m->is(MemberState::kWaiting)) hosts.push_back(m->host);
  return hosts;
}

bool Roster::quiet() const {
  return std::none_of(members.begin(), members.end(), [](const auto& m) { return m->ch.wants_write(); });
}

void Roster::erase(const Member& m) {
  members.erase(std::find_if(members.begin(), members.end(), [&](const auto& o) { return o.get() == &m; }));
}

int Roster::order_for_assignment(int max_nodes) {
  std::erase_if(members, [](const auto& m) { return m->is(MemberState::kGone); });
  int room = max_nodes - active();
  for (auto& m : members)
    if (room > 0 && m->state.to(MemberState::kJoined)) --room;  // kWaiting -> kJoined: admitted
  std::stable_partition(members.begin(), members.end(), [](const auto& m) { return !m->is(MemberState::kWaiting); });
  std::stable_partition(members.begin(), members.end(), [](const auto& m) { return m->hosting; });
  return active();
}

std::string Roster::describe(const Member& m) {
  return m.node_rank >= 0 ? fmt::format("node {} ({}, {})", m.node_rank, m.host, m.peer)
                          : fmt::format("{} ({})", m.host, m.peer);
}

}  // namespace trainbox::launch::rdzv
