// rdzv_swarm — N launchers' control channels in one process, against the real rendezvous server.
//
// What it is for: the c10d control plane at scale (issue 26) without N processes. Node 0's
// RendezvousServer is started in this process exactly as node 0's launcher does
// (RendezvousServer::try_host on 127.0.0.1, port 0, its own thread); N-1 simulated launchers
// are the real ControlClient (join on a thread each, then one epoll loop calling service()
// as the launcher's own poll loop does; each keeps its own heartbeat thread). The last node
// is "quiet": it speaks the same protocol through the real JsonChannel and msg:: types, but
// its heartbeats are sent by this program, so it can go silent while keeping its socket —
// which a ControlClient, whose heartbeat thread outlives a stuck main thread on purpose, never does.
//
// It measures, with max_restarts=1 so that one job goes through every phase:
//   formation  spawning the N joins → the last node holds its assignment;
//   hb_cpu     the server thread's CPU (/proc/self/task/TID/schedstat, ns) over --cpu-seconds
//              once formed, as % of one core and ms per heartbeat interval;
//   fail_all   one node sends `failed` → every node holds the `stop`;
//   restart    every node sends `stopped` → every node holds the next attempt's `start`;
//   lost_all   the quiet node's last heartbeat → every other node holds the `stop` naming it
//              lost (heartbeat_timeout is part of it; lost_over_timeout subtracts it).
// and checks every answer (ranks a permutation, node 0 the hosting one, the root cause and the
// lost node as sent); exit 1 naming the first wrong one. Torch-free, loopback only.
//
//   rdzv_swarm --nodes 1024 [--cpu-seconds 10] [--heartbeat-interval 1] [--heartbeat-timeout 5] [--json]
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include <trainbox/launch/messages.h>
#include <trainbox/launch/rendezvous.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/unique_fd.h>

#include "launch/channel.h"

using namespace trainbox;
using namespace trainbox::launch;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  int nodes = 16;
  double cpu_s = 10, hb_interval_s = 1, hb_timeout_s = 5;
  bool json = false;
};

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "rdzv_swarm: %s\n", why.c_str());
  std::exit(1);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> double {
      if (i + 1 >= argc) fail(a + " needs a value");
      return std::atof(argv[++i]);
    };
    if (a == "--nodes")
      o.nodes = static_cast<int>(value());
    else if (a == "--cpu-seconds")
      o.cpu_s = value();
    else if (a == "--heartbeat-interval")
      o.hb_interval_s = value();
    else if (a == "--heartbeat-timeout")
      o.hb_timeout_s = value();
    else if (a == "--json")
      o.json = true;
    else
      fail("unknown option '" + a +
           "' (--nodes N --cpu-seconds S --heartbeat-interval S --heartbeat-timeout S --json)");
  }
  if (o.nodes < 2) fail("--nodes must be at least 2");
  return o;
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Two sockets per simulated node (its end and the server's) plus slack: raise the soft limit to the hard one.
void raise_fd_limit(int nodes) {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < static_cast<rlim_t>(2 * nodes + 64))
    fail(fmt::format("{} nodes need {} file descriptors, the hard limit is {} (raise it: ulimit -Hn)", nodes,
                     2 * nodes + 64, rl.rlim_cur));
}

// The server thread's CPU time in ns: the kernel's per-thread schedstat, found by the thread's name.
long long server_cpu_ns() {
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(e.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name != "tb-rdzv-server") continue;
    std::ifstream sched(e.path() / "schedstat");
    long long ns = -1;
    sched >> ns;
    return ns;
  }
  fail("no thread named tb-rdzv-server in this process");
}

// One simulated node's view: what it was told, and when.
struct Seen {
  std::optional<Assignment> assignment;
  Clock::time_point assigned{}, stopped{}, started{};
  std::optional<msg::Stop> stop;
  std::optional<msg::Start> start;
  std::string error;
};

class Swarm {
 public:
  explicit Swarm(const Options& o) : opt_(o), seen_(static_cast<std::size_t>(o.nodes)) {
    cfg_.rdzv_backend = "c10d";
    cfg_.rdzv.host = "127.0.0.1";
    cfg_.rdzv.port = 0;
    cfg_.rdzv.join_timeout_s = 120;
    cfg_.rdzv.heartbeat_interval_s = o.hb_interval_s;
    cfg_.rdzv.heartbeat_timeout_s = o.hb_timeout_s;
    cfg_.nnodes = o.nodes;
    cfg_.nproc_per_node = 1;
    cfg_.max_restarts = 1;
    cfg_.run_id = "swarm";
    cfg_.command = {"true"};
    server_ = RendezvousServer::try_host(cfg_);
    if (!server_) fail("cannot host the rendezvous on 127.0.0.1");
    cfg_.rdzv.port = server_->port();
    for (int i = 0; i + 1 < o.nodes; ++i)
      clients_.push_back(std::make_unique<ControlClient>(cfg_, i == 0, fmt::format("node-{}", i)));
  }
  ~Swarm() {
    quit_ = true;
    if (quiet_beat_.joinable()) quiet_beat_.join();
  }

