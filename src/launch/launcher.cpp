#include <trainbox/launch/launcher.h>

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include <trainbox/dashboard/dashboard.h>
#include <trainbox/launch/messages.h>
#include <trainbox/launch/ports.h>
#include <trainbox/launch/rendezvous.h>
#include <trainbox/launch/stall.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/net.h>
#include <trainbox/util/result_file.h>
#include <trainbox/util/strings.h>
#include <trainbox/util/clock.h>
#include <trainbox/util/fatal_origin.h>

// The pieces of one job (docs/decisions.md, "The launcher's pieces"):
#include "attempt.h"         // the vocabulary: WorkerPhase, StopCause, AttemptOutcome
#include "console.h"         // note(): the launcher's own lines
#include "dashboard_feed.h"  // observer: what --dashboard shows
#include "membership.h"      // c10d: the rendezvous, the control channel, the job's word
#include "outcome.h"         // what this node says as an attempt ends
#include "signals.h"         // the signalfd
#include "stall_monitor.h"   // --stall-timeout: heartbeats, stacks, the other nodes' ranks
#include "watchdog.h"
#include "worker_group.h"  // this node's workers of one attempt: spawn, stop, reap, drain

namespace trainbox::launch {

namespace {

using Clock = std::chrono::steady_clock;

// A mkdtemp folder for error files when there is no --log-dir; removed unless kept, or
// unless it holds evidence that a summary named (an error file, stack dumps): then it stays,
// and the launcher says so as it exits (watchdog.h, holds_evidence).
class TempDir {
 public:
  TempDir() = default;
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  TempDir(TempDir&& o) noexcept : path_(std::exchange(o.path_, {})), keep_(o.keep_) {}
  TempDir& operator=(TempDir&& o) noexcept {
    std::swap(path_, o.path_);
    std::swap(keep_, o.keep_);
    return *this;
  }
  ~TempDir() {
    if (path_.empty() || keep_) return;
    std::error_code ec;
    if (!holds_evidence(path_)) {
      std::filesystem::remove_all(path_, ec);
      return;
    }
    std::fputs(fmt::format("trainbox run: kept {}: error files and stacks named above; remove it when done "
                           "(--log-dir DIR puts them where you choose)\n",
                           path_)
                   .c_str(),
               stderr);
  }
  static TempDir create() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/trainbox-run-XXXXXX";
    if (!mkdtemp(tmpl.data()))
      throw SystemError(fmt::format("cannot create {}: {}", tmpl, errno_text(errno)),
                        "set TMPDIR to a writable folder, or pass --log-dir");
    return TempDir(tmpl);
  }
  const std::string& path() const { return path_; }
  void keep() { keep_ = true; }
  // Removed now, whatever it holds: what it held was said in full (a usage error's one line).
  void discard() {
    if (path_.empty() || keep_) return;
    std::error_code ec;
    std::filesystem::remove_all(std::exchange(path_, {}), ec);
  }

