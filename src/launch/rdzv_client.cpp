// A launcher's end of the control channel (launch/rendezvous.h): join, heartbeats, messages.
#include <trainbox/launch/rendezvous.h>

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <condition_variable>
#include <mutex>
#include <variant>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include <trainbox/launch/ports.h>
#include <trainbox/util/clock.h>
#include <trainbox/util/errors.h>

#include "channel.h"
#include "rdzv_states.h"

namespace trainbox::launch {

using Clock = std::chrono::steady_clock;

struct ControlClient::Impl {
  RunConfig cfg;
  bool hosting = false;
  std::string hostname, endpoint;
  Assignment assignment;
  int attempt = 0;  // the assignment's attempt (elastic: a node admitted later starts at the job's)

  // --- shared with the heartbeat thread: everything below, under `mu` ---
  // Why a thread: the launcher's main thread can block for as long as the console does
  // (`trainbox run … | less`, a paused terminal) — its workers stall then, as under any
  // launcher, but the node must not be declared lost and the job killed for it.
  std::mutex mu;
  std::condition_variable wake;
  std::thread beat;
  StateField<LinkState> link{LinkState::kUp};  // launch/rdzv_states.h: the legal moves
  JsonChannel ch;
  Clock::time_point last_sent{}, last_heard{};
  std::string lost_why;  // set with the move to kLost
  // Messages that came in the same read as the assignment (a stop already, when another
  // node failed at once): service() hands them on first instead of dropping them.
  std::vector<msg::Message> pending;

  void start_heartbeats() {
    beat = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu);
      const auto interval = seconds(cfg.rdzv.heartbeat_interval_s);
      while (!link.is(LinkState::kQuit)) {
        wake.wait_until(lock, last_sent + interval);
        if (!link.is(LinkState::kQuit)) heartbeat_if_due();
      }
    });
  }
  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      link.to(LinkState::kQuit);
    }
    wake.notify_all();
    if (beat.joinable()) beat.join();
  }

  void heartbeat_if_due() {
    if (ch && Clock::now() - last_sent >= seconds(cfg.rdzv.heartbeat_interval_s)) send(msg::Heartbeat{});
  }
  void send(const msg::Message& m) {
    last_sent = Clock::now();
    ch.send(m);
  }
  // Reads the server's messages; a closed connection or a malformed message makes it lost
  // (while joining, the why says what the socket said).
  std::vector<msg::Message> receive(bool joining) {
    std::vector<msg::Message> msgs;
    const bool open = ch.receive(msgs);
    if (!msgs.empty()) last_heard = Clock::now();
    if (!open && link.to(LinkState::kLost)) {  // only from kUp: once lost or closing, the first why stays
      lost_why = ch.malformed() ? fmt::format("the rendezvous at {} sent {}", endpoint, ch.error())
                 : joining      ? "its launcher closed the connection (" + ch.error() + ")"
                                : "its launcher closed the connection";
    }
    return msgs;
  }
  void check_silence() {
    if (link.is(LinkState::kUp) && Clock::now() - last_heard > seconds(cfg.rdzv.heartbeat_timeout_s)) {
      link.to(LinkState::kLost);
      lost_why = fmt::format("no heartbeat for {:g} s", cfg.rdzv.heartbeat_timeout_s);
    }
  }
  // Waits up to `ms` for the channel (and `extra_fd`); returns the server's messages.
  std::vector<msg::Message> pump(int ms, int extra_fd, const std::function<void()>& on_extra) {
    pollfd fds[2];
    {
      std::lock_guard<std::mutex> lock(mu);
      fds[0] = {ch.fd(), static_cast<short>(POLLIN | (ch.wants_write() ? POLLOUT : 0)), 0};
    }
    fds[1] = {extra_fd, POLLIN, 0};
    if (poll(fds, extra_fd >= 0 ? 2 : 1, ms) < 0 && errno != EINTR)
      throw SystemError("poll failed: " + errno_text(errno));
    if (extra_fd >= 0 && fds[1].revents && on_extra) on_extra();
    std::lock_guard<std::mutex> lock(mu);
    std::vector<msg::Message> msgs;
    if (fds[0].revents & POLLOUT) ch.flush();
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) msgs = receive(true);
    heartbeat_if_due();
    return msgs;
  }

  // After the join: the server's answer (refuse, abort, joined, then assign) before `deadline`.
  Assignment await_assignment(Clock::time_point deadline, int extra_fd, const std::function<void()>& on_extra,
                              const std::string& hint) {
    const auto& r = cfg.rdzv;
    int joined = 0;
    bool waiting = false;
    for (;;) {
      auto msgs = pump(ms_until(deadline, 100), extra_fd, on_extra);
      for (auto it = msgs.begin(); it != msgs.end(); ++it) {
        auto& m = *it;
        if (const auto* j = std::get_if<msg::Joined>(&m)) {
          joined = j->count;
          if (!j->note.empty()) std::fputs(("trainbox run: note: " + j->note + "\n").c_str(), stderr);
          // Elastic, the job already runs: admitted at its next restart boundary, however late
          // that is (the server's heartbeats say it is alive meanwhile).
          if (j->waiting && !waiting) {
            waiting = true;
            deadline = Clock::time_point::max();
            std::fputs(fmt::format("trainbox run: job '{}' is running; this node waits to be admitted at its next "
                                   "restart boundary\n",
                                   cfg.run_id)
                           .c_str(),
                       stderr);
          }
        }
        if (const auto* refused = std::get_if<msg::Refuse>(&m)) throw UsageError(refused->message, refused->hint);
        if (const auto* aborted = std::get_if<msg::Abort>(&m))
          throw UsageError("rendezvous aborted: " + aborted->message, aborted->hint);
        if (const auto* e = std::get_if<msg::End>(&m)) throw JobEndedWhileWaiting{e->exit_code};
        if (auto* a = std::get_if<msg::Assign>(&m)) {
          attempt = a->attempt;
          std::lock_guard<std::mutex> lock(mu);
          pending.assign(std::make_move_iterator(it + 1), std::make_move_iterator(msgs.end()));
          return std::move(a->assignment);
        }
      }
      std::unique_lock<std::mutex> state(mu);
      if (ch.malformed())
        throw UsageError(fmt::format("{} answered the join with a malformed message ({}): is it a trainbox run "
                                     "rendezvous?",
                                     endpoint, ch.error()),
                         hint);
      if (link.is(LinkState::kLost))
        throw UsageError(fmt::format("the rendezvous at {} went away while nodes were joining: {}", endpoint, lost_why),
                         hint);
      if (joined > 0) check_silence();
      state.unlock();
      if (Clock::now() < deadline) continue;
      if (joined == 0)
        throw UsageError(fmt::format("{} never answered the join within join_timeout={:g}s: is it a trainbox run "
                                     "rendezvous?",
                                     endpoint, r.join_timeout_s),
                         hint);
      throw UsageError(fmt::format("not all {} nodes joined job '{}' at {} within join_timeout={:g}s", cfg.nnodes,
                                   cfg.run_id, endpoint, r.join_timeout_s),
                       hint);
    }
  }
};

