// The c10d rendezvous and control server (launch/rendezvous.h): one thread, one poll loop.
#include <trainbox/launch/rendezvous.h>

#include <fcntl.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <trainbox/util/errors.h>

#include "channel.h"

namespace trainbox::launch {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// --- message pieces ---
namespace {
// j[key] when it holds a T, else `fallback`: a malformed message must not throw.
template <class T>
T get_or(const json& j, const char* key, T fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if constexpr (std::is_same_v<T, std::string>) {
    return it->is_string() ? it->get<std::string>() : fallback;
  } else if constexpr (std::is_same_v<T, bool>) {
    return it->is_boolean() ? it->get<bool>() : fallback;
  } else {
    return it->is_number() ? it->get<T>() : fallback;
  }
}
}  // namespace

json RootCause::to_json() const {
  return {{"host", host},
          {"node_rank", node_rank},
          {"rank", rank},
          {"local_rank", local_rank},
          {"pid", pid},
          {"exit_code", exit_code},
          {"signal", signal},
          {"time", time},
          {"stderr_tail", stderr_tail},
          {"error_file", error_file},
          {"error_message", error_message},
          {"traceback", traceback}};
}

RootCause RootCause::from_json(const json& j) {
  RootCause c;
  c.host = get_or<std::string>(j, "host", "?");
  c.node_rank = get_or(j, "node_rank", -1);
  c.rank = get_or(j, "rank", -1);
  c.local_rank = get_or(j, "local_rank", -1);
  c.pid = get_or(j, "pid", 0LL);
  c.exit_code = get_or(j, "exit_code", 1);
  c.signal = get_or(j, "signal", 0);
  c.time = get_or(j, "time", std::int64_t{0});
  if (j.is_object() && j.contains("stderr_tail") && j["stderr_tail"].is_array())
    for (const auto& l : j["stderr_tail"])
      if (l.is_string()) c.stderr_tail.push_back(l.get<std::string>());
  c.error_file = get_or<std::string>(j, "error_file", "");
  c.error_message = get_or<std::string>(j, "error_message", "");
  c.traceback = get_or<std::string>(j, "traceback", "");
  return c;
}

std::string LostNode::describe() const {
  return fmt::format("lost node {} ({}, {}, last heard {:.1f} s ago)", node_rank, host, addr, last_heard_s);
}

json LostNode::to_json() const {
  return {{"node_rank", node_rank}, {"host", host}, {"addr", addr}, {"last_heard_s", last_heard_s}, {"why", why}};
}

LostNode LostNode::from_json(const json& j) {
  LostNode l;
  l.node_rank = get_or(j, "node_rank", -1);
  l.host = get_or<std::string>(j, "host", "?");
  l.addr = get_or<std::string>(j, "addr", "?");
  l.last_heard_s = get_or(j, "last_heard_s", 0.0);
  l.why = get_or<std::string>(j, "why", "");
  return l;
}

// --- the server ---
namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::min(s, 1e9)));
}

bool is_loopback(const std::string& a) { return a.rfind("127.", 0) == 0 || a == "::1"; }

struct Member {
  JsonChannel ch;
  std::string host, addr, peer;
  std::string server_addr;  // the server's address as this member reached it
  bool addr_given = false;  // addr is its --local-addr
  int nproc = 1, node_rank = -1, free_port = 0;
  long long pid = 0;
  bool hosting = false, done = false, stopped = false, gone = false;
  Clock::time_point last_heard;
};

struct Pending {
  JsonChannel ch;
  Clock::time_point since;
};

enum class Phase { kJoining, kRunning, kStopping, kFinished };

}  // namespace

struct RendezvousServer::State {
  RunConfig cfg;
  std::string endpoint;  // "host:port" as the user wrote it, for messages
  UniqueFd listener, wake;
  int port = 0;
  std::thread thread;
  std::atomic<bool> quit{false};
  std::atomic<bool> finishing{false};
  Clock::time_point finish_by{};

  Phase phase = Phase::kJoining;
  bool restart = false;  // while kStopping: whether a new attempt follows
  int attempt = 0;
  Clock::time_point started = Clock::now(), last_beat = Clock::now();
  std::vector<Member> members;  // by join order until assigned, then by node rank
  std::vector<Pending> pending;

  void log(const std::string& line) const {
    std::fputs(fmt::format("trainbox run: rendezvous {}: {}\n", endpoint, line).c_str(), stderr);
  }

  void broadcast(const json& msg) {
    for (auto& m : members)
      if (!m.gone) m.ch.send(msg);
  }

