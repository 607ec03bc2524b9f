// A launcher's end of the control channel (launch/rendezvous.h): join, heartbeats, messages.
#include <trainbox/launch/rendezvous.h>

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <trainbox/launch/ports.h>
#include <trainbox/util/errors.h>

#include "channel.h"

namespace trainbox::launch {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {
Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::min(s, 1e9)));
}
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

struct ControlClient::Impl {
  RunConfig cfg;
  bool hosting = false;
  std::string hostname, endpoint;
  Assignment assignment;

  // --- shared with the heartbeat thread: everything below, under `mu` ---
  // Why a thread: the launcher's main thread can block for as long as the console does
  // (`trainbox run … | less`, a paused terminal) — its workers stall then, as under any
  // launcher, but the node must not be declared lost and the job killed for it.
  std::mutex mu;
  std::condition_variable wake;
  std::thread beat;
  bool quit = false;
  JsonChannel ch;
  Clock::time_point last_sent{}, last_heard{};
  bool lost = false, closing = false;
  std::string lost_why;

  void start_heartbeats() {
    beat = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu);
      const auto interval = seconds(cfg.rdzv.heartbeat_interval_s);
      while (!quit) {
        wake.wait_until(lock, last_sent + interval);
        if (!quit) heartbeat_if_due();
      }
    });
  }
  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      quit = true;
    }
    wake.notify_all();
    if (beat.joinable()) beat.join();
  }

  void heartbeat_if_due() {
    if (ch && Clock::now() - last_sent >= seconds(cfg.rdzv.heartbeat_interval_s)) send({{"type", "heartbeat"}});
  }
  void send(const json& msg) {
    last_sent = Clock::now();
    ch.send(msg);
  }
  void check_silence() {
    if (!lost && !closing && Clock::now() - last_heard > seconds(cfg.rdzv.heartbeat_timeout_s)) {
      lost = true;
      lost_why = fmt::format("no heartbeat for {:g} s", cfg.rdzv.heartbeat_timeout_s);
    }
  }
  // Waits up to `ms` for the channel (and `extra_fd`); returns the server's messages.
  std::vector<json> pump(int ms, int extra_fd, const std::function<void()>& on_extra) {
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
    std::vector<json> msgs;
    if (fds[0].revents & POLLOUT) ch.flush();
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      bool open = ch.receive(msgs);
      if (!msgs.empty()) last_heard = Clock::now();
      if (!open && !closing) {
        lost = true;
        lost_why = "its launcher closed the connection (" + ch.error() + ")";
      }
    }
    heartbeat_if_due();
    return msgs;
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
  const std::string addr = r.local_addr.empty() ? local_address(p.ch.fd()) : r.local_addr;
  int free_port = 0;
  if (p.hosting) free_port = pick_free_port("0.0.0.0");  // node 0's: the first MASTER_PORT
  p.last_heard = Clock::now();
  p.send({{"type", "join"},
          {"version", kRdzvProtocolVersion},
          {"run_id", p.cfg.run_id},
          {"nnodes", p.cfg.nnodes},
          {"max_restarts", p.cfg.max_restarts},
          {"nproc", p.cfg.nproc_per_node},
          {"host", p.hostname},
          {"addr", addr},
          {"addr_given", !r.local_addr.empty()},
          {"hosting", p.hosting},
          {"free_port", free_port},
          {"pid", static_cast<long long>(getpid())}});
  lock.unlock();
  p.start_heartbeats();

  // --- wait for the others ---
  int joined = 0;
  for (;;) try {
      auto msgs = p.pump(ms_until(deadline, 100), extra_fd, on_extra);
      for (const auto& m : msgs) {
        const std::string type = m["type"].get<std::string>();
        if (type == "joined") {
          joined = m.value("count", 0);
        } else if (type == "refuse" || type == "abort") {
          throw UsageError(fmt::format("{}{}", type == "refuse" ? "" : "rendezvous aborted: ", m.value("message", "?")),
                           m.value("hint", hint));
        } else if (type == "assign") {
          Assignment& a = p.assignment;
          a.node_rank = m.value("node_rank", 0);
          a.nnodes = m.value("nnodes", 1);
          a.world_size = m.value("world_size", 1);
          a.rank_offset = m.value("rank_offset", 0);
          a.master_addr = m.value("master_addr", "");
          a.master_port = m.value("master_port", 0);
          for (const auto& n : m.value("nodes", json::array()))
            a.nodes.push_back(
                {n.value("node_rank", 0), n.value("host", "?"), n.value("addr", "?"), n.value("nproc", 1)});
          return a;
        }
      }
      std::unique_lock<std::mutex> state(p.mu);
      if (p.lost)
        throw UsageError(
            fmt::format("the rendezvous at {} went away while nodes were joining: {}", p.endpoint, p.lost_why), hint);
      if (joined > 0) p.check_silence();
      state.unlock();
      if (Clock::now() >= deadline) {
        if (joined == 0)
          throw UsageError(fmt::format("{} never answered the join within join_timeout={:g}s: is it a trainbox run "
                                       "rendezvous?",
                                       p.endpoint, r.join_timeout_s),
                           hint);
        throw UsageError(fmt::format("not all {} nodes joined job '{}' at {} within join_timeout={:g}s", p.cfg.nnodes,
                                     p.cfg.run_id, p.endpoint, r.join_timeout_s),
                         hint);
      }
    } catch (const json::exception& e) {  // a field of the wrong type: not a trainbox rendezvous
      throw UsageError(
          fmt::format("{} answered the join with a malformed message ({}): is it a trainbox run rendezvous?",
                      p.endpoint, e.what()),
          hint);
    }
}

