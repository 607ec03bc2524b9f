// src/launch/rdzv_roster.h (private) — who is at the c10d rendezvous server (rdzv_server.cpp): the
// connections that have not joined yet (Pending) and the launchers that have (Member), each with one
// state field (rdzv_states.h: the legal moves), and what the rounds and the message handlers ask of
// all of them at once. One thread (the server's loop) owns a Roster; no locking.
//
//   Roster r;
//   r.members.push_back(std::move(joined));     // by join order until assigned
//   const int n = r.order_for_assignment(max);  // gone dropped, waiting admitted, host first
//   r.broadcast(msg::Heartbeat{});              // every member not gone, the waiting ones too
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "channel.h"
#include "rdzv_states.h"

namespace trainbox::launch::rdzv {

using Clock = std::chrono::steady_clock;

// What an epoll event points at: a connection that has not joined yet (kConnected), or a member.
struct Peer {
  JsonChannel ch;
  StateField<MemberState> state{MemberState::kConnected};  // launch/rdzv_states.h: the legal moves
  bool is(MemberState s) const { return state.is(s); }
};

struct Member : Peer {
  std::string host, addr, peer;
  std::string server_addr;  // the server's address as this member reached it
  bool addr_given = false;  // addr is its --local-addr
  int nproc = 1, node_rank = -1, free_port = 0;
  long long pid = 0;
  bool hosting = false;  // it hosts this server (node 0): a fact of its join, not a state
  Clock::time_point last_heard;
  // In the running attempt, or forming the next one: neither lost nor waiting to be admitted.
  bool active() const { return !is(MemberState::kGone) && !is(MemberState::kWaiting); }
};

struct Pending : Peer {
  Clock::time_point since;
};

// "trainbox run: rendezvous HOST:PORT: LINE" on stderr: the server's one way to speak.
void log_line(std::string_view endpoint, std::string_view line);

class Roster {
 public:
  // Owned by pointer: epoll events point at them while the vectors reorder (assignment) and shrink.
  std::vector<std::unique_ptr<Member>> members;  // by join order until assigned, then by node rank
  std::vector<std::unique_ptr<Pending>> pending;

  // Encoded once for all (a Ranks relay too), not once per member. Nodes waiting to be admitted
  // hear only what concerns them: heartbeats, the job's end, an abort.
  void broadcast(const msg::Message& m, const Member* except = nullptr);
  // Members of the running attempt (not gone, not waiting), and those that may form the next one.
  int active() const;
  int remaining() const;  // not gone (the waiting ones included)
  bool every_active_is(MemberState s) const;
  bool any_is(MemberState s) const;
  // Elastic: whether the next attempt's members differ from this one's (one lost, or one admitted).
  bool changes_at_restart(int max_nodes) const;
  std::string hosting_host() const;  // the host name of the member that hosts the server
  std::vector<std::string> waiting_hosts() const;
  bool quiet() const;  // nothing queued for any member (the server may finish)
  void erase(const Member& m);
  // The next attempt's membership, in node-rank order: the lost dropped, waiting ones admitted
  // (kWaiting -> kJoined) while there is room under max_nodes, the hosting launcher first (node 0:
  // its address is the endpoint's, which every node has just proven it can reach), the rest in
  // their order (node rank, then join order). Returns how many are in it (the first ones).
  int order_for_assignment(int max_nodes);
  // "node 1 (b, 10.0.0.2)" once assigned, "b (10.0.0.2)" while joining: for log lines.
  static std::string describe(const Member& m);
};

}  // namespace trainbox::launch::rdzv