 private:
  std::string path_;
  bool keep_ = false;
};

// This node cannot run its workers: the root cause the other nodes are sent.
RootCause cannot_start(const Error& e, const std::string& host, int node_rank) {
  RootCause c;
  c.host = host;
  c.node_rank = node_rank;
  c.rank = c.local_rank = -1;
  c.pid = getpid();
  c.exit_code = e.exit_code();
  c.time = std::time(nullptr);
  c.error_message = e.what();
  return c;
}

// --- rank 0's --json result (util/result_file.h): after all worker output, on success and
// on failure alike (a partial result can explain a failure), from the last attempt only ---
int pass_on_result(int code, const RunConfig& cfg, int attempt) {
  if (cfg.global_rank(0) != 0) return code;  // global rank 0 runs on node rank 0 only
  auto text = read_file(worker_dir(cfg, 0, attempt) + "/result.json");
  if (!text || text->empty()) return code;  // a worker that does not know the contract
  try {
    forward_result(*text);
  } catch (const Error& e) {
    note(fmt::format("cannot pass on rank 0's result: {}", e.what()));
    if (code == kExitOk) return kExitFailed;  // whoever waits for the result must not see success
  }
  return code;
}

// --- one job: attempts, each a set of workers from spawn to the last exit ---
// The Supervisor holds the decisions: restart or end (run_attempts, restarts, conclude: read
// them together), the exit code, what a signal, a failure or a stall does to the workers. The
// pieces carry them out, each with its own state: WorkerGroup (this attempt's workers),
// Membership (c10d: the rendezvous and its word), StallMonitor (--stall-timeout), DashboardFeed
// (--dashboard), SignalScope (the signalfd).
class Supervisor {
 public:
  Supervisor(const RunConfig& cfg, std::string exe, SignalScope& signals, Watchdog& watchdog,
             dashboard::Dashboard* dash)
      : cfg_(cfg),
        signals_(signals),
        host_(host_name("?")),
        group_(cfg_, std::move(exe), host_, watchdog),
        stall_(cfg_),
        feed_(dash) {}
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  int run() {
    int code;
    try {
      if (cfg_.c10d()) {
        membership_ = std::make_unique<Membership>(cfg_, host_);
        membership_->join(signals_);
      }
      code = run_attempts();
    } catch (const SignalWhileJoining& i) {
      note(fmt::format("got {} while waiting for the other nodes; stopping", signal_name(i.sig)));
      code = 128 + i.sig;
    } catch (const JobEndedWhileWaiting& e) {
      note(fmt::format("job '{}' ended (exit code {}) before this node was admitted", cfg_.run_id, e.exit_code));
      return e.exit_code;
    } catch (const Error& e) {
      // This node cannot run its workers (a command that does not execute, an unwritable
      // log folder): the others must not wait for a collective or a heartbeat to learn it.
      if (Membership* m = joined()) {
        m->send(msg::Failed{group_.number(), cannot_start(e, host_, cfg_.node_rank)});
        m->expect_close();
      }
      throw;
    }
    return pass_on_result(code, cfg_, group_.number());
  }

  // The job ended as a usage error said in one line (outcome.h, usage_error_line) at its first
  // attempt: the error files hold nothing more, so the temporary log folder need not stay.
  bool refused_as_usage_error() const { return refused_as_usage_error_; }

 private:
  // The c10d membership once this node has joined; nullptr without c10d.
  Membership* joined() const { return membership_ && membership_->joined() ? membership_.get() : nullptr; }

  // --- the restart decision ---
  // Attempts until one succeeds, the restarts are used up or a signal stops the job; returns
  // the launcher's exit code (group_ holds the last attempt).
  int run_attempts() {
    Membership* m = joined();
    for (int number = m ? m->first_attempt() : 0;; ++number) {
      if (m) m->begin_attempt(number);
      run_attempt(number);
      AttemptOutcome outcome = m ? agree_with_nodes(*m) : local_outcome(group_, cfg_);
      if (restarts(outcome)) {
        announce_restart(outcome, group_, cfg_, feed_);
        if (!m) continue;
        auto instead = restart_together(*m);
        if (!instead) continue;
        outcome = std::move(*instead);
      }
      return conclude(outcome);
    }
  }

  // Whether a new attempt follows. Without c10d this launcher decides (restarts left, no
  // stopping signal, --on-stall restart for a stall); with c10d the rendezvous did.
  bool restarts(const AttemptOutcome& o) const {
    const bool left = group_.number() < cfg_.max_restarts && !stop_requested_;
    if (const auto* f = std::get_if<WorkerFailed>(&o)) {
      // A usage error (exit 2: bad input, said in one line) repeats on every attempt: this
      // launcher restarts for failures, not for refusals (torchrun would restart; decided in
      // docs/distributed.md, "A usage error under a launcher"). With c10d the rendezvous decides.
      if (!f->job_restarts && usage_error_line(o, group_, cfg_)) return false;
      return f->job_restarts.value_or(left);
    }
    if (std::holds_alternative<Stalled>(o)) return cfg_.on_stall == StallAction::kRestart && left;
    if (const auto* l = std::get_if<NodeLost>(&o)) return l->job_restarts && !stop_requested_;
    if (std::holds_alternative<Admitted>(o)) return !stop_requested_;
    return false;
  }

  // The job ends with `o`: what this node says, and trainbox run's exit code.
  int conclude(const AttemptOutcome& o) {
    if (Membership* m = joined()) {
      m->expect_close();  // the job's end is decided: node 0 may exit before this node
      if (std::holds_alternative<WorkerFailed>(o)) m->send(msg::Stopped{group_.number(), 0});
    }
    const int code = say_end(o, group_, cfg_, host_);
    refused_as_usage_error_ = group_.number() == 0 && usage_error_line(o, group_, cfg_).has_value();
    feed_.ended(code, o);
    feed_.publish(cfg_, group_, stall_);
    return code;
  }

