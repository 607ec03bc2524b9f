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
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>
#include <tuple>
#include <variant>

#include <fmt/format.h>

#include <trainbox/util/clock.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/net.h>
#include <trainbox/util/strings.h>

#include "channel.h"
#include "rdzv_admission.h"
#include "rdzv_roster.h"
#include "rdzv_rounds.h"
#include "rdzv_states.h"

namespace trainbox::launch {

using Clock = std::chrono::steady_clock;

// --- the server: the sockets and the message handlers. Who is there: rdzv_roster.h; whether a
// join is admitted: rdzv_admission.h; the attempts and the restart decision: rdzv_rounds.h ---
using rdzv::Member;
using rdzv::Peer;
using rdzv::Pending;
using rdzv::Phase;

struct RendezvousServer::State {
  State(const RunConfig& c, UniqueFd listening, int bound_port)
      : cfg(c),
        endpoint(fmt::format("{}:{}", c.rdzv.host, bound_port)),  // the bound port (port 0 in tests)
        listener(std::move(listening)),
        port(bound_port) {}

  const RunConfig cfg;
  const std::string endpoint;  // "host:port" as the user wrote it, for messages
  UniqueFd listener, wake, epoll;
  int port = 0;
  std::thread thread;
  std::atomic<bool> quit{false};
  std::atomic<bool> finishing{false};
  Clock::time_point finish_by{};

  rdzv::Roster roster;
  rdzv::Admission admission{cfg, endpoint};
  rdzv::Rounds rounds{cfg, endpoint, roster};
  Clock::time_point last_beat = Clock::now(), last_scan = Clock::now();

  void log(const std::string& line) const { rdzv::log_line(endpoint, line); }

  // Every readiness change of `p`'s socket, edge-triggered: the loop reads and writes until
  // EAGAIN (JsonChannel does), so nothing is missed, and idle sockets cost nothing per wake-up.
  void watch(Peer* p, int op) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.ptr = p;
    if (epoll_ctl(epoll.get(), op, p->ch.fd(), &ev) != 0) p->ch.close("epoll_ctl: " + errno_text(errno));
  }