  void abort_all(const std::string& why) {
    broadcast({{"type", "abort"}, {"message", why}});
    phase = Phase::kFinished;
  }

  // --- joining ---
  void refuse(JsonChannel& ch, const std::string& message, const std::string& hint) {
    ch.send({{"type", "refuse"}, {"message", message}, {"hint", hint}});
  }

  void on_join(Pending& p, const json& j) {
    const std::string host = j.value("host", "?");
    const std::string run_id = j.value("run_id", "");
    if (j.value("version", 0) != kRdzvProtocolVersion)
      return refuse(p.ch,
                    fmt::format("the rendezvous at {} speaks protocol {}, node {} speaks {}", endpoint,
                                kRdzvProtocolVersion, host, j.value("version", 0)),
                    "run the same trainbox version on every node");
    if (run_id != cfg.run_id)
      return refuse(p.ch,
                    fmt::format("the rendezvous at {} belongs to job '{}', not '{}'", endpoint, cfg.run_id, run_id),
                    "pass the same --rdzv-id on every node; a second job needs its own endpoint port");
    if (phase != Phase::kJoining)
      return refuse(p.ch,
                    fmt::format("job '{}' is already running with {} nodes at {}", cfg.run_id, cfg.nnodes, endpoint),
                    "a second job needs its own --rdzv-id and endpoint port; or wait until this one ends");
    const std::string hosting_host = [&] {
      for (const auto& m : members)
        if (m.hosting) return m.host;
      return std::string("the hosting node");
    }();
    for (auto [key, ours, option] : {std::tuple{"nnodes", cfg.nnodes, "--nnodes"},
                                     std::tuple{"max_restarts", cfg.max_restarts, "--max-restarts"}}) {
      int theirs = j.value(key, -1);
      if (theirs == ours) continue;
      std::string msg =
          fmt::format("{} differs between nodes: {} {} on {}, but {} {} on {} (which hosts the rendezvous at {})",
                      option, option, theirs, host, option, ours, hosting_host, endpoint);
      std::string hint = fmt::format("pass the same {} on every node", option);
      refuse(p.ch, msg, hint);
      broadcast({{"type", "abort"}, {"message", msg}, {"hint", hint}});
      phase = Phase::kFinished;
      log(msg);
      return;
    }
    Member m;
    m.ch = std::move(p.ch);
    m.host = host;
    m.addr = j.value("addr", "");
    m.peer = peer_address(m.ch.fd());
    m.server_addr = local_address(m.ch.fd());
    m.addr_given = j.value("addr_given", false);
    if (m.addr.empty()) m.addr = m.peer;
    m.nproc = std::max(1, j.value("nproc", 1));
    m.free_port = j.value("free_port", 0);
    m.pid = j.value("pid", 0LL);
    m.hosting = j.value("hosting", false);
    m.last_heard = Clock::now();
    members.push_back(std::move(m));
    // The ack lets a node that waits for the others tell "still joining" from "that endpoint
    // is not a trainbox rendezvous" when join_timeout passes.
    members.back().ch.send({{"type", "joined"}, {"count", members.size()}, {"nnodes", cfg.nnodes}});
    if (static_cast<int>(members.size()) == cfg.nnodes) assign();
  }

  void assign() {
    // The hosting launcher is node 0: its address is the endpoint's, which every node has
    // just proven it can reach. The rest keep their join order.
    std::stable_partition(members.begin(), members.end(), [](const Member& m) { return m.hosting; });
    // Node 0 reached its own endpoint over loopback (its host name resolves to 127.0.1.1, as
    // Debian's /etc/hosts has it) but other hosts joined: they reached this machine at a real
    // address, and that is node 0's address as they see it.
    if (is_loopback(members[0].addr) && !members[0].addr_given)
      for (const auto& m : members)
        if (!is_loopback(m.peer)) {
          members[0].addr = m.server_addr;
          break;
        }
    int offset = 0;
    json nodes = json::array();
    for (std::size_t i = 0; i < members.size(); ++i) {
      members[i].node_rank = static_cast<int>(i);
      nodes.push_back(
          {{"node_rank", i}, {"host", members[i].host}, {"addr", members[i].addr}, {"nproc", members[i].nproc}});
    }
    const int world = [&] {
      int w = 0;
      for (const auto& m : members) w += m.nproc;
      return w;
    }();
    for (auto& m : members) {
      m.ch.send({{"type", "assign"},
                 {"node_rank", m.node_rank},
                 {"nnodes", cfg.nnodes},
                 {"world_size", world},
                 {"rank_offset", offset},
                 {"master_addr", members[0].addr},
                 {"master_port", members[0].free_port},
                 {"attempt", 0},
                 {"nodes", nodes}});
      offset += m.nproc;
    }
    phase = Phase::kRunning;
    attempt = 0;
  }