  // --- c10d: after this node's workers of the attempt are reaped, the job's verdict ---
  AttemptOutcome agree_with_nodes(Membership& m) {
    if (int sig = group_.signal_here()) return Interrupted{.signal = sig};
    if (m.word().verdict) return *m.word().verdict;
    // This node reported a failure (or a stall): the server answers at once. It succeeded:
    // wait as long as the server is alive (other nodes may train for hours).
    const bool reported = group_.cause().has_value();
    if (!reported) m.send(msg::Done{group_.number()});
    const double wait_s = reported ? cfg_.rdzv.read_timeout_s : 1e9;
    await(
        m, [&m] { return m.word().verdict.has_value(); }, wait_s);
    if (int sig = group_.signal_here()) return Interrupted{.signal = sig};
    if (m.word().verdict) return *m.word().verdict;
    LostNode server = m.lost_server();
    server.why = reported ? fmt::format("no answer to this node's failure report within read_timeout={:g}s", wait_s)
                          : fmt::format("no word from the rendezvous within {:g} s", wait_s);
    return NodeLost{server};
  }

  // --- c10d, a failure with restarts left: every node reports its workers stopped, then the
  // server starts the next attempt everywhere with node 0's fresh port. nullopt when it did;
  // else how the job ends instead (a lost node, a signal). ---
  std::optional<AttemptOutcome> restart_together(Membership& m) {
    m.send(msg::Stopped{group_.number(), cfg_.node_rank == 0 ? pick_free_port("0.0.0.0") : 0});
    // Every node stops within its grace period; the server then answers at once.
    const double wait_s = cfg_.grace_period_s + cfg_.rdzv.read_timeout_s;
    await(
        m, [&m] { return m.word().next_port || m.word().next_world || !m.word().restarting(); }, wait_s);
    if (int sig = group_.signal_here()) return Interrupted{.signal = sig, .stopped_workers = false};
    const JobWord& w = m.word();
    if (w.next_world) {
      m.change_world(*w.next_world, w.verdict ? *w.verdict : AttemptOutcome{Succeeded{}});
      return std::nullopt;
    }
    if (w.next_port) {
      cfg_.master_port = *w.next_port;
      return std::nullopt;
    }
    if (!w.restarting() && w.verdict) return *w.verdict;
    LostNode server = m.lost_server();
    server.why = fmt::format("no restart from the rendezvous within {:g} s", wait_s);
    return NodeLost{server};
  }

  // Serves the control channel (and signals) until done(), a stopping signal, or `timeout_s`.
  template <class Done>
  void await(Membership& m, Done done, double timeout_s) {
    const auto deadline = Clock::now() + seconds(timeout_s);
    while (!done() && !group_.signal_here() && Clock::now() < deadline) {
      pollfd fds[2] = {{signals_.fd(), POLLIN, 0}, {m.fd(), m.poll_events(), 0}};
      int ms = std::min<long long>(
          m.timeout_ms(), std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count() + 1);
      if (poll(fds, 2, std::max(ms, 0)) < 0 && errno != EINTR) throw SystemError("poll failed: " + errno_text(errno));
      for (int sig; (sig = signals_.next()) != 0;)
        if (is_stop_signal(sig)) on_signal(sig);
      on_news(m.service(fds[1].revents));
    }
  }

  // --- what happens to the workers: the channel's news, signals, failures, stalls ---
  void on_news(ChannelNews news) {
    for (auto& r : news.ranks) stall_.set_remote(std::move(r));
    for (const auto& why : news.stops) {
      if (group_.running() && !group_.all_reaped()) note(why);
      stop_for_the_job();
    }
    if (news.lost) {
      note(fmt::format("{}: {}", news.lost->describe(), news.lost->why));
      stop_for_the_job();
    }
  }

  void stop_for_the_job() {
    if (group_.running() && !group_.all_reaped()) group_.begin_stop(SIGTERM);
  }

