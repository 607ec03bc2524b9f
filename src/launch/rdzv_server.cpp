// The c10d rendezvous and control server (launch/rendezvous.h): one thread, one epoll loop.
//
// Scale (docs/distributed.md, "Scale"; tests/tools/rdzv_swarm.cpp measures it): a wake-up
// touches only the sockets that are ready (edge-triggered epoll), not all N; the silence scan
// runs every 100 ms, not per message; a message for many launchers is encoded once; the N
// assignments share one encoding of the node list.
#include <trainbox/launch/rendezvous.h>

#include <fcntl.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <trainbox/util/clock.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/net.h>
#include <trainbox/util/strings.h>

#include "channel.h"
#include "rdzv_states.h"

namespace trainbox::launch {

using Clock = std::chrono::steady_clock;

// --- the server ---
namespace {

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

enum class Phase { kJoining, kRunning, kStopping, kFinished };

}  // namespace

struct RendezvousServer::State {
  RunConfig cfg;
  std::string endpoint;  // "host:port" as the user wrote it, for messages
  UniqueFd listener, wake, epoll;
  int port = 0;
  std::thread thread;
  std::atomic<bool> quit{false};
  std::atomic<bool> finishing{false};
  Clock::time_point finish_by{};

  Phase phase = Phase::kJoining;
  bool restart = false;  // while kStopping: whether a new attempt follows
  int attempt = 0;
  // --- elastic (--nnodes MIN:MAX) ---
  int changes = 0;                             // changes of membership so far (the admission back-off doubles)
  std::optional<Clock::time_point> last_call;  // joining: MIN joined, the job starts at this time
  Clock::time_point last_arrival{}, attempt_started = Clock::now();
  bool admission_capped_noted = false;
  std::set<std::string> noted_kinds;  // the kinds of worker-command differences this node has noted
  Clock::time_point started = Clock::now(), last_beat = Clock::now(), last_scan = Clock::now();
  // Owned by pointer: epoll events point at them while the vectors reorder (assign) and shrink.
  std::vector<std::unique_ptr<Member>> members;  // by join order until assigned, then by node rank
  std::vector<std::unique_ptr<Pending>> pending;

  void log(const std::string& line) const {
    std::fputs(fmt::format("trainbox run: rendezvous {}: {}\n", endpoint, line).c_str(), stderr);
  }

  // Encoded once for all (a Ranks relay too), not once per member. Nodes waiting to be admitted
  // hear only what concerns them: heartbeats, the job's end, an abort.
  void broadcast(const msg::Message& m, const Member* except = nullptr) {
    const std::string line = msg::encode_line(m);
    const bool to_waiting = std::holds_alternative<msg::Heartbeat>(m) || std::holds_alternative<msg::End>(m) ||
                            std::holds_alternative<msg::Abort>(m);
    for (auto& o : members)
      if (!o->is(MemberState::kGone) && o.get() != except && (to_waiting || !o->is(MemberState::kWaiting)))
        o->ch.send_line(line);
  }
  bool elastic() const { return cfg.elastic(); }
  int max_nodes() const { return elastic() ? cfg.nnodes_max : cfg.nnodes; }
  // Members of the running attempt (not gone, not waiting), and those that may form the next one.
  int active() const {
    return static_cast<int>(std::count_if(members.begin(), members.end(), [](const auto& m) { return m->active(); }));
  }
  int remaining() const {
    return static_cast<int>(
        std::count_if(members.begin(), members.end(), [](const auto& m) { return !m->is(MemberState::kGone); }));
  }

  // Every readiness change of `p`'s socket, edge-triggered: the loop reads and writes until
  // EAGAIN (JsonChannel does), so nothing is missed, and idle sockets cost nothing per wake-up.
  void watch(Peer* p, int op) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.ptr = p;
    if (epoll_ctl(epoll.get(), op, p->ch.fd(), &ev) != 0) p->ch.close("epoll_ctl: " + errno_text(errno));
  }

  // "node 1 (b, 10.0.0.2)" once assigned, "b (10.0.0.2)" while joining: for log lines.
  static std::string describe(const Member& m) {
    return m.node_rank >= 0 ? fmt::format("node {} ({}, {})", m.node_rank, m.host, m.peer)
                            : fmt::format("{} ({})", m.host, m.peer);
  }