  // --- running ---
  void on_message(Member& m, const json& j) {
    m.last_heard = Clock::now();
    const std::string type = j["type"].get<std::string>();
    const int at = j.value("attempt", -1);
    if (type == "heartbeat") return;
    if (type == "ranks") {  // a node's ranks for the others' stall verdicts: relayed as is
      if (phase == Phase::kRunning && at == attempt)
        for (auto& o : members)
          if (!o.gone && &o != &m) o.ch.send(j);
      return;
    }
    if (type == "failed" && phase == Phase::kRunning && at == attempt) {
      // A launcher that could not start its workers (rank -1) is gone: no restart helps.
      restart = attempt < cfg.max_restarts && j.value("cause", json::object()).value("rank", 0) >= 0;
      phase = Phase::kStopping;
      for (auto& o : members) o.stopped = false;
      broadcast({{"type", "stop"},
                 {"attempt", attempt},
                 {"reason", "failure"},
                 {"restart", restart},
                 {"cause", j.value("cause", json::object())}});
    } else if (type == "interrupted" && (phase == Phase::kRunning || (phase == Phase::kStopping && restart))) {
      restart = false;
      phase = Phase::kStopping;
      broadcast({{"type", "stop"},
                 {"attempt", attempt},
                 {"reason", "signal"},
                 {"restart", false},
                 {"signal", j.value("signal", 15)},
                 {"node_rank", m.node_rank},
                 {"host", m.host}});
    } else if (type == "done" && phase == Phase::kRunning && at == attempt) {
      m.done = true;
      if (std::all_of(members.begin(), members.end(), [](const Member& o) { return o.done; })) {
        broadcast({{"type", "end"}, {"exit_code", 0}});
        phase = Phase::kFinished;
      }
    } else if (type == "stopped" && phase == Phase::kStopping && at == attempt) {
      m.stopped = true;
      m.free_port = j.value("free_port", 0);
      if (restart && std::all_of(members.begin(), members.end(), [](const Member& o) { return o.stopped; })) {
        ++attempt;
        for (auto& o : members) o.done = o.stopped = false;
        phase = Phase::kRunning;
        broadcast({{"type", "start"}, {"attempt", attempt}, {"master_port", members[0].free_port}});
      }
    }
  }

  void on_lost(Member& m, const std::string& why) {
    const double heard = seconds_since(m.last_heard);
    m.gone = true;
    if (phase == Phase::kRunning || (phase == Phase::kStopping && restart)) {
      // Best effort, for a node that was only frozen (SIGSTOP, a paused VM): when it wakes
      // it reads why it was dropped instead of finding the rendezvous gone.
      LostNode self{m.node_rank, m.host, m.addr, heard, why};
      m.ch.send(
          {{"type", "stop"}, {"attempt", attempt}, {"reason", "lost"}, {"restart", false}, {"lost", self.to_json()}});
    }
    m.ch.close(why);
    if (phase == Phase::kJoining) {  // not part of the job yet: it may come back
      members.erase(std::find_if(members.begin(), members.end(), [&](const Member& o) { return &o == &m; }));
      return;
    }
    if (phase == Phase::kRunning || (phase == Phase::kStopping && restart)) {
      LostNode lost{m.node_rank, m.host, m.addr, heard, why};
      restart = false;
      phase = Phase::kStopping;
      broadcast(
          {{"type", "stop"}, {"attempt", attempt}, {"reason", "lost"}, {"restart", false}, {"lost", lost.to_json()}});
    }
  }