ControlClient::ControlClient(const RunConfig& cfg, bool hosting, std::string hostname) : p_(std::make_unique<Impl>()) {
  p_->cfg = cfg;
  p_->hosting = hosting;
  p_->hostname = std::move(hostname);
  p_->endpoint = fmt::format("{}:{}", cfg.rdzv.host, cfg.rdzv.port);
}

ControlClient::~ControlClient() = default;

Assignment ControlClient::join(int extra_fd, const std::function<void()>& on_extra) {
  Impl& p = *p_;
  const auto& r = p.cfg.rdzv;
  const auto start = Clock::now();
  // The server's own join deadline fires first and says how many joined; ours follows 1 s later.
  const auto deadline = start + seconds(r.join_timeout_s + 1.0);
  const std::string hint = fmt::format(
      "check that a launcher runs on the endpoint's host with the same --rdzv-endpoint and --rdzv-id, that {} is "
      "reachable from here (firewall, address), or raise --rdzv-conf join_timeout=SECONDS",
      p.endpoint);

  // --- connect, retrying while nobody listens yet (the hosting launcher may start later) ---
  std::string err;
  bool noted = false;
  UniqueFd fd;
  for (;;) {
    auto attempt_end = std::min(deadline, Clock::now() + std::chrono::seconds(2));
    fd = connect_tcp(r.host, r.port, attempt_end, err, extra_fd, on_extra);
    if (fd) break;
    if (Clock::now() >= deadline)
      throw UsageError(fmt::format("cannot reach the rendezvous at {} within join_timeout={:g}s: {}", p.endpoint,
                                   r.join_timeout_s, err),
                       hint);
    if (!noted && Clock::now() - start > std::chrono::seconds(3)) {
      noted = true;
      std::fputs(fmt::format("trainbox run: waiting for the rendezvous at {} ({}; join_timeout {:g} s)\n", p.endpoint,
                             err, r.join_timeout_s)
                     .c_str(),
                 stderr);
    }
    // 50 ms at first (launchers started together: the host is about to listen), then 250 ms.
    const int pause = Clock::now() - start < std::chrono::seconds(2) ? 50 : 250;
    pollfd pf{extra_fd, POLLIN, 0};
    if (poll(&pf, extra_fd >= 0 ? 1 : 0, ms_until(deadline, pause)) > 0 && on_extra) on_extra();
  }
  std::unique_lock<std::mutex> lock(p.mu);  // released once the heartbeat thread runs
  p.ch = JsonChannel(std::move(fd));
  msg::Join j;
  j.run_id = p.cfg.run_id;
  j.nnodes = p.cfg.nnodes;
  j.max_restarts = p.cfg.max_restarts;
  j.nproc = p.cfg.nproc_per_node;
  j.host = p.hostname;
  j.addr = r.local_addr.empty() ? local_address(p.ch.fd()) : r.local_addr;
  j.addr_given = !r.local_addr.empty();
  j.hosting = p.hosting;
  if (p.hosting) j.free_port = pick_free_port("0.0.0.0");  // node 0's: the first MASTER_PORT
  j.pid = getpid();
  j.nnodes_max = p.cfg.elastic() ? p.cfg.nnodes_max : p.cfg.nnodes;
  j.config = p.cfg.job_digest;
  p.last_heard = Clock::now();
  p.send(j);
  lock.unlock();
  p.start_heartbeats();
  p.assignment = p.await_assignment(deadline, extra_fd, on_extra, hint);
  return p.assignment;
}