  // --- joining ---
  void on_join(Pending& p, const msg::Join& j) {
    const rdzv::JobStanding job{rounds.is(Phase::kJoining), rounds.stoppable(), roster.active(), roster.remaining()};
    if (auto r = admission.refusal(j, job)) return (void)p.ch.send(*r);
    const std::string hosting_host = roster.hosting_host();
    if (auto diff = admission.difference(j, hosting_host)) {
      p.ch.send(msg::Refuse{diff->first, diff->second});
      log(diff->first);
      // The job cannot form: everyone stops. A late joiner alone is refused.
      if (rounds.is(Phase::kJoining)) rounds.abort(msg::Abort{diff->first, diff->second});
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
    const bool waiting = !rounds.is(Phase::kJoining);
    m.state.to(waiting ? MemberState::kWaiting : MemberState::kJoined);
    roster.members.push_back(std::move(owned));
    // The ack lets a node that waits for the others tell "still joining" from "that endpoint
    // is not a trainbox rendezvous" when join_timeout passes.
    m.ch.send(
        msg::Joined{static_cast<int>(roster.members.size()), cfg.nnodes, waiting, admission.note_for(j, hosting_host)});
    if (waiting) log(fmt::format("{} joined the running job; admitted at the next restart boundary", describe(m)));
    rounds.joined(waiting);
  }

  // --- running ---
  void on_message(Member& m, const msg::Message& message) {
    m.last_heard = Clock::now();
    const bool running = rounds.is(Phase::kRunning);
    const int attempt = rounds.attempt();
    if (const auto* r = std::get_if<msg::Ranks>(&message)) {  // for the others' stall verdicts: relayed
      if (running && r->attempt == attempt) roster.broadcast(message, &m);
    } else if (const auto* f = std::get_if<msg::Failed>(&message)) {
      if (!running || f->attempt != attempt) return;
      // A launcher that could not start its workers (rank -1) is gone: no restart helps.
      rounds.stop_all(attempt < cfg.max_restarts && f->cause.rank >= 0, f->cause);
    } else if (const auto* i = std::get_if<msg::Interrupted>(&message)) {
      if (rounds.stoppable()) rounds.stop_all(false, msg::SignalElsewhere{i->signal, m.node_rank, m.host});
    } else if (const auto* d = std::get_if<msg::Done>(&message)) {
      if (!running || d->attempt != attempt) return;
      m.state.to(MemberState::kDone);  // refused for a repeated done: nothing changes
      if (roster.every_active_is(MemberState::kDone)) rounds.end();
    } else if (const auto* s = std::get_if<msg::Stopped>(&message)) {
      if (!rounds.is(Phase::kStopping) || s->attempt != attempt) return;
      // A second stop (a node lost during a restart's stop) finds it kStopped already: it stays.
      m.state.to(MemberState::kStopped);
      m.free_port = s->free_port;
      rounds.maybe_restart();
    }
    // heartbeat: being heard is all it says; the others are not a launcher's to send
  }

  void on_lost(Member& m, const std::string& why) {
    const LostNode lost{m.node_rank, m.host, m.addr, seconds_since(m.last_heard), why};
    const bool waiting = m.is(MemberState::kWaiting);
    m.state.to(MemberState::kGone);
    // Best effort, for a node that was only frozen (SIGSTOP, a paused VM): when it wakes
    // it reads why it was dropped instead of finding the rendezvous gone.
    if (rounds.stoppable()) m.ch.send(msg::Stop{rounds.attempt(), false, lost});
    m.ch.close(why);
    if (rounds.is(Phase::kJoining) || waiting) {  // not part of the job yet: it may come back
      if (waiting) log(fmt::format("{}, waiting to be admitted, left: {}", describe(m), why));
      roster.erase(m);
      return;
    }
    // Elastic: the others go on at a smaller world if at least MIN remain (waiting nodes
    // included: they are admitted at this restart) and --max-restarts allows another attempt.
    const int remaining = roster.remaining();
    const bool shrink = rounds.elastic() && remaining >= cfg.nnodes && rounds.attempt() < cfg.max_restarts;
    if (rounds.stoppable()) {
      rounds.stop_all(shrink, lost);  // every survivor hears which node went, also during a restart's stop
      rounds.maybe_restart();         // a restart that waited only for the lost one's stop goes on
    }
    if (!shrink && rounds.elastic() && rounds.is(Phase::kStopping))
      log(remaining < cfg.nnodes
              ? fmt::format("{} left: {} of at least {} nodes remain; the job stops", describe(m), remaining,
                            cfg.nnodes)
              : fmt::format("{} left and --max-restarts {} is used up; the job stops", describe(m), cfg.max_restarts));
  }

  static std::string describe(const Member& m) { return rdzv::Roster::describe(m); }

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

  // --- timers: heartbeats out, silence in, then the rounds' (last_call, admission, the join deadline) ---
  void tick() {
    const auto now = Clock::now();
    if (now - last_beat >= seconds(cfg.rdzv.heartbeat_interval_s)) {
      last_beat = now;
      roster.broadcast(msg::Heartbeat{});
    }
    // 100 ms: heartbeats and silence are measured in seconds; a tenth is precise enough. Once
    // per wake-up instead, 1024 members' heartbeats made 1024 scans of 1024 a second.
    if (now - last_scan < std::chrono::milliseconds(100)) return;
    last_scan = now;
    auto& members = roster.members;
    for (std::size_t i = 0; i < members.size(); ++i) {
      Member& m = *members[i];
      if (!m.is(MemberState::kGone) && now - m.last_heard > seconds(cfg.rdzv.heartbeat_timeout_s)) {
        on_lost(m, fmt::format("no heartbeat for {:g} s", cfg.rdzv.heartbeat_timeout_s));
        if (rounds.is(Phase::kJoining)) --i;  // erased
      }
    }
    std::erase_if(roster.pending,
                  [&](const auto& p) { return !p->ch || now - p->since > seconds(cfg.rdzv.read_timeout_s); });
    rounds.on_timer(now);
  }

  void accept_all() {
    for (;;) {
      UniqueFd c(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!c) break;
      auto p = std::make_unique<Pending>();
      p->ch = JsonChannel(std::move(c));
      p->since = Clock::now();
      watch(p.get(), EPOLL_CTL_ADD);
      roster.pending.push_back(std::move(p));
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
      if (finishing && (roster.quiet() || Clock::now() >= finish_by)) break;
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

  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
  const int bound_port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                        : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  auto st = std::make_unique<State>(cfg, std::move(fd), bound_port);
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