  // --- timers: heartbeats out, silence in, the join deadline ---
  void tick() {
    const auto now = Clock::now();
    if (now - last_beat >= seconds(cfg.rdzv.heartbeat_interval_s)) {
      last_beat = now;
      broadcast({{"type", "heartbeat"}});
    }
    for (std::size_t i = 0; i < members.size(); ++i) {
      Member& m = members[i];
      if (!m.gone && now - m.last_heard > seconds(cfg.rdzv.heartbeat_timeout_s)) {
        on_lost(m, fmt::format("no heartbeat for {:g} s", cfg.rdzv.heartbeat_timeout_s));
        if (phase == Phase::kJoining) --i;  // erased
      }
    }
    pending.erase(
        std::remove_if(pending.begin(), pending.end(),
                       [&](const Pending& p) { return !p.ch || now - p.since > seconds(cfg.rdzv.read_timeout_s); }),
        pending.end());
    if (phase == Phase::kJoining && now - started > seconds(cfg.rdzv.join_timeout_s)) {
      std::string msg = fmt::format("only {} of {} nodes joined job '{}' at {} within join_timeout={:g}s",
                                    members.size(), cfg.nnodes, cfg.run_id, endpoint, cfg.rdzv.join_timeout_s);
      broadcast({{"type", "abort"},
                 {"message", msg},
                 {"hint", "start a launcher on every node with the same --rdzv-endpoint and --rdzv-id"}});
      phase = Phase::kFinished;
    }
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<json> msgs;
    while (!quit) {
      if (finishing) {
        bool quiet = std::none_of(members.begin(), members.end(), [](const Member& m) { return m.ch.wants_write(); });
        if (quiet || Clock::now() >= finish_by) break;
      }
      fds.clear();
      fds.push_back({wake.get(), POLLIN, 0});
      fds.push_back({listener.get(), POLLIN, 0});
      for (auto& p : pending) fds.push_back({p.ch.fd(), POLLIN, 0});
      for (auto& m : members)
        fds.push_back({m.gone ? -1 : m.ch.fd(), static_cast<short>(POLLIN | (m.ch.wants_write() ? POLLOUT : 0)), 0});
      // 100 ms: heartbeats and silence are measured in seconds; a tenth is precise enough.
      if (poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) break;
      if (fds[0].revents) {
        std::uint64_t v;
        (void)!read(wake.get(), &v, sizeof v);
      }
      if (fds[1].revents & POLLIN)
        for (;;) {
          UniqueFd c(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
          if (!c) break;
          pending.push_back({JsonChannel(std::move(c)), Clock::now()});
        }
      // Pending connections: the first message must be a join.
      const std::size_t npending = fds.size() - 2 - members.size();
      for (std::size_t i = 0; i < npending && i < pending.size(); ++i) {
        if (!fds[2 + i].revents) continue;
        Pending& p = pending[i];
        msgs.clear();
        bool open = p.ch.receive(msgs);
        try {
          if (!msgs.empty() && msgs.front()["type"] == "join")
            on_join(p, msgs.front());
          else if (!msgs.empty() || !open)
            p.ch.close();
        } catch (const json::exception&) {  // a field of the wrong type: not our protocol
          p.ch.close();
        }
      }
      // Members (indices are stable: members are only erased while joining, in on_lost).
      const std::size_t base = 2 + npending;
      for (std::size_t i = 0; i < members.size() && base + i < fds.size(); ++i) {
        Member& m = members[i];
        if (m.gone || !fds[base + i].revents) continue;
        if (fds[base + i].revents & POLLOUT) m.ch.flush();
        msgs.clear();
        bool open = m.ch.receive(msgs);
        try {
          for (const auto& j : msgs) on_message(m, j);
        } catch (const json::exception& e) {
          open = false;
          m.ch.close(std::string("a malformed message: ") + e.what());
        }
        if (!open && !m.gone) {
          on_lost(m, "its launcher closed the connection");
          if (phase == Phase::kJoining) break;  // erased: the indices moved
        }
      }
      pending.erase(std::remove_if(pending.begin(), pending.end(), [](const Pending& p) { return !p.ch; }),
                    pending.end());
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
    if (bind(s.get(), sa, len) != 0 || listen(s.get(), 128) != 0) return UniqueFd();
    return s;
  };
  // Decision: a name that resolves to loopback here (Debian maps the host name to 127.0.1.1)
  // while the user did not write a loopback address or "localhost" is still this machine's
  // name to the other hosts: listen on every interface, or they could never reach it.
  // --rdzv-conf is_host=1 (torchrun's) hosts whatever HOST is: behind NAT or a Kubernetes
  // service the address others use is not one this machine can bind.
  const std::string& h = cfg.rdzv.host;
  const bool literal_loopback = h == "localhost" || is_loopback(h);
  const bool forced = cfg.rdzv.is_host.value_or(false);
  UniqueFd fd;
  for (addrinfo* ai = res; ai && !fd; ai = ai->ai_next) {
    char text[NI_MAXHOST] = {};
    getnameinfo(ai->ai_addr, ai->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST);
    fd = forced ? UniqueFd() : bound(ai->ai_addr, ai->ai_addrlen);
    if (forced || (fd && is_loopback(text) && !literal_loopback)) {
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
  State* raw = st.get();
  try {
    st->thread = std::thread([raw] { raw->loop(); });
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