  // --- joining ---
  void refuse(JsonChannel& ch, const std::string& message, const std::string& hint) {
    ch.send(msg::Refuse{message, hint});
  }

  // A refusal for `j`, or "" when it may join.
  std::optional<msg::Refuse> refusal(const msg::Join& j) const {
    if (j.version != kRdzvProtocolVersion)
      return msg::Refuse{fmt::format("the rendezvous at {} speaks protocol {}, node {} speaks {}", endpoint,
                                     kRdzvProtocolVersion, j.host, j.version),
                         "run the same trainbox version on every node"};
    if (j.run_id != cfg.run_id)
      return msg::Refuse{
          fmt::format("the rendezvous at {} belongs to job '{}', not '{}'", endpoint, cfg.run_id, j.run_id),
          "pass the same --rdzv-id on every node; a second job needs its own endpoint port"};
    const bool admissible = elastic() && (phase == Phase::kRunning || (phase == Phase::kStopping && restart));
    if (phase != Phase::kJoining && !admissible)
      return msg::Refuse{fmt::format("job '{}' is already running with {} nodes at {}", cfg.run_id,
                                     elastic() ? active() : cfg.nnodes, endpoint),
                         elastic() ? "it is stopping: start this node again for the next job"
                                   : "a second job needs its own --rdzv-id and endpoint port; or wait until this one "
                                     "ends (an elastic job, --nnodes MIN:MAX, admits nodes while it runs)"};
    if (phase != Phase::kJoining && remaining() >= max_nodes())
      return msg::Refuse{
          fmt::format("elastic job '{}' at {} already has its maximum of {} nodes", cfg.run_id, endpoint, max_nodes()),
          "start this node again when one of them is gone, or raise MAX in --nnodes MIN:MAX"};
    return std::nullopt;
  }

  // What differs between `j` and this job ("--nnodes differs between nodes: …", its fix), if anything.
  std::optional<std::pair<std::string, std::string>> difference(const msg::Join& j,
                                                                const std::string& hosting_host) const {
    auto differs = [&](const std::string& what, const std::string& theirs, const std::string& ours,
                       const std::string& fix) {
      return std::pair{
          fmt::format("{} differs between nodes: {} on {}, but {} on {} (which hosts the rendezvous at {})", what,
                      theirs, j.host, ours, hosting_host, endpoint),
          fix};
    };
    const std::string ours_nnodes =
        elastic() ? fmt::format("{}:{}", cfg.nnodes, cfg.nnodes_max) : std::to_string(cfg.nnodes);
    const std::string theirs_nnodes =
        j.nnodes_max != j.nnodes ? fmt::format("{}:{}", j.nnodes, j.nnodes_max) : std::to_string(j.nnodes);
    if (theirs_nnodes != ours_nnodes)
      return differs("--nnodes", "--nnodes " + theirs_nnodes, "--nnodes " + ours_nnodes,
                     "pass the same --nnodes on every node");
    if (j.max_restarts != cfg.max_restarts)
      return differs("--max-restarts", fmt::format("--max-restarts {}", j.max_restarts),
                     fmt::format("--max-restarts {}", cfg.max_restarts), "pass the same --max-restarts on every node");
    if (j.trainbox_version != msg::trainbox_version_text())
      return differs("the trainbox version", "trainbox " + j.trainbox_version,
                     "trainbox " + std::string(msg::trainbox_version_text()),
                     "install the same trainbox version on every node");
    // The worker command (launch/job_digest.h): what changes the math refuses; paths are noted.
    if (auto refused = compare_job_digests(j.config, cfg.job_digest).refused)
      return differs(refused->what, refused->theirs, refused->ours, refused->fix);
    return std::nullopt;
  }