int ControlClient::fd() const {
  std::lock_guard<std::mutex> lock(p_->mu);
  return p_->ch.fd();
}

short ControlClient::poll_events() const {
  std::lock_guard<std::mutex> lock(p_->mu);
  return static_cast<short>(POLLIN | (p_->ch.wants_write() ? POLLOUT : 0));
}

std::vector<ControlClient::Message> ControlClient::service(short revents) {
  Impl& p = *p_;
  std::lock_guard<std::mutex> lock(p.mu);
  std::vector<json> out;
  if (revents & POLLOUT) p.ch.flush();
  if (revents & (POLLIN | POLLHUP | POLLERR)) {
    bool open = p.ch.receive(out);
    if (!out.empty()) p.last_heard = Clock::now();
    if (!open && !p.closing && !p.lost) {
      p.lost = true;
      p.lost_why = "its launcher closed the connection";
    }
  }
  out.erase(std::remove_if(out.begin(), out.end(), [](const json& m) { return m["type"] == "heartbeat"; }), out.end());
  p.heartbeat_if_due();
  p.check_silence();
  return out;
}

int ControlClient::timeout_ms() const {
  Impl& p = *p_;
  std::lock_guard<std::mutex> lock(p.mu);
  if (!p.ch) return 1000;  // closed: nothing to send or wait for (and no busy loop)
  auto next = p.last_sent + seconds(p.cfg.rdzv.heartbeat_interval_s);
  if (!p.lost && !p.closing) next = std::min(next, p.last_heard + seconds(p.cfg.rdzv.heartbeat_timeout_s));
  return ms_until(next, 1000) + 1;
}

bool ControlClient::server_lost() const {
  std::lock_guard<std::mutex> lock(p_->mu);
  return p_->lost && !p_->closing;
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
  p_->closing = true;
}

void ControlClient::send(const nlohmann::json& msg) {
  std::lock_guard<std::mutex> lock(p_->mu);
  p_->send(msg);
}

const Assignment& ControlClient::assignment() const { return p_->assignment; }

}  // namespace trainbox::launch