int ControlClient::fd() const {
  std::lock_guard<std::mutex> lock(p_->mu);
  return p_->ch.fd();
}

short ControlClient::poll_events() const {
  std::lock_guard<std::mutex> lock(p_->mu);
  return static_cast<short>(POLLIN | (p_->ch.wants_write() ? POLLOUT : 0));
}

std::vector<msg::Message> ControlClient::service(short revents) {
  Impl& p = *p_;
  std::lock_guard<std::mutex> lock(p.mu);
  std::vector<msg::Message> out = std::exchange(p.pending, {});
  if (revents & POLLOUT) p.ch.flush();
  // Read whatever the socket holds, whether or not this poll saw it: the silence check below
  // must never judge by a poll taken before the main thread blocked (a console nobody reads
  // stalls it for seconds while the server's heartbeats queue up unread). A recv on an empty
  // non-blocking socket costs one EAGAIN.
  if ((revents & (POLLIN | POLLHUP | POLLERR)) || p.ch) {
    auto more = p.receive(false);
    out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  std::erase_if(out, [](const msg::Message& m) { return std::holds_alternative<msg::Heartbeat>(m); });
  p.heartbeat_if_due();
  p.check_silence();
  return out;
}

int ControlClient::timeout_ms() const {
  Impl& p = *p_;
  std::lock_guard<std::mutex> lock(p.mu);
  if (!p.pending.empty()) return 0;  // messages in hand: serve them now
  if (!p.ch) return 1000;            // closed: nothing to send or wait for (and no busy loop)
  auto next = p.last_sent + seconds(p.cfg.rdzv.heartbeat_interval_s);
  if (p.link.is(LinkState::kUp)) next = std::min(next, p.last_heard + seconds(p.cfg.rdzv.heartbeat_timeout_s));
  return ms_until(next, 1000) + 1;
}

bool ControlClient::server_lost() const {
  std::lock_guard<std::mutex> lock(p_->mu);
  return p_->link.is(LinkState::kLost);
}

LostNode ControlClient::lost_server() const {
  Impl& p = *p_;
  std::lock_guard<std::mutex> lock(p.mu);
  LostNode l;
  l.node_rank = 0;
  l.host = p.assignment.nodes.empty() ? p.cfg.rdzv.host : p.assignment.nodes[0].host;
  l.addr = p.assignment.nodes.empty() ? p.cfg.rdzv.host : p.assignment.nodes[0].addr;
  l.last_heard_s = seconds_since(p.last_heard);
  l.why = p.lost_why;
  return l;
}

void ControlClient::expect_close() {
  std::lock_guard<std::mutex> lock(p_->mu);
  p_->link.to(LinkState::kClosing);  // from kUp or kLost; a second call finds it closing
}

void ControlClient::send(const msg::Message& m) {
  std::lock_guard<std::mutex> lock(p_->mu);
  p_->send(m);
}

const Assignment& ControlClient::assignment() const { return p_->assignment; }

int ControlClient::attempt() const { return p_->attempt; }

}  // namespace trainbox::launch