  // What differs between `j`'s worker command and this node's but may (paths, per-node keys):
  // one line, for the joining node and, once per kind of difference, for this one. "" = none.
  std::string note_for(const msg::Join& j, const std::string& hosting_host) {
    const auto noted = compare_job_digests(j.config, cfg.job_digest).noted;
    if (noted.empty()) return "";
    std::vector<std::string> parts;
    std::string kind, fix;
    for (const auto& d : noted) {
      parts.push_back(fmt::format("{} on {}, but {} on {}", d.theirs, j.host, d.ours, hosting_host));
      kind += d.what + '\n';
      if (fix.empty() && (cfg.max_restarts > 0 || elastic())) fix = d.fix;
    }
    std::string line = fmt::format(
        "the worker command differs between nodes only in what does not change the math: {} (allowed; "
        "docs/distributed.md, \"What the nodes must agree on\"){}",
        fmt::join(parts, "; "), fix.empty() ? "" : "; " + fix);
    if (noted_kinds.insert(kind).second) log("note: " + line);
    return line;
  }

  void on_join(Pending& p, const msg::Join& j) {
    if (auto r = refusal(j)) return refuse(p.ch, r->message, r->hint);
    const std::string hosting_host = [&] {
      for (const auto& m : members)
        if (m->hosting) return m->host;
      return std::string("the hosting node");
    }();
    if (auto diff = difference(j, hosting_host)) {
      std::string hint = diff->second;
      refuse(p.ch, diff->first, hint);
      log(diff->first);
      if (phase == Phase::kJoining) {  // the job cannot form: everyone stops. A late joiner alone is refused.
        broadcast(msg::Abort{diff->first, hint});
        phase = Phase::kFinished;
      }
      return;
    }
    auto owned = std::make_unique<Member>();
    Member& m = *owned;
    m.ch = std::move(p.ch);
    m.host = j.host;
    m.addr = j.addr;
    m.peer = peer_address(m.ch.fd());
    m.server_addr = local_address(m.ch.fd());
    m.addr_given = j.addr_given;
    if (m.addr.empty()) m.addr = m.peer;
    m.nproc = std::max(1, j.nproc);
    m.free_port = j.free_port;
    m.pid = j.pid;
    m.hosting = j.hosting;
    m.last_heard = Clock::now();
    watch(&m, EPOLL_CTL_MOD);  // its events now point at the member
    const bool waiting = phase != Phase::kJoining;
    m.state.to(waiting ? MemberState::kWaiting : MemberState::kJoined);
    members.push_back(std::move(owned));
    last_arrival = Clock::now();
    // The ack lets a node that waits for the others tell "still joining" from "that endpoint
    // is not a trainbox rendezvous" when join_timeout passes.
    m.ch.send(msg::Joined{static_cast<int>(members.size()), cfg.nnodes, waiting, note_for(j, hosting_host)});
    if (waiting) {
      log(fmt::format("{} joined the running job; admitted at the next restart boundary", describe(m)));
      return;
    }
    const int n = static_cast<int>(members.size());
    if (n == max_nodes()) {
      assign();
    } else if (n >= cfg.nnodes && !last_call) {  // elastic: MIN are here; the rest have last_call to come
      last_call = Clock::now() + seconds(cfg.rdzv.last_call_s);
    }
  }

  // The attempt's membership: the lost ones dropped, waiting ones admitted (up to MAX), node ranks
  // given in order, and one `assign` line to each (attempt 0, or an elastic restart's attempt).
  void assign() {
    std::erase_if(members, [](const auto& m) { return m->is(MemberState::kGone); });
    int room = max_nodes() - active();
    for (auto& m : members)
      if (room > 0 && m->state.to(MemberState::kJoined)) --room;  // kWaiting -> kJoined: admitted
    // The hosting launcher is node 0: its address is the endpoint's, which every node has
    // just proven it can reach. The rest keep their order: node rank, then join order.
    std::stable_partition(members.begin(), members.end(), [](const auto& m) { return !m->is(MemberState::kWaiting); });
    std::stable_partition(members.begin(), members.end(), [](const auto& m) { return m->hosting; });
    const int n = active();
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
    a.attempt = attempt;
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
    phase = Phase::kRunning;
    last_call.reset();
    attempt_started = Clock::now();
  }