  void on_signal(int sig) {
    if (sig == SIGCHLD) return;  // reap() runs every iteration
    if (sig == SIGUSR1) {        // where is every rank? (the job goes on)
      if (!group_.all_reaped()) stall_.dump_all(group_.attempt_dir());
      return;
    }
    if (sig == SIGUSR2) return group_.forward(sig);
    // SIGINT, SIGTERM, SIGHUP, SIGQUIT: no restart after it; the first one is the outcome
    stop_requested_ = true;
    if (!group_.signal_here()) {
      // The other nodes stop too (Slurm's scancel signals every node; a Ctrl-C on one must not
      // leave the rest waiting for a collective).
      if (Membership* m = joined()) m->send(msg::Interrupted{group_.number(), sig});
      group_.set_cause(LocalSignal{sig});
    }
    if (group_.running()) {
      if (!group_.all_reaped())
        note(fmt::format("got {}; forwarding it to every worker, SIGKILL after {:g} s", signal_name(sig),
                         cfg_.grace_period_s));
      group_.begin_stop(sig);
    } else {
      group_.kill_now(fmt::format("got {} while stopping", signal_name(sig)));
    }
  }

  // A worker reported no progress for --stall-timeout: name it and those waiting on it, show
  // where every rank is, then act (--on-stall).
  void on_stall(StallReport r) {
    stall_.announce(r, group_.number(), group_.attempt_dir());
    if (cfg_.on_stall == StallAction::kDump) return;
    // With c10d the other nodes stop (or restart) with this node: the stall is the root cause.
    Membership* m = joined();
    if (m && !m->word().verdict) m->send(msg::Failed{group_.number(), stall_cause(r, group_, cfg_)});
    feed_.cause("stalled: " + r.headline, r.culprits.empty() ? -1 : r.culprits.front());
    group_.set_cause(LocalStall{std::move(r)});
    group_.begin_stop(SIGTERM);
  }

  void reap() {
    const WorkerGroup::Reaped r = group_.reap();  // the first failure began the stop
    for (pid_t pid : r.ended) stall_.exited(pid);
    if (!r.failed) return;
    if (feed_.on()) feed_.cause(group_.root_cause(*r.failed));
    // The server turns the first report of the job into one stop for every node.
    Membership* m = joined();
    if (m && !m->word().verdict) {
      WorkerGroup::drain_pipes(*r.failed);
      m->send(msg::Failed{group_.number(), group_.root_cause(*r.failed)});
    }
  }

  // --- one attempt: spawn, supervise until every worker is reaped, tear down ---
  void run_attempt(int number) {
    group_.spawn(number);
    stall_.start(group_.watched());       // each worker's heartbeat file (launch/stall.h)
    feed_.publish(cfg_, group_, stall_);  // --dashboard: a copy, no waiting
    supervise();
    teardown();
  }

  // How long poll() may sleep: until the phase's deadline, the control channel's next duty,
  // the next stall check, the next publish; -1 when nothing but an event can change anything.
  int poll_timeout_ms() const {
    auto at_most = [](int timeout, int ms) { return timeout < 0 ? ms : std::min(timeout, ms); };
    int timeout = group_.deadline_ms();
    if (Membership* m = joined()) timeout = at_most(timeout, m->timeout_ms());
    // Heartbeats are read every 250 ms: a stall is named within timeout + 0.25 s.
    if (stall_.enabled() && group_.running()) timeout = at_most(timeout, 250);
    if (feed_.on()) timeout = at_most(timeout, static_cast<int>(DashboardFeed::kEvery.count()));
    return timeout;
  }

  // Relays output, handles signals, exits and the control channel until every worker is reaped
  // (or, after SIGKILL, abandoned).
  void supervise() {
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, Worker::Stream*>> owners;
    Membership* m = joined();
    const std::size_t first_stream = m ? 2 : 1;
    for (;;) {
      reap();
      if (group_.all_reaped()) break;
      std::vector<pid_t> abandoned;
      const bool gave_up = group_.enforce_deadline(abandoned);
      for (pid_t pid : abandoned) stall_.exited(pid);
      if (gave_up) break;
      fds.assign(1, pollfd{signals_.fd(), POLLIN, 0});
      if (m) fds.push_back(pollfd{m->fd(), m->poll_events(), 0});
      group_.add_streams(fds, owners);
      if (poll(fds.data(), fds.size(), poll_timeout_ms()) < 0 && errno != EINTR)
        throw SystemError("poll failed: " + errno_text(errno));

      for (int sig; (sig = signals_.next()) != 0;) on_signal(sig);
      if (m) on_news(m->service(fds[1].revents));
      for (std::size_t i = first_stream; i < fds.size(); ++i)
        if (fds[i].revents) owners[i].first->pump(*owners[i].second);
      if (stall_.enabled() && group_.running()) {
        if (auto r = stall_.check())
          on_stall(std::move(*r));
        else if (m && stall_.ranks_due())
          m->send(stall_.ranks_message(group_.number(), host_));
      }
      if (feed_.due()) feed_.publish(cfg_, group_, stall_);
    }
  }