  int quiet_index() const { return opt_.nodes - 1; }
  double formation_server_cpu_ms = 0;  // the server thread's CPU during form()

  // --- formation: N joins at once; ms from spawning them to the last assignment ---
  double form() {
    const auto t0 = Clock::now();
    const long long cpu0 = server_cpu_ns();
    std::vector<std::thread> joins;
    joins.reserve(static_cast<std::size_t>(opt_.nodes));
    for (std::size_t i = 0; i < clients_.size(); ++i)
      joins.emplace_back([this, i] {
        try {
          Assignment a = clients_[i]->join(-1, {});
          seen_[i].assigned = Clock::now();
          seen_[i].assignment = std::move(a);
        } catch (const Error& e) {
          seen_[i].error = e.what();
        }
      });
    joins.emplace_back([this] { join_quiet(); });
    for (auto& t : joins) t.join();
    Clock::time_point last = t0;
    for (std::size_t i = 0; i < seen_.size(); ++i) {
      if (!seen_[i].assignment) fail(fmt::format("node {} did not join: {}", i, seen_[i].error));
      last = std::max(last, seen_[i].assigned);
    }
    check_assignments();
    // node 0's own share: what a real cluster pays on one machine, while the N simulated
    // launchers' share (each decoding its N-node assignment) is spread over N machines there.
    formation_server_cpu_ms = static_cast<double>(server_cpu_ns() - cpu0) / 1e6;
    quiet_beat_ = std::thread([this] { beat_quiet(); });
    return ms_between(t0, last);
  }

  // --- heartbeat CPU: the server thread's CPU over `seconds` of a formed, idle job ---
  double server_cpu_pct(double seconds) {
    pump_until([] { return false; }, 0.5);  // settle: the joins' last messages
    const long long before = server_cpu_ns();
    const auto t0 = Clock::now();
    pump_until([] { return false; }, seconds);
    const double wall_ns = ms_between(t0, Clock::now()) * 1e6;
    return 100.0 * static_cast<double>(server_cpu_ns() - before) / wall_ns;
  }

  // --- fail-together: node `k` reports a worker failure; ms until every node holds the stop ---
  double fail_together(int k) {
    RootCause c;
    c.host = fmt::format("node-{}", k);
    c.node_rank = seen_[static_cast<std::size_t>(k)].assignment->node_rank;
    c.rank = c.node_rank;
    c.pid = 4242;
    c.exit_code = 3;
    c.stderr_tail = {"boom"};
    const auto t0 = Clock::now();
    clients_[static_cast<std::size_t>(k)]->send(msg::Failed{0, c});
    if (!pump_until([&] { return all_have(&Seen::stop); }, 30))
      fail(fmt::format("{} of {} nodes never heard the stop", missing(&Seen::stop), opt_.nodes));
    Clock::time_point last = t0;
    for (std::size_t i = 0; i < seen_.size(); ++i) {
      const auto* cause = std::get_if<RootCause>(&seen_[i].stop->why);
      if (!cause || *cause != c || !seen_[i].stop->restart)
        fail(fmt::format("node {} got a stop that is not node {}'s failure with a restart", i, k));
      last = std::max(last, seen_[i].stopped);
    }
    return ms_between(t0, last);
  }

  // --- the restart: every node reports its workers stopped; ms until every node holds the start ---
  double restart() {
    const auto t0 = Clock::now();
    for (auto& c : clients_) c->send(msg::Stopped{0, 0});
    quiet_send(msg::Stopped{0, 0});
    if (!pump_until([&] { return all_have(&Seen::start); }, 30))
      fail(fmt::format("{} of {} nodes never heard the start", missing(&Seen::start), opt_.nodes));
    Clock::time_point last = t0;
    for (std::size_t i = 0; i < seen_.size(); ++i) {
      if (seen_[i].start->attempt != 1)
        fail(fmt::format("node {} was started into attempt {}", i, seen_[i].start->attempt));
      last = std::max(last, seen_[i].started);
      seen_[i].stop.reset();
    }
    return ms_between(t0, last);
  }