  // Elastic: whether the next attempt's members differ from this one's.
  bool membership_changes() const {
    const bool lost =
        std::any_of(members.begin(), members.end(), [](const auto& m) { return m->is(MemberState::kGone); });
    const bool admit = active() < max_nodes() && std::any_of(members.begin(), members.end(), [](const auto& m) {
                         return m->is(MemberState::kWaiting);
                       });
    return lost || admit;
  }

  // A restart's stop is complete once every member of the attempt still here has stopped.
  void maybe_restart() {
    if (phase != Phase::kStopping || !restart) return;
    if (!every_active_is(MemberState::kStopped)) return;
    ++attempt;
    if (active() == 0) {  // nobody left to restart (an elastic job whose members all went)
      phase = Phase::kFinished;
      return;
    }
    if (membership_changes()) {
      ++changes;
      assign();  // the new world's `assign` lines, with this attempt's number
      return;
    }
    for (auto& o : members)
      if (o->active()) o->state.to(MemberState::kRunning);  // kStopped -> kRunning: the same nodes again
    phase = Phase::kRunning;
    attempt_started = Clock::now();
    broadcast(msg::Start{attempt, members[0]->free_port});
  }

  // --- running ---
  // A stop for every node: the attempt ends (and, with `restart`, a new one follows).
  void stop_all(bool restart_after, decltype(msg::Stop::why) why) {
    restart = restart_after;
    phase = Phase::kStopping;
    broadcast(msg::Stop{attempt, restart_after, std::move(why)});
  }
  bool stoppable() const { return phase == Phase::kRunning || (phase == Phase::kStopping && restart); }
  bool every_active_is(MemberState s) const {
    return std::all_of(members.begin(), members.end(), [&](const auto& o) { return !o->active() || o->is(s); });
  }

  void on_message(Member& m, const msg::Message& message) {
    m.last_heard = Clock::now();
    if (const auto* r = std::get_if<msg::Ranks>(&message)) {  // for the others' stall verdicts: relayed
      if (phase == Phase::kRunning && r->attempt == attempt) broadcast(message, &m);
    } else if (const auto* f = std::get_if<msg::Failed>(&message)) {
      if (phase != Phase::kRunning || f->attempt != attempt) return;
      // A launcher that could not start its workers (rank -1) is gone: no restart helps.
      stop_all(attempt < cfg.max_restarts && f->cause.rank >= 0, f->cause);
    } else if (const auto* i = std::get_if<msg::Interrupted>(&message)) {
      if (stoppable()) stop_all(false, msg::SignalElsewhere{i->signal, m.node_rank, m.host});
    } else if (const auto* d = std::get_if<msg::Done>(&message)) {
      if (phase != Phase::kRunning || d->attempt != attempt) return;
      m.state.to(MemberState::kDone);  // refused for a repeated done: nothing changes
      if (every_active_is(MemberState::kDone)) {
        broadcast(msg::End{0});
        phase = Phase::kFinished;
      }
    } else if (const auto* s = std::get_if<msg::Stopped>(&message)) {
      if (phase != Phase::kStopping || s->attempt != attempt) return;
      // A second stop (a node lost during a restart's stop) finds it kStopped already: it stays.
      m.state.to(MemberState::kStopped);
      m.free_port = s->free_port;
      maybe_restart();
    }
    // heartbeat: being heard is all it says; the others are not a launcher's to send
  }

  void on_lost(Member& m, const std::string& why) {
    const LostNode lost{m.node_rank, m.host, m.addr, seconds_since(m.last_heard), why};
    const bool waiting = m.is(MemberState::kWaiting);
    m.state.to(MemberState::kGone);
    // Best effort, for a node that was only frozen (SIGSTOP, a paused VM): when it wakes
    // it reads why it was dropped instead of finding the rendezvous gone.
    if (stoppable()) m.ch.send(msg::Stop{attempt, false, lost});
    m.ch.close(why);
    if (phase == Phase::kJoining || waiting) {  // not part of the job yet: it may come back
      if (waiting) log(fmt::format("{}, waiting to be admitted, left: {}", describe(m), why));
      members.erase(std::find_if(members.begin(), members.end(), [&](const auto& o) { return o.get() == &m; }));
      return;
    }
    // Elastic: the others go on at a smaller world if at least MIN remain (waiting nodes
    // included: they are admitted at this restart) and --max-restarts allows another attempt.
    const bool shrink = elastic() && remaining() >= cfg.nnodes && attempt < cfg.max_restarts;
    if (stoppable()) {
      stop_all(shrink, lost);  // every survivor hears which node went, also during a restart's stop
      maybe_restart();         // a restart that waited only for the lost one's stop goes on
    }
    if (!shrink && elastic() && phase == Phase::kStopping)
      log(remaining() < cfg.nnodes
              ? fmt::format("{} left: {} of at least {} nodes remain; the job stops", describe(m), remaining(),
                            cfg.nnodes)
              : fmt::format("{} left and --max-restarts {} is used up; the job stops", describe(m), cfg.max_restarts));
  }