  // Nothing of this attempt outlives it; signals that arrived after the last exit still count
  // (e.g. Ctrl-C during teardown).
  void teardown() {
    group_.drain();
    for (int sig; (sig = signals_.next()) != 0;)
      if (sig != SIGCHLD && sig != SIGUSR1 && sig != SIGUSR2) {
        stop_requested_ = true;
        if (joined() && !group_.signal_here()) on_signal(sig);
      }
  }

  RunConfig cfg_;  // a copy: the c10d rendezvous fills in the node rank, the world and the master
  SignalScope& signals_;
  std::string host_;
  WorkerGroup group_;  // this attempt's workers
  StallMonitor stall_;
  DashboardFeed feed_;
  bool stop_requested_ = false;             // a stopping signal came: no restart, whatever the outcome
  bool refused_as_usage_error_ = false;     // conclude(): the end was one usage error's line
  std::unique_ptr<Membership> membership_;  // c10d only
};

}  // namespace

int launch(const RunConfig& given) {
  RunConfig cfg = given;
  for (const auto& n : cfg.notes) note(n);
  // A job of several nodes: the launcher's own fatal lines name its host too (util/fatal_origin.h).
  if (cfg.nnodes > 1 || cfg.nnodes_max > 1) set_job_spans_nodes(true);
  const std::string exe = find_executable(cfg.command.front());

  // --- the master port: rank 0's TCPStore must be able to listen on it ---
  if (cfg.standalone) {
    cfg.master_addr = "127.0.0.1";
    cfg.master_port = pick_free_port(cfg.master_addr);
  } else if (cfg.node_rank == 0 && !cfg.c10d()) {  // c10d: node 0 reports a port it found free
    check_port_available(cfg.master_addr, cfg.master_port);
  }

  // --- where error files (and logs) go ---
  const bool streams_to_files =
      cfg.redirects.all || cfg.tee.all || !cfg.redirects.by_local_rank.empty() || !cfg.tee.by_local_rank.empty();
  TempDir temp;
  if (cfg.log_dir_given) {
    std::error_code ec;
    std::filesystem::create_directories(cfg.log_dir, ec);
    if (ec) throw UsageError(fmt::format("--log-dir {}: {}", cfg.log_dir, ec.message()), "pass a writable folder");
  } else {
    temp = TempDir::create();
    cfg.log_dir = temp.path();
    if (streams_to_files) {
      temp.keep();
      note(fmt::format("worker logs go to {} (pass --log-dir to choose)", cfg.log_dir));
    }
  }
  if (sets_omp_num_threads(cfg))
    note(
        fmt::format("OMP_NUM_THREADS is not set; setting it to 1 for each of the {} workers so they do not "
                    "oversubscribe the CPU (set it yourself to tune)",
                    cfg.nproc_per_node));

  SignalScope signals;
  Watchdog watchdog = Watchdog::start(cfg.log_dir_given || streams_to_files ? std::string() : temp.path());
  // --- --dashboard: its threads start after the watchdog's fork, with every signal blocked ---
  std::unique_ptr<dashboard::Dashboard> dash;
  if (cfg.dashboard.enabled()) {
    std::error_code ec;
    dash = dashboard::Dashboard::start(cfg.dashboard, std::filesystem::current_path(ec).string());
    note(fmt::format("dashboard: {} (/metrics for Prometheus)", dash->url()));
  }
  Supervisor supervisor(cfg, exe, signals, watchdog, dash.get());
  const int code = supervisor.run();
  if (supervisor.refused_as_usage_error()) temp.discard();  // no /tmp/trainbox-run-* left for a typo
  return code;
}

}  // namespace trainbox::launch