  // --- lost node: the quiet one stops heartbeating; ms from its last message until every other node holds its loss ---
  double lost_together() {
    quiet_silent_ = true;
    const auto last_sent = quiet_last_sent();
    auto others_have_stop = [&] {
      for (std::size_t i = 0; i + 1 < seen_.size(); ++i)
        if (!seen_[i].stop) return false;
      return true;
    };
    if (!pump_until(others_have_stop, opt_.hb_timeout_s + 30))
      fail(fmt::format("{} nodes never heard that the silent node was lost", missing(&Seen::stop) - 1));
    const int quiet_rank = seen_.back().assignment->node_rank;
    Clock::time_point last = last_sent;
    for (std::size_t i = 0; i + 1 < seen_.size(); ++i) {
      const auto* lost = std::get_if<LostNode>(&seen_[i].stop->why);
      if (!lost || lost->node_rank != quiet_rank)
        fail(fmt::format("node {} got a stop that does not name node {} lost", i, quiet_rank));
      last = std::max(last, seen_[i].stopped);
    }
    return ms_between(last_sent, last);
  }

 private:
  void check_assignments() {
    std::vector<int> ranks;
    for (std::size_t i = 0; i < seen_.size(); ++i) {
      const Assignment& a = *seen_[i].assignment;
      if (a.nnodes != opt_.nodes || a.world_size != opt_.nodes || a.rank_offset != a.node_rank || a.nodes.size() != 1 ||
          a.nodes[0].node_rank != 0 || a.master_port != seen_[0].assignment->master_port)
        fail(fmt::format("node {}'s assignment is inconsistent (node rank {}, world {}, offset {}, {} nodes)", i,
                         a.node_rank, a.world_size, a.rank_offset, a.nodes.size()));
      ranks.push_back(a.node_rank);
    }
    if (seen_[0].assignment->node_rank != 0) fail("the hosting node is not node 0");
    std::sort(ranks.begin(), ranks.end());
    for (int r = 0; r < opt_.nodes; ++r)
      if (ranks[static_cast<std::size_t>(r)] != r) fail(fmt::format("node rank {} was not assigned exactly once", r));
  }

  // --- the quiet node: the protocol through JsonChannel, heartbeats by hand ---
  void join_quiet() {
    std::string err;
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    UniqueFd fd;
    while (!fd && Clock::now() < deadline) fd = connect_tcp("127.0.0.1", cfg_.rdzv.port, deadline, err);
    if (!fd) return void(seen_.back().error = "cannot connect: " + err);
    std::unique_lock<std::mutex> lock(quiet_mu_);
    quiet_ = JsonChannel(std::move(fd));
    msg::Join j;
    j.run_id = cfg_.run_id;
    j.nnodes = j.nnodes_max = cfg_.nnodes;
    j.config = cfg_.job_digest;
    j.max_restarts = cfg_.max_restarts;
    j.host = "quiet";
    j.addr = "127.0.0.1";
    j.pid = getpid();
    quiet_send_locked(j);
    std::vector<msg::Message> in;
    while (Clock::now() < deadline) {
      pollfd p{quiet_.fd(), POLLIN, 0};
      lock.unlock();
      poll(&p, 1, 100);  // the others' joins go on meanwhile
      lock.lock();
      if (ms_between(quiet_sent_, Clock::now()) >= opt_.hb_interval_s * 1000) quiet_send_locked(msg::Heartbeat{});
      in.clear();
      if (!quiet_.receive(in)) return void(seen_.back().error = quiet_.error());
      for (auto& m : in)
        if (auto* a = std::get_if<msg::Assign>(&m)) {
          seen_.back().assigned = Clock::now();
          seen_.back().assignment = std::move(a->assignment);
          return;
        }
    }
    seen_.back().error = "no assignment within 60 s";
  }
  void beat_quiet() {
    while (!quit_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::lock_guard<std::mutex> lock(quiet_mu_);
      if (!quiet_silent_ && ms_between(quiet_sent_, Clock::now()) >= opt_.hb_interval_s * 1000)
        quiet_send_locked(msg::Heartbeat{});
    }
  }
  void quiet_send_locked(const msg::Message& m) {
    quiet_sent_ = Clock::now();
    quiet_.send(m);
  }
  void quiet_send(const msg::Message& m) {
    std::lock_guard<std::mutex> lock(quiet_mu_);
    quiet_send_locked(m);
  }
  Clock::time_point quiet_last_sent() {
    std::lock_guard<std::mutex> lock(quiet_mu_);
    return quiet_sent_;
  }