  // A member's messages; a malformed one drops that launcher (the others stop: it is lost).
  void serve(Member& m, std::vector<msg::Message>& msgs) {
    msgs.clear();
    const bool open = m.ch.receive(msgs);
    for (const auto& message : msgs) on_message(m, message);
    if (open || m.is(MemberState::kGone)) return;
    if (m.ch.malformed()) {
      log(fmt::format("{} sent {}; dropping it", describe(m), m.ch.error()));
      on_lost(m, "its launcher sent " + m.ch.error());
    } else {
      on_lost(m, "its launcher closed the connection");
    }
  }

  // A connection that has not joined yet: its first message must be a join.
  void serve(Pending& p, std::vector<msg::Message>& msgs) {
    const std::string from = fmt::format("a connection from {}", peer_address(p.ch.fd()));  // before it may close
    msgs.clear();
    const bool open = p.ch.receive(msgs);
    if (p.ch.malformed()) {
      log(fmt::format("{} sent {}; dropping it", from, p.ch.error()));
    } else if (msgs.empty()) {
      if (!open) p.ch.close();
    } else if (const auto* j = std::get_if<msg::Join>(&msgs.front())) {
      on_join(p, *j);
    } else {
      log(fmt::format("{} sent '{}' before joining; dropping it", from, msg::type_of(msgs.front())));
      p.ch.close();
    }
  }

  // --- timers: heartbeats out, silence in, the join deadline ---
  void tick() {
    const auto now = Clock::now();
    if (now - last_beat >= seconds(cfg.rdzv.heartbeat_interval_s)) {
      last_beat = now;
      broadcast(msg::Heartbeat{});
    }
    // 100 ms: heartbeats and silence are measured in seconds; a tenth is precise enough. Once
    // per wake-up instead, 1024 members' heartbeats made 1024 scans of 1024 a second.
    if (now - last_scan < std::chrono::milliseconds(100)) return;
    last_scan = now;
    for (std::size_t i = 0; i < members.size(); ++i) {
      Member& m = *members[i];
      if (!m.is(MemberState::kGone) && now - m.last_heard > seconds(cfg.rdzv.heartbeat_timeout_s)) {
        on_lost(m, fmt::format("no heartbeat for {:g} s", cfg.rdzv.heartbeat_timeout_s));
        if (phase == Phase::kJoining) --i;  // erased
      }
    }
    std::erase_if(pending, [&](const auto& p) { return !p->ch || now - p->since > seconds(cfg.rdzv.read_timeout_s); });
    if (phase == Phase::kJoining && last_call && now >= *last_call) assign();  // elastic: MIN or more came
    if (phase == Phase::kRunning) admit_waiting(now);
    if (phase == Phase::kJoining && now - started > seconds(cfg.rdzv.join_timeout_s)) {
      broadcast(msg::Abort{
          fmt::format("only {} of {}{} nodes joined job '{}' at {} within join_timeout={:g}s", members.size(),
                      elastic() ? "at least " : "", cfg.nnodes, cfg.run_id, endpoint, cfg.rdzv.join_timeout_s),
          "start a launcher on every node with the same --rdzv-endpoint and --rdzv-id"});
      phase = Phase::kFinished;
    }
  }

  // Elastic: nodes waiting while the job runs are admitted by a restart once arrivals have
  // settled (last_call since the latest) and the back-off since this attempt began has passed:
  // admit_backoff, doubled with every change of membership so far (at most 60 s), so a node
  // that flaps cannot restart the job over and over; each admission is a restart and counts
  // against --max-restarts, as in torchelastic.
  void admit_waiting(Clock::time_point now) {
    std::vector<std::string> hosts;
    for (const auto& m : members)
      if (m->is(MemberState::kWaiting)) hosts.push_back(m->host);
    if (hosts.empty() || active() >= max_nodes()) return;
    const double backoff = std::min(60.0, cfg.rdzv.admit_backoff_s * std::pow(2.0, std::min(changes, 6)));
    if (now < last_arrival + seconds(cfg.rdzv.last_call_s) || now < attempt_started + seconds(backoff)) return;
    if (attempt >= cfg.max_restarts) {
      if (!admission_capped_noted)
        log(fmt::format("{} waiting: not admitted, --max-restarts {} is used up",
                        fmt::format("{} node{}", hosts.size(), hosts.size() == 1 ? "" : "s"), cfg.max_restarts));
      admission_capped_noted = true;
      return;
    }
    log(fmt::format("admitting {}: every node restarts at the new world", fmt::join(hosts, ", ")));
    stop_all(true, msg::Admitting{hosts});
  }

  void accept_all() {
    for (;;) {
      UniqueFd c(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!c) break;
      auto p = std::make_unique<Pending>();
      p->ch = JsonChannel(std::move(c));
      p->since = Clock::now();
      watch(p.get(), EPOLL_CTL_ADD);
      pending.push_back(std::move(p));
    }
  }

  // One ready socket. A member erased while serving (one lost while joining) has no later event
  // in the same batch: epoll reports a socket at most once per wait. Pending ones are erased by tick().
  void dispatch(const epoll_event& ev, std::vector<msg::Message>& msgs) {
    if (ev.data.ptr == &wake) {
      std::uint64_t v;
      (void)!read(wake.get(), &v, sizeof v);
    } else if (ev.data.ptr == &listener) {
      accept_all();
    } else if (auto* peer = static_cast<Peer*>(ev.data.ptr); peer->is(MemberState::kConnected)) {
      if (peer->ch) serve(static_cast<Pending&>(*peer), msgs);
    } else if (auto& m = static_cast<Member&>(*peer); !m.is(MemberState::kGone)) {
      if (ev.events & EPOLLOUT) m.ch.flush();
      if (ev.events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) serve(m, msgs);
    }
  }

  void loop() {
    std::vector<epoll_event> ready(256);
    std::vector<msg::Message> msgs;
    while (!quit) {
      if (finishing) {
        bool quiet = std::none_of(members.begin(), members.end(), [](const auto& m) { return m->ch.wants_write(); });
        if (quiet || Clock::now() >= finish_by) break;
      }
      // 100 ms: tick()'s timers are in seconds.
      const int n = epoll_wait(epoll.get(), ready.data(), static_cast<int>(ready.size()), 100);
      if (n < 0 && errno != EINTR) break;
      for (int i = 0; i < n; ++i) dispatch(ready[static_cast<std::size_t>(i)], msgs);
      tick();
    }
  }
};