  // --- the launchers' side of the loop: one epoll over every simulated node's socket ---
  void record(std::size_t i, std::vector<msg::Message>& msgs) {
    for (auto& m : msgs) {
      if (auto* s = std::get_if<msg::Stop>(&m)) {
        if (seen_[i].stop) continue;
        seen_[i].stopped = Clock::now();
        seen_[i].stop = std::move(*s);
      } else if (auto* st = std::get_if<msg::Start>(&m)) {
        if (seen_[i].start) continue;
        seen_[i].started = Clock::now();
        seen_[i].start = *st;
      }
    }
  }
  void service(std::size_t i) {
    std::vector<msg::Message> msgs;
    if (i < clients_.size()) {
      msgs = clients_[i]->service(POLLIN);
    } else {
      std::lock_guard<std::mutex> lock(quiet_mu_);
      if (!quiet_.receive(msgs)) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, quiet_.fd(), nullptr);
    }
    record(i, msgs);
  }
  // Serves every node's socket until pred() or `seconds` pass; whether pred() held.
  template <class Pred>
  bool pump_until(Pred pred, double seconds) {
    if (!epoll_) {
      epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
      for (std::size_t i = 0; i < seen_.size(); ++i) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = i;
        epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, i < clients_.size() ? clients_[i]->fd() : quiet_.fd(), &ev);
      }
    }
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    std::vector<epoll_event> ready(256);
    while (!pred()) {
      if (Clock::now() >= deadline) return false;
      const int n = epoll_wait(epoll_.get(), ready.data(), static_cast<int>(ready.size()), 20);
      for (int k = 0; k < n; ++k) service(ready[static_cast<std::size_t>(k)].data.u64);
      if (ms_between(last_sweep_, Clock::now()) > 1000) {  // queued heartbeats (POLLOUT), as the launcher's loop does
        last_sweep_ = Clock::now();
        for (std::size_t i = 0; i < clients_.size(); ++i) {  // and any message the client kept back
          auto msgs = clients_[i]->service(POLLOUT);
          record(i, msgs);
        }
      }
    }
    return true;
  }
  template <class T>
  bool all_have(std::optional<T> Seen::*field) const {
    return missing(field) == 0;
  }
  template <class T>
  long missing(std::optional<T> Seen::*field) const {
    return std::count_if(seen_.begin(), seen_.end(), [&](const Seen& s) { return !(s.*field).has_value(); });
  }

  Options opt_;
  RunConfig cfg_;
  std::unique_ptr<RendezvousServer> server_;
  std::vector<std::unique_ptr<ControlClient>> clients_;
  std::vector<Seen> seen_;  // by simulated node: clients_, then the quiet one
  UniqueFd epoll_;
  Clock::time_point last_sweep_{};
  // The quiet node: its channel is used by join_quiet, beat_quiet and the loop, under quiet_mu_.
  std::mutex quiet_mu_;
  JsonChannel quiet_;
  Clock::time_point quiet_sent_{};
  std::atomic<bool> quiet_silent_{false}, quit_{false};
  std::thread quiet_beat_;
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  raise_fd_limit(o.nodes);
  double formation_ms = 0, formation_cpu_ms = 0, cpu_pct = 0, fail_ms = 0, restart_ms = 0, lost_ms = 0;
  {
    Swarm swarm(o);
    formation_ms = swarm.form();
    formation_cpu_ms = swarm.formation_server_cpu_ms;
    cpu_pct = swarm.server_cpu_pct(o.cpu_s);
    fail_ms = swarm.fail_together(o.nodes / 2);
    restart_ms = swarm.restart();
    lost_ms = swarm.lost_together();
  }
  const double cpu_ms_per_interval = cpu_pct / 100.0 * o.hb_interval_s * 1000;
  const double over_timeout_ms = lost_ms - o.hb_timeout_s * 1000;
  if (o.json) {
    std::printf(
        "{\"nodes\":%d,\"formation_ms\":%.1f,\"formation_server_cpu_ms\":%.1f,\"hb_cpu_pct\":%.2f,\"hb_cpu_ms_per_"
        "interval\":%.2f,\"fail_all_ms\":%.1f,"
        "\"restart_all_ms\":%.1f,\"lost_all_ms\":%.1f,\"lost_over_timeout_ms\":%.1f,\"heartbeat_interval_s\":%g,"
        "\"heartbeat_timeout_s\":%g,\"cpu_seconds\":%g}\n",
        o.nodes, formation_ms, formation_cpu_ms, cpu_pct, cpu_ms_per_interval, fail_ms, restart_ms, lost_ms,
        over_timeout_ms, o.hb_interval_s, o.hb_timeout_s, o.cpu_s);
  } else {
    std::printf("%6s %13s %15s %11s %14s %12s %14s %12s %18s\n", "nodes", "formation_ms", "form_server_ms",
                "hb_cpu_pct", "hb_cpu_ms/intv", "fail_all_ms", "restart_all_ms", "lost_all_ms", "lost_over_timeout");
    std::printf("%6d %13.1f %15.1f %11.2f %14.2f %12.1f %14.1f %12.1f %18.1f\n", o.nodes, formation_ms,
                formation_cpu_ms, cpu_pct, cpu_ms_per_interval, fail_ms, restart_ms, lost_ms, over_timeout_ms);
  }
  return 0;
}