std::unique_ptr<RendezvousServer> RendezvousServer::try_host(const RunConfig& cfg) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  if (cfg.rdzv.is_host == false) return nullptr;
  addrinfo* res = nullptr;
  if (getaddrinfo(cfg.rdzv.host.c_str(), std::to_string(cfg.rdzv.port).c_str(), &hints, &res) != 0) return nullptr;
  auto bound = [](const sockaddr* sa, socklen_t len) {
    UniqueFd s(socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s) return UniqueFd();
    int one = 1, zero = 0;
    setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // a previous job's TIME_WAIT is no owner
    if (sa->sa_family == AF_INET6) setsockopt(s.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    // SOMAXCONN (the kernel caps it at net.core.somaxconn): with 128, 1024 launchers started
    // together overflow the accept queue, and a dropped SYN costs its node 1 s, then 3 s.
    if (bind(s.get(), sa, len) != 0 || listen(s.get(), SOMAXCONN) != 0) return UniqueFd();
    return s;
  };
  // Decision: a name that resolves to loopback here (Debian maps the host name to 127.0.1.1)
  // while the user did not write a loopback address or "localhost" is still this machine's
  // name to the other hosts: listen on every interface, or they could never reach it.
  // --rdzv-conf is_host=1 (torchrun's) hosts whatever HOST is: behind NAT or a Kubernetes
  // service the address others use is not one this machine can bind.
  const std::string& h = cfg.rdzv.host;
  const bool literal_loopback = is_loopback_host(h);  // "localhost" too
  const bool forced = cfg.rdzv.is_host.value_or(false);
  UniqueFd fd;
  for (addrinfo* ai = res; ai && !fd; ai = ai->ai_next) {
    char text[NI_MAXHOST] = {};
    getnameinfo(ai->ai_addr, ai->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST);
    fd = forced ? UniqueFd() : bound(ai->ai_addr, ai->ai_addrlen);
    if (forced || (fd && is_loopback_host(text) && !literal_loopback)) {
      fd.reset();  // it is ours: now the wildcard, same port
      sockaddr_in6 any6{};
      any6.sin6_family = AF_INET6;
      any6.sin6_port = htons(static_cast<uint16_t>(cfg.rdzv.port));
      any6.sin6_addr = in6addr_any;
      fd = bound(reinterpret_cast<sockaddr*>(&any6), sizeof any6);
      if (!fd) {
        sockaddr_in any4{};
        any4.sin_family = AF_INET;
        any4.sin_port = htons(static_cast<uint16_t>(cfg.rdzv.port));
        any4.sin_addr.s_addr = htonl(INADDR_ANY);
        fd = bound(reinterpret_cast<sockaddr*>(&any4), sizeof any4);
      }
    }
  }
  freeaddrinfo(res);
  if (!fd) return nullptr;  // not this machine's address, or someone here listens already

  auto st = std::make_unique<State>();
  st->cfg = cfg;
  st->listener = std::move(fd);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(st->listener.get(), reinterpret_cast<sockaddr*>(&ss), &len);
  st->port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  st->endpoint = fmt::format("{}:{}", cfg.rdzv.host, st->port);  // the bound port (port 0 in tests)
  st->wake.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!st->wake) throw SystemError("cannot create an eventfd for the rendezvous: " + errno_text(errno));
  st->epoll.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!st->epoll) throw SystemError("cannot create an epoll instance for the rendezvous: " + errno_text(errno));
  for (auto [fd, tag] : {std::pair{st->wake.get(), static_cast<void*>(&st->wake)},
                         std::pair{st->listener.get(), static_cast<void*>(&st->listener)}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = tag;
    if (epoll_ctl(st->epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
      throw SystemError("cannot watch the rendezvous socket: " + errno_text(errno));
  }
  State* raw = st.get();
  try {
    st->thread = std::thread([raw] { raw->loop(); });
    // Named for `top -H` and for bench/rendezvous_scale.sh, which reads its CPU time by this name.
    pthread_setname_np(st->thread.native_handle(), "tb-rdzv-server");
  } catch (const std::system_error& e) {
    throw SystemError(fmt::format("cannot start the rendezvous thread: {}", e.what()));
  }
  return std::unique_ptr<RendezvousServer>(new RendezvousServer(std::move(st)));
}

RendezvousServer::RendezvousServer(std::unique_ptr<State> s) : s_(std::move(s)) {}

RendezvousServer::~RendezvousServer() {
  if (!s_) return;
  s_->quit = true;
  std::uint64_t one = 1;
  (void)!write(s_->wake.get(), &one, sizeof one);
  if (s_->thread.joinable()) s_->thread.join();
}

int RendezvousServer::port() const { return s_->port; }

void RendezvousServer::finish(double linger_s) {
  s_->finish_by = Clock::now() + seconds(linger_s);
  s_->finishing = true;
  std::uint64_t one = 1;
  (void)!write(s_->wake.get(), &one, sizeof one);
  if (s_->thread.joinable()) s_->thread.join();
}

}  // namespace trainbox::launch
