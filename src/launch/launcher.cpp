#include <trainbox/launch/launcher.h>

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <trainbox/dashboard/dashboard.h>
#include <trainbox/launch/messages.h>
#include <trainbox/launch/ports.h>
#include <trainbox/launch/proc_state.h>
#include <trainbox/launch/rendezvous.h>
#include <trainbox/launch/stall.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/net.h>
#include <trainbox/util/result_file.h>
#include <trainbox/util/strings.h>
#include <trainbox/util/unique_fd.h>

#include "failure_report.h"
#include "watchdog.h"
#include "worker.h"

extern char** environ;

namespace trainbox::launch {

namespace {

using Clock = std::chrono::steady_clock;
using dashboard::Dashboard;
using dashboard::DashboardInput;
using dashboard::DashJob;
using dashboard::DashRank;

// After the last worker exits, how long to wait for its pipes to reach EOF. Only a process
// that left the worker's group (setsid) can keep them open beyond a few milliseconds.
constexpr std::chrono::milliseconds kDrainWait{500};
// After SIGKILL, how long a worker may take to be reaped before the launcher gives up on it.
// SIGKILL ends a process at once, except one in uninterruptible sleep (D: a dead NFS mount, a
// hung driver call), which ends only when that kernel call returns — maybe never. 5 s: a
// process freeing a large GPU context can take a few seconds to exit.
constexpr std::chrono::seconds kUnkillableWait{5};
// How often each node sends its ranks' progress and kernel view to the others (control
// channel "ranks"): well under any useful --stall-timeout, a few hundred bytes a rank.
constexpr std::chrono::seconds kRanksEvery{1};
// How often the launcher hands its ranks to the dashboard (dashboard/dashboard.h): twice per
// page refresh; a copy of a few hundred bytes a rank.
constexpr std::chrono::milliseconds kDashboardEvery{500};

void note(const std::string& line) { std::fputs(("trainbox run: " + line + "\n").c_str(), stderr); }

// Blocks the signals the launcher handles and delivers them through a signalfd, so the poll
// loop sees them in order with worker output and exits (no async-signal-safety puzzles).
// SIGPIPE is ignored: a closed console must not kill the launcher and orphan the job.
class SignalScope {
 public:
  SignalScope() {
    sigemptyset(&handled_);
    for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaddset(&handled_, s);
    sigprocmask(SIG_BLOCK, &handled_, &original_);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &old_pipe_);
    fd_.reset(signalfd(-1, &handled_, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!fd_) {
      restore();
      throw SystemError("cannot create a signalfd: " + errno_text(errno));
    }
  }
  ~SignalScope() { restore(); }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

  int fd() const { return fd_.get(); }
  const sigset_t& original_mask() const { return original_; }
  // The next pending signal, 0 when none.
  int next() {
    signalfd_siginfo si;
    ssize_t n = read(fd_.get(), &si, sizeof si);
    return n == static_cast<ssize_t>(sizeof si) ? static_cast<int>(si.ssi_signo) : 0;
  }

 private:
  void restore() {
    fd_.reset();
    sigaction(SIGPIPE, &old_pipe_, nullptr);
    sigprocmask(SIG_SETMASK, &original_, nullptr);
  }
  sigset_t handled_{}, original_{};
  struct sigaction old_pipe_ {};
  UniqueFd fd_;
};

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

 private:
  std::string path_;
  bool keep_ = false;
};

std::vector<std::string> child_environment(const std::vector<std::pair<std::string, std::string>>& vars) {
  std::set<std::string> ours;
  for (const auto& kv : vars) ours.insert(kv.first);
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    if (!ours.count(std::string(kv.substr(0, kv.find('='))))) env.emplace_back(kv);
  }
  for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
  return env;
}

std::string join_command(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s.size() > 120 ? s.substr(0, 117) + "..." : s;
}

// A stopping signal (SIGINT, SIGTERM, …) arrived while this node waited for the others to join.
struct SignalWhileJoining {
  int sig;
};

// The checkpoint `trainbox train` resumes from after a restart, named as its run dir's
// checkpoints/latest pointer names it ("step_40"); "" when the run dir is unknown (not a
// `trainbox train --run-dir` command) or has none yet. Torch-free: the pointer is one line.
std::string latest_checkpoint_name(const std::string& run_dir) {
  if (run_dir.empty()) return "";
  auto text = read_file(run_dir + "/checkpoints/latest");
  if (!text) return "";
  std::string name = trim(*text);
  return starts_with(name, "step_") && name.find('/') == std::string::npos ? name : "";
}

void append_line(const std::string& path, const std::string& line) {
  if (std::FILE* f = std::fopen(path.c_str(), "a")) {
    std::fputs((line + "\n").c_str(), f);
    std::fclose(f);
  }
}

bool is_stop_signal(int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT; }

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;  // clang 14 (the fuzz build) has no aggregate deduction yet

// --- how an attempt ended (torchelastic's RunResult): the restart decision and the exit
// code are computed from it in one place (Supervisor::restarts, Supervisor::conclude) ---
// Every worker (in a c10d job: every node's) exited 0.
struct Succeeded {};
// A worker failed: on this node (no c10d), or the job's first failure as the rendezvous broadcast it.
struct WorkerFailed {
  RootCause cause;
  const Worker* here = nullptr;      // without c10d: this node's failed worker
  std::optional<bool> job_restarts;  // c10d: the rendezvous's decision; unset: this launcher decides
};
// --on-stall kill or restart stopped the workers (without c10d: a c10d job reports a stall
// as its failure, with exit code 124).
struct Stalled {
  RootCause cause;
};
// A node of the c10d job is gone (or the rendezvous, or its word).
struct NodeLost {
  LostNode node;
  bool job_restarts = false;  // elastic: the survivors go on at a smaller world
};
// Elastic: nodes waiting to join are admitted; every node restarts at the larger world.
struct Admitted {
  std::vector<std::string> hosts;
};
// A stopping signal, here or on another node of a c10d job.
struct Interrupted {
  int signal = SIGTERM;
  std::optional<msg::SignalElsewhere> elsewhere{};  // unset: this node got it
  bool stopped_workers = true;                      // here: it is what stopped this node's workers
};
using AttemptOutcome = std::variant<Succeeded, WorkerFailed, Stalled, NodeLost, Interrupted, Admitted>;

// Two verdicts of the rendezvous for one attempt: a lost node or a signal overrides a failure.
int weight(const AttemptOutcome& o) {
  return std::visit(Overloaded{[](const Succeeded&) { return 0; }, [](const WorkerFailed&) { return 1; },
                               [](const Stalled&) { return 1; }, [](const Admitted&) { return 1; },
                               [](const Interrupted&) { return 2; }, [](const NodeLost&) { return 3; }},
                    o);
}

// --- one attempt on this node (torchelastic's WorkerState) ---
// The workers run; then stopping (stop_signal sent, SIGKILL at the deadline); then killing
// (SIGKILL sent, the unkillable ones abandoned at the deadline).
enum class WorkerPhase { kRunning, kStopping, kKilling };
// Why this node stopped its workers before they all ended on their own.
struct LocalFailure {
  Worker* worker;  // the first one that failed: every later failure may be its consequence
};
struct LocalStall {
  StallReport report;
};
struct LocalSignal {
  int signal;
};
using StopCause = std::variant<LocalFailure, LocalStall, LocalSignal>;

struct Attempt {
  int number = 0;
  WorkerPhase phase = WorkerPhase::kRunning;
  int stop_signal = SIGTERM;
  Clock::time_point deadline{};      // kStopping: SIGKILL; kKilling: give up on the unkillable
  std::optional<StopCause> cause{};  // set as the stop begins; a signal replaces a failure or a stall
  // --- c10d: what the rendezvous said about this attempt ---
  std::optional<AttemptOutcome> verdict{};  // a stop, the end, or its loss (the heavier one stands)
  std::optional<int> next_port{};           // it started the next attempt with this MASTER_PORT
  std::optional<Assignment> next_world{};   // elastic: …at a new world (an `assign` instead of a `start`)
};

// --- one job: attempts, each a set of workers from spawn to the last exit ---
class Supervisor {
 public:
  Supervisor(const RunConfig& cfg, std::string exe, SignalScope& signals, Watchdog& watchdog, Dashboard* dash)
      : cfg_(cfg), exe_(std::move(exe)), signals_(signals), watchdog_(watchdog), host_(host_name("?")), dash_(dash) {}
  ~Supervisor() {
    // Lets the last broadcasts (stop, end, abort) reach the other nodes before this
    // launcher, which hosts their rendezvous, exits. 1 s: they are a few hundred bytes.
    if (server_) server_->finish(1.0);
  }
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  int run() {
    int code;
    try {
      if (cfg_.c10d()) rendezvous();
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
      if (ctrl_) {
        RootCause c;
        c.host = host_;
        c.node_rank = cfg_.node_rank;
        c.rank = c.local_rank = -1;
        c.pid = getpid();
        c.exit_code = e.exit_code();
        c.time = std::time(nullptr);
        c.error_message = e.what();
        ctrl_->send(msg::Failed{attempt_.number, c});
        ctrl_->expect_close();
      }
      throw;
    }
    return pass_on_result(code);
  }

 private:
  // --- c10d: meet the other launchers, take this node's place in the world ---
  void rendezvous() {
    server_ = RendezvousServer::try_host(cfg_);
    auto client = std::make_unique<ControlClient>(cfg_, server_ != nullptr, host_);
    const Assignment a = client->join(signals_.fd(), [this] {
      for (int sig; (sig = signals_.next()) != 0;)
        if (is_stop_signal(sig)) throw SignalWhileJoining{sig};
    });
    ctrl_ = std::move(client);
    first_attempt_ = ctrl_->attempt();
    take_place(a);
    note(fmt::format("node rank {} of {} (ranks {}..{} of {}{}); MASTER_ADDR={} MASTER_PORT={}", a.node_rank, a.nnodes,
                     a.rank_offset, a.rank_offset + cfg_.nproc_per_node - 1, a.world_size,
                     server_ ? ", hosting the rendezvous" : "", a.master_addr, a.master_port));
  }

  void take_place(const Assignment& a) {
    cfg_.node_rank = a.node_rank;
    cfg_.nnodes = a.nnodes;
    cfg_.rank_offset = a.rank_offset;
    cfg_.total_world_size = a.world_size;
    cfg_.master_addr = a.master_addr;
    cfg_.master_port = a.master_port;
    world_ = a;
  }

  // Elastic: the next attempt runs at a new world. One line on every node, and a record in
  // --log-dir's membership.jsonl: "world 3 → 2: lost node 2 (c, …); resuming from step_40".
  void change_world(const Assignment& a, const AttemptOutcome& why) {
    const int before = world_.world_size;
    std::string cause;
    if (const auto* l = std::get_if<NodeLost>(&why))
      cause = fmt::format("lost node {} ({}, {})", l->node.node_rank, l->node.host, l->node.why);
    else if (const auto* ad = std::get_if<Admitted>(&why))
      cause = fmt::format("admitted {}", fmt::join(ad->hosts, ", "));
    else if (const auto* f = std::get_if<WorkerFailed>(&why))
      cause = fmt::format("rank {} on node {} ({}) failed", f->cause.rank, f->cause.node_rank, f->cause.host);
    const std::string from = latest_checkpoint_name(
        cfg_.dashboard.run_dir.empty() ? dashboard::run_dir_of(cfg_.command, "") : cfg_.dashboard.run_dir);
    note(fmt::format("world {} → {}: {}; resuming from {} ({} node{}; this node is node {})", before, a.world_size,
                     cause, from.empty() ? "the latest checkpoint" : from, a.nnodes, a.nnodes == 1 ? "" : "s",
                     a.node_rank));
    if (cfg_.log_dir_given) {
      nlohmann::json rec = {{"time", std::time(nullptr)}, {"attempt", attempt_.number + 1},
                            {"world_before", before},     {"world_after", a.world_size},
                            {"nnodes", a.nnodes},         {"cause", cause},
                            {"resume_from", from},        {"node_rank", a.node_rank}};
      append_line(cfg_.log_dir + "/membership.jsonl", rec.dump());
    }
    take_place(a);
  }

  // Attempts until one succeeds, the restarts are used up or a signal stops the job; returns
  // the launcher's exit code (attempt_ holds the last attempt).
  int run_attempts() {
    for (int number = first_attempt_;; ++number) {
      attempt_ = Attempt{.number = number};
      run_attempt();
      AttemptOutcome outcome = ctrl_ ? agree_with_nodes() : local_outcome();
      if (restarts(outcome)) {
        announce_restart(outcome);
        if (!ctrl_) continue;
        auto instead = restart_together();
        if (!instead) continue;
        outcome = std::move(*instead);
      }
      return conclude(outcome);
    }
  }

  // --- the outcome: restart, or the summary and the exit code ---
  // Whether a new attempt follows. Without c10d this launcher decides (restarts left, no
  // stopping signal, --on-stall restart for a stall); with c10d the rendezvous did.
  bool restarts(const AttemptOutcome& o) const {
    const bool left = attempt_.number < cfg_.max_restarts && !stop_requested_;
    if (const auto* f = std::get_if<WorkerFailed>(&o)) return f->job_restarts.value_or(left);
    if (std::holds_alternative<Stalled>(o)) return cfg_.on_stall == StallAction::kRestart && left;
    if (const auto* l = std::get_if<NodeLost>(&o)) return l->job_restarts && !stop_requested_;
    if (std::holds_alternative<Admitted>(o)) return !stop_requested_;
    return false;
  }

  // The job ends with `o`: what this node says, and trainbox run's exit code.
  int conclude(const AttemptOutcome& o) {
    if (ctrl_) ctrl_->expect_close();  // the job's end is decided: node 0 may exit before this node
    const int code = conclude_here(o);
    dash_.exit_code = code;
    dash_.status = code == kExitOk ? "succeeded" : "failed";
    if (const auto* f = std::get_if<WorkerFailed>(&o)) dash_.cause(f->cause);
    if (const auto* l = std::get_if<NodeLost>(&o)) dash_.cause(l->node.describe() + ": " + l->node.why);
    publish_dashboard();
    return code;
  }

  int conclude_here(const AttemptOutcome& o) {
    return std::visit(Overloaded{
                          [](const Succeeded&) { return kExitOk; },
                          [this](const WorkerFailed& f) {
                            if (ctrl_) ctrl_->send(msg::Stopped{attempt_.number, 0});
                            print_failure(f.cause, std::nullopt);
                            return f.cause.launcher_exit_code();
                          },
                          [this](const Stalled& s) {
                            print_failure(s.cause, std::nullopt);
                            return kExitStalled;
                          },
                          [this](const NodeLost& l) {
                            print_failure(std::nullopt, l.node);
                            return kExitNodeLost;
                          },
                          [](const Admitted&) {  // only a restart follows an admission; a stop did instead
                            note("the job stopped while admitting new nodes");
                            return kExitFailed;
                          },
                          [this](const Interrupted& i) {
                            if (i.elsewhere)
                              note(fmt::format("node {} ({}) got {}; its launcher stopped the job",
                                               i.elsewhere->node_rank, i.elsewhere->host, signal_name(i.signal)));
                            else if (i.stopped_workers)
                              note(fmt::format("stopped {} worker{} after {}", workers_.size(),
                                               workers_.size() == 1 ? "" : "s", signal_name(i.signal)));
                            return 128 + i.signal;
                          },
                      },
                      o);
  }

  void announce_restart(const AttemptOutcome& o) {
    if (const auto* l = std::get_if<NodeLost>(&o)) {
      dash_.cause(l->node.describe() + ": " + l->node.why + " (the job goes on without it)");
      return;  // the new world's line follows with the rendezvous's assignment
    }
    const auto* f = std::get_if<WorkerFailed>(&o);
    if (!f) return;  // a stall: --on-stall restart said so as it stopped the workers; an admission: the new world
    dash_.cause(describe_cause(f->cause) + " (restarted)");  // the new attempt's logs are not that rank's failure
    if (f->here) {
      note(fmt::format("rank {} (local_rank {}) failed with {}; restarting all {} workers (restart {} of {})",
                       f->here->rank, f->here->local_rank, describe_wait_status(f->here->wait_status), workers_.size(),
                       attempt_.number + 1, cfg_.max_restarts));
      return;
    }
    const RootCause& c = f->cause;
    note(fmt::format(
        "rank {} on node {} ({}) failed with {}; restarting the workers of {} (restart {} of {})", c.rank, c.node_rank,
        c.host, c.signal ? fmt::format("signal {}", signal_name(c.signal)) : fmt::format("exit code {}", c.exit_code),
        cfg_.nnodes == 1 ? std::string("the node") : fmt::format("all {} nodes", cfg_.nnodes), attempt_.number + 1,
        cfg_.max_restarts));
  }

  // Without c10d: this node's attempt is the job's.
  AttemptOutcome local_outcome() {
    if (!attempt_.cause) return Succeeded{};
    return std::visit(Overloaded{
                          [this](const LocalFailure& f) -> AttemptOutcome {
                            return WorkerFailed{root_cause(*f.worker), f.worker, std::nullopt};
                          },
                          [this](const LocalStall& s) -> AttemptOutcome { return Stalled{stall_cause(s.report)}; },
                          [](const LocalSignal& s) -> AttemptOutcome { return Interrupted{.signal = s.signal}; },
                      },
                      *attempt_.cause);
  }

  int signal_here() const {
    const auto* s = attempt_.cause ? std::get_if<LocalSignal>(&*attempt_.cause) : nullptr;
    return s ? s->signal : 0;
  }

  // --- c10d: after this node's workers of the attempt are reaped, the job's verdict ---
  AttemptOutcome agree_with_nodes() {
    if (int sig = signal_here()) return Interrupted{.signal = sig};
    if (attempt_.verdict) return *attempt_.verdict;
    // This node reported a failure (or a stall): the server answers at once. It succeeded:
    // wait as long as the server is alive (other nodes may train for hours).
    const bool reported = attempt_.cause.has_value();
    if (!reported) ctrl_->send(msg::Done{attempt_.number});
    const double wait_s = reported ? cfg_.rdzv.read_timeout_s : 1e9;
    await([this] { return attempt_.verdict.has_value(); }, wait_s);
    if (int sig = signal_here()) return Interrupted{.signal = sig};
    if (attempt_.verdict) return *attempt_.verdict;
    LostNode server = ctrl_->lost_server();
    server.why = reported ? fmt::format("no answer to this node's failure report within read_timeout={:g}s", wait_s)
                          : fmt::format("no word from the rendezvous within {:g} s", wait_s);
    return NodeLost{server};
  }

  bool job_restarting() const {
    if (!attempt_.verdict) return false;
    if (const auto* f = std::get_if<WorkerFailed>(&*attempt_.verdict)) return f->job_restarts.value_or(false);
    if (const auto* l = std::get_if<NodeLost>(&*attempt_.verdict)) return l->job_restarts;
    return std::holds_alternative<Admitted>(*attempt_.verdict);
  }

  // --- c10d, a failure with restarts left: every node reports its workers stopped, then the
  // server starts the next attempt everywhere with node 0's fresh port. nullopt when it did;
  // else how the job ends instead (a lost node, a signal). ---
  std::optional<AttemptOutcome> restart_together() {
    ctrl_->send(msg::Stopped{attempt_.number, cfg_.node_rank == 0 ? pick_free_port("0.0.0.0") : 0});
    // Every node stops within its grace period; the server then answers at once.
    const double wait_s = cfg_.grace_period_s + cfg_.rdzv.read_timeout_s;
    await([this] { return attempt_.next_port || attempt_.next_world || !job_restarting(); }, wait_s);
    if (int sig = signal_here()) return Interrupted{.signal = sig, .stopped_workers = false};
    if (attempt_.next_world) {
      change_world(*attempt_.next_world, attempt_.verdict ? *attempt_.verdict : AttemptOutcome{Succeeded{}});
      return std::nullopt;
    }
    if (attempt_.next_port) {
      cfg_.master_port = *attempt_.next_port;
      return std::nullopt;
    }
    if (!job_restarting() && attempt_.verdict) return *attempt_.verdict;
    LostNode server = ctrl_->lost_server();
    server.why = fmt::format("no restart from the rendezvous within {:g} s", wait_s);
    return NodeLost{server};
  }

  RootCause root_cause(const Worker& w) const {
    return root_cause_of(w, host_, cfg_.node_rank, worker_dir(cfg_, w.local_rank, attempt_.number) + "/error.json");
  }

  void print_failure(const std::optional<RootCause>& root, const std::optional<LostNode>& lost) const {
    FailureReport report;
    report.command = join_command(cfg_.command);
    report.host = host_;
    report.node_rank = cfg_.node_rank;
    report.nnodes = cfg_.nnodes;
    report.restarts = attempt_.number;
    report.root = root;
    report.lost = lost;
    report.exit_code = root ? root->launcher_exit_code() : kExitNodeLost;
    const bool root_here = root && root->node_rank == cfg_.node_rank;
    for (const auto& w : workers_)
      if (!(root_here && w.rank == root->rank)) report.workers.push_back(&w);
    std::fputs(render_failure(report).c_str(), stderr);
    // NCCL's flight recorder (on by default for the workers): the dumps a timeout left
    std::vector<std::string> dumps;
    std::error_code ec;
    const std::string dir = attempt_dir();
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
      if (starts_with(e.path().filename().string(), "nccl_trace_rank_")) dumps.push_back(e.path().string());
    std::sort(dumps.begin(), dumps.end());
    if (!dumps.empty())
      note(fmt::format(
          "NCCL flight recorder dumps: {} (read them with: python -m torch.distributed.flight_recorder.fr_trace "
          "{} --prefix nccl_trace_rank_)",
          fmt::join(dumps, " "), dir));
  }

  // Serves the control channel (and signals) until done(), a stopping signal, or `timeout_s`.
  template <class Done>
  void await(Done done, double timeout_s) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(std::min(timeout_s, 1e9)));
    while (!done() && !signal_here() && Clock::now() < deadline) {
      pollfd fds[2] = {{signals_.fd(), POLLIN, 0}, {ctrl_->fd(), ctrl_->poll_events(), 0}};
      int ms = std::min<long long>(
          ctrl_->timeout_ms(),
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count() + 1);
      if (poll(fds, 2, std::max(ms, 0)) < 0 && errno != EINTR) throw SystemError("poll failed: " + errno_text(errno));
      for (int sig; (sig = signals_.next()) != 0;)
        if (is_stop_signal(sig)) on_signal(sig);
      service_control(fds[1].revents);
    }
  }

  // The rendezvous's word on this attempt; of two, the heavier stands (weight()).
  void job_says(AttemptOutcome o) {
    if (!attempt_.verdict || weight(o) > weight(*attempt_.verdict)) attempt_.verdict = std::move(o);
  }

  void stop_for_the_job() {
    if (attempt_.phase == WorkerPhase::kRunning && !all_reaped()) begin_stop(SIGTERM);
  }

  void service_control(short revents) {
    for (auto& m : ctrl_->service(revents)) {
      if (auto* r = std::get_if<msg::Ranks>(&m)) {  // another node's ranks (send_ranks), for this node's verdict
        if (r->attempt != attempt_.number || r->node_rank == cfg_.node_rank) continue;
        for (auto& p : r->ranks) p.host = r->host;
        stall_.set_remote(r->node_rank, std::move(r->ranks));
      } else if (const auto* s = std::get_if<msg::Stop>(&m)) {
        on_stop(*s);
      } else if (const auto* start = std::get_if<msg::Start>(&m)) {
        attempt_.next_port = start->master_port;
      } else if (const auto* assign = std::get_if<msg::Assign>(&m)) {  // elastic: the next attempt's world
        attempt_.next_world = assign->assignment;
      } else if (std::holds_alternative<msg::End>(m)) {
        job_says(Succeeded{});
        ctrl_->expect_close();
      }
    }
    // The server (node 0) is gone: closed, silent, or it sent what is not the protocol.
    if (ctrl_->server_lost() && !(attempt_.verdict && std::holds_alternative<NodeLost>(*attempt_.verdict))) {
      LostNode server = ctrl_->lost_server();
      note(fmt::format("{}: {}", server.describe(), server.why));
      job_says(NodeLost{std::move(server)});
      stop_for_the_job();
    }
  }

  void on_stop(const msg::Stop& s) {
    job_says(std::visit(Overloaded{
                            [&](const RootCause& c) -> AttemptOutcome {
                              return WorkerFailed{c, nullptr, s.restart};
                            },
                            [&](const LostNode& l) -> AttemptOutcome {
                              return NodeLost{l, s.restart};
                            },
                            [](const msg::SignalElsewhere& g) -> AttemptOutcome {
                              return Interrupted{.signal = g.signal, .elsewhere = g};
                            },
                            [](const msg::Admitting& a) -> AttemptOutcome { return Admitted{a.hosts}; },
                        },
                        s.why));
    // The job's end is decided: node 0 may exit before this node has torn down.
    if (!s.restart) ctrl_->expect_close();
    if (attempt_.phase == WorkerPhase::kRunning && !all_reaped()) note(describe_stop(s));
    stop_for_the_job();
  }

  std::string describe_stop(const msg::Stop& s) const {
    return std::visit(
        Overloaded{
            [this](const LostNode& l) {
              if (l.node_rank == cfg_.node_rank)  // told by the rendezvous, e.g. after a freeze (SIGSTOP, VM pause)
                return fmt::format("the rendezvous declared this node lost ({}); stopping this node's workers", l.why);
              return fmt::format("{} ({}); stopping this node's workers", l.describe(), l.why);
            },
            [](const msg::SignalElsewhere& g) {
              return fmt::format("node {} ({}) got {}; stopping this node's workers", g.node_rank, g.host,
                                 signal_name(g.signal));
            },
            [](const RootCause& c) {
              return fmt::format("rank {} on node {} ({}) failed; stopping this node's workers", c.rank, c.node_rank,
                                 c.host);
            },
            [](const msg::Admitting& a) {
              return fmt::format("admitting {} to the job; stopping this node's workers for the new world",
                                 fmt::join(a.hosts, ", "));
            },
        },
        s.why);
  }

  // This node's ranks' progress and kernel view, for the other nodes' stall verdicts.
  void send_ranks() {
    ranks_sent_ = Clock::now();
    ctrl_->send(msg::Ranks{attempt_.number, cfg_.node_rank, host_, stall_.snapshot()});
  }

  // Reaped, or abandoned as unkillable.
  bool all_reaped() const {
    return std::all_of(workers_.begin(), workers_.end(),
                       [this](const Worker& w) { return w.reaped || abandoned_.count(w.pid); });
  }

  // --- rank 0's --json result (util/result_file.h): after all worker output, on success and
  // on failure alike (a partial result can explain a failure), from the last attempt only ---
  int pass_on_result(int code) const {
    if (cfg_.global_rank(0) != 0) return code;  // global rank 0 runs on node rank 0 only
    auto text = read_file(worker_dir(cfg_, 0, attempt_.number) + "/result.json");
    if (!text || text->empty()) return code;  // a worker that does not know the contract
    try {
      forward_result(*text);
    } catch (const Error& e) {
      note(fmt::format("cannot pass on rank 0's result: {}", e.what()));
      if (code == kExitOk) return kExitFailed;  // whoever waits for the result must not see success
    }
    return code;
  }

  SpawnSpec spec_for(int local_rank) const {
    SpawnSpec s;
    s.local_rank = local_rank;
    s.rank = cfg_.global_rank(local_rank);
    s.exe = exe_;
    s.argv = cfg_.command;
    s.env = child_environment(worker_env(cfg_, local_rank, attempt_.number));
    // With several nodes the host tells otherwise identical lines apart (pytorch#117383).
    s.prefix = !cfg_.prefix      ? ""
               : cfg_.nnodes > 1 ? fmt::format("[{}:rank {}] ", host_, s.rank)
                                 : fmt::format("[rank {}] ", s.rank);

    std::string dir = worker_dir(cfg_, local_rank, attempt_.number);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw UsageError(fmt::format("cannot create {}: {}", dir, ec.message()), "pass a writable --log-dir");
    // Stale ones from an earlier run would mislead: an old error as the root cause, an old
    // result passed on as this run's.
    std::filesystem::remove(dir + "/error.json", ec);
    std::filesystem::remove(dir + "/result.json", ec);

    // torchrun's Std: redirects = file only, tee = file and console; --log-dir alone = both.
    const int redirect = cfg_.redirects.of(local_rank), tee = cfg_.tee.of(local_rank);
    const bool shown = cfg_.local_ranks_filter.empty() ||
                       std::binary_search(cfg_.local_ranks_filter.begin(), cfg_.local_ranks_filter.end(), local_rank);
    auto file = [&](int bit) { return cfg_.log_dir_given || ((redirect | tee) & bit); };
    auto console = [&](int bit) { return shown && ((tee & bit) || !(redirect & bit)); };
    if (file(kStdout)) s.stdout_log = dir + "/stdout.log";
    if (file(kStderr)) s.stderr_log = dir + "/stderr.log";
    s.stdout_console = console(kStdout);
    s.stderr_console = console(kStderr);
    return s;
  }

  Worker* find(pid_t pid) {
    for (auto& w : workers_)
      if (w.pid == pid) return &w;
    return nullptr;
  }

  // Signals every worker group: live workers, and the groups of exited ones that still have
  // members (a worker's own children die with it). A worker that already exited but is not
  // reaped yet (two ranks failing within the same few milliseconds) keeps its own story: the
  // signal cannot have caused its end, so the summary must not say it was stopped.
  void signal_all(int sig) {
    for (auto& w : workers_) {
      if (!w.reaped) {
        const bool alive = !w.has_exited();  // peek before the signal: after it, it may be dead from it
        w.signal_group(sig);
        if (alive && (sig == SIGTERM || sig == SIGKILL || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT)) {
          if (!w.stop_signal) w.stop_signal = sig;
          if (sig == SIGKILL) w.sigkill_sent = true;
        }
      } else if (w.group_left) {
        kill(-w.pid, sig);
      }
    }
  }

  void begin_stop(int sig) {
    if (attempt_.phase != WorkerPhase::kRunning) return;
    attempt_.phase = WorkerPhase::kStopping;
    attempt_.stop_signal = sig;
    // Capped at a year so the deadline cannot overflow the clock's 64-bit nanoseconds.
    const double grace = std::min(cfg_.grace_period_s, 365.0 * 24 * 3600);
    attempt_.deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace));
    signal_all(sig);
    // A stopped worker (SIGSTOP, Ctrl-Z, a debugger's group stop) cannot act on the signal
    // until it is continued: SIGCONT right after it, as systemd does.
    signal_all(SIGCONT);
  }

  void kill_now(const std::string& why) {
    if (attempt_.phase == WorkerPhase::kKilling) return;
    attempt_.phase = WorkerPhase::kKilling;
    std::string ranks;
    int n = 0;
    for (const auto& w : workers_) {
      if (w.reaped) continue;
      ++n;
      ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", w.rank);
      // what holds it, when SIGKILL may not free it either
      if (auto k = read_proc(w.pid); k && (k->uninterruptible() || k->stopped()))
        ranks += " (" + describe_state(*k) + ")";
    }
    if (!ranks.empty()) note(fmt::format("{}; sending SIGKILL to rank{} {}", why, n == 1 ? "" : "s", ranks));
    signal_all(SIGKILL);
    attempt_.deadline = Clock::now() + kUnkillableWait;
  }

  // Workers still not reaped kUnkillableWait after SIGKILL: named with what holds them (the
  // kernel's wait channel), then left behind, so the launcher exits instead of hanging on
  // them. They end when their kernel call returns (init reaps them then).
  void abandon_unkillable() {
    for (auto& w : workers_) {
      if (w.reaped || abandoned_.count(w.pid)) continue;
      abandoned_.insert(w.pid);
      stall_.exited(w.pid);
      const auto k = read_proc(w.pid);
      if (k && k->state == 'D')
        note(
            fmt::format("rank {} (pid {}) is unkillable: in uninterruptible sleep in {} ({:d} s after SIGKILL); "
                        "trainbox run exits without it (it ends when that kernel call returns; its node may need a "
                        "reboot if it never does)",
                        w.rank, w.pid, k->wchan.empty() ? std::string("an unknown kernel function") : k->wchan,
                        kUnkillableWait.count()));
      else
        note(fmt::format("rank {} (pid {}) did not end within {:d} s of SIGKILL ({}); trainbox run exits without it",
                         w.rank, w.pid, kUnkillableWait.count(),
                         k ? describe_state(*k) : std::string("state unknown")));
    }
  }

  void on_signal(int sig) {
    if (sig == SIGCHLD) return;  // reap() runs every iteration
    if (sig == SIGUSR1) {        // where is every rank? (the job goes on)
      if (all_reaped()) return;
      note("SIGUSR1: writing every worker's stacks; the job goes on");
      std::vector<RankProgress> ranks;
      for (const auto& p : stall_.snapshot())
        if (!p.finished) ranks.push_back(p);
      print_stacks(ranks, {});
      return;
    }
    if (sig == SIGUSR2) {
      for (auto& w : workers_)
        if (!w.reaped) w.signal_group(sig);
      return;
    }
    // SIGINT, SIGTERM, SIGHUP, SIGQUIT: no restart after it; the first one is the outcome
    stop_requested_ = true;
    const bool first = !signal_here();
    // The other nodes stop too (Slurm's scancel signals every node; a Ctrl-C on one must not
    // leave the rest waiting for a collective).
    if (first && ctrl_) ctrl_->send(msg::Interrupted{attempt_.number, sig});
    if (first) attempt_.cause = LocalSignal{sig};
    if (attempt_.phase == WorkerPhase::kRunning) {
      if (!all_reaped())
        note(fmt::format("got {}; forwarding it to every worker, SIGKILL after {:g} s", signal_name(sig),
                         cfg_.grace_period_s));
      begin_stop(sig);
    } else {
      kill_now(fmt::format("got {} while stopping", signal_name(sig)));
    }
  }

  std::string attempt_dir() const {
    return std::filesystem::path(worker_dir(cfg_, 0, attempt_.number)).parent_path().string();
  }

  void print_stacks(const std::vector<RankProgress>& ranks, const std::vector<int>& culprits) {
    const auto deadline = std::chrono::milliseconds(static_cast<long long>(cfg_.stack_timeout_s * 1000));
    std::string text;
    for (const auto& l : dump_stacks(ranks, culprits, attempt_dir() + "/stacks", deadline)) text += l + "\n";
    std::fputs(text.c_str(), stderr);
  }

  // A worker reported no progress for --stall-timeout: name it and those waiting on it, show
  // where every rank is, then act (--on-stall).
  void on_stall(StallReport r) {
    note(fmt::format("stalled: {} (no progress for {:g} s: --stall-timeout)", r.headline, cfg_.stall_timeout_s));
    print_stacks(r.ranks, r.culprits);
    if (cfg_.on_stall == StallAction::kDump) {
      note("--on-stall dump: the job goes on (stop it with Ctrl-C, or it may recover)");
      return;
    }
    note(cfg_.on_stall == StallAction::kRestart && attempt_.number < cfg_.max_restarts
             ? fmt::format("--on-stall restart: stopping every worker for restart {} of {}", attempt_.number + 1,
                           cfg_.max_restarts)
             : fmt::format("--on-stall {}: stopping every worker (trainbox run exits {})",
                           stall_action_name(cfg_.on_stall), kExitStalled));
    // With c10d the other nodes stop (or restart) with this node: the stall is the root cause.
    if (ctrl_ && !attempt_.verdict) ctrl_->send(msg::Failed{attempt_.number, stall_cause(r)});
    dash_.cause("stalled: " + r.headline, r.culprits.empty() ? -1 : r.culprits.front());
    attempt_.cause = LocalStall{std::move(r)};
    begin_stop(SIGTERM);
  }

  Worker* culprit_worker(const StallReport& r) {
    for (auto& w : workers_)
      if (r.is_culprit(w.rank)) return &w;
    return workers_.empty() ? nullptr : &workers_.front();
  }

  // The stall as a root cause: the first culprit (on this node or, named by the kernel view
  // another node sent, on that one), exit code 124, the headline as its message.
  RootCause stall_cause(const StallReport& r) {
    RootCause c;
    const RankProgress* first = r.culprits.empty() ? nullptr : r.find(r.culprits.front());
    if (first && first->remote) {
      c.host = first->host;
      c.node_rank = first->node_rank;
      c.rank = first->who.rank;
      c.local_rank = first->who.local_rank;
      c.pid = first->who.pid;
    } else {
      if (Worker* w = culprit_worker(r)) c = root_cause(*w);
      c.host = host_;
      c.node_rank = cfg_.node_rank;
    }
    c.signal = 0;
    c.exit_code = kExitStalled;
    c.error_message = "stalled: " + r.headline;
    c.time = std::time(nullptr);
    return c;
  }

  void reap() {
    for (;;) {
      int status = 0;
      pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid < 0 && errno == EINTR) continue;
      if (pid <= 0) return;
      if (pid == watchdog_.pid()) {
        watchdog_.lost();
        note("warning: the watchdog process died; if trainbox run is SIGKILLed now, workers' children may survive");
        continue;
      }
      Worker* w = find(pid);
      if (!w) continue;
      w->reaped = true;
      stall_.exited(pid);
      w->wait_status = status;
      w->ended_at = std::time(nullptr);
      w->group_left = kill(-pid, 0) == 0;
      if (!w->group_left) watchdog_.forget(pid);
      if (w->failed() && attempt_.phase == WorkerPhase::kRunning) {
        attempt_.cause = LocalFailure{w};  // the first failure observed: every later one may be its consequence
        if (dash_.on) dash_.cause(root_cause(*w));
        begin_stop(SIGTERM);
        // The server turns the first report of the job into one stop for every node. What
        // the worker wrote before it died is in its pipes already: read it first, so the
        // stderr tail that travels is complete (the exit can be seen before the last lines).
        if (ctrl_ && !attempt_.verdict) {
          for (Worker::Stream* st : {&w->out, &w->err})
            for (int i = 0; i < 64 && st->pipe; ++i) w->pump(*st);  // ≤ 64 MiB; EAGAIN ends a round at once
          ctrl_->send(msg::Failed{attempt_.number, root_cause(*w)});
        }
      }
    }
  }

  // --- one attempt: spawn, supervise until every worker is reaped, tear down ---
  void run_attempt() {
    workers_.clear();
    abandoned_.clear();
    spawn_all();
    // --- stall detection: each worker's heartbeat file (launch/stall.h) ---
    std::vector<WatchedRank> watched;
    for (const auto& w : workers_)
      watched.push_back({w.rank, w.local_rank, w.pid, worker_dir(cfg_, w.local_rank, attempt_.number) + "/heartbeat"});
    stall_.start(std::move(watched));
    publish_dashboard();
    supervise();
    teardown();
  }

  // Spawns all, then waits for their execs (which overlap). A worker that cannot start takes
  // the others with it (SIGKILL, reaped) and throws.
  void spawn_all() {
    workers_.reserve(static_cast<std::size_t>(cfg_.nproc_per_node));
    try {
      for (int lr = 0; lr < cfg_.nproc_per_node; ++lr) {
        workers_.push_back(spawn_worker(spec_for(lr)));
        watchdog_.watch(workers_.back().pid);
      }
      for (auto& w : workers_) await_exec(w, cfg_.command.front());
    } catch (...) {
      signal_all(SIGKILL);
      for (auto& w : workers_) {
        int st;
        if (!w.reaped)
          while (waitpid(w.pid, &st, 0) < 0 && errno == EINTR) {
          }
        watchdog_.forget(w.pid);
      }
      throw;
    }
  }

  // Every open stream of every worker, for poll(), after `fds`' first entries.
  void add_streams(std::vector<pollfd>& fds, std::vector<std::pair<Worker*, Worker::Stream*>>& owners) {
    owners.assign(fds.size(), {nullptr, nullptr});
    for (auto& w : workers_)
      for (Worker::Stream* s : {&w.out, &w.err})
        if (s->pipe) {
          fds.push_back(pollfd{s->pipe.get(), POLLIN, 0});
          owners.emplace_back(&w, s);
        }
  }

  // How long poll() may sleep: until the phase's deadline, the control channel's next duty,
  // the next stall check; -1 when nothing but an event can change anything.
  int poll_timeout_ms() const {
    int timeout = -1;
    if (attempt_.phase != WorkerPhase::kRunning)
      timeout = static_cast<int>(std::max<long long>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(attempt_.deadline - Clock::now()).count() + 1));
    if (ctrl_) timeout = timeout < 0 ? ctrl_->timeout_ms() : std::min(timeout, ctrl_->timeout_ms());
    // Heartbeats are read every 250 ms: a stall is named within timeout + 0.25 s.
    if (stall_.enabled() && attempt_.phase == WorkerPhase::kRunning)
      timeout = timeout < 0 ? 250 : std::min(timeout, 250);
    if (dash_.on)
      timeout = timeout < 0 ? int(kDashboardEvery.count()) : std::min(timeout, int(kDashboardEvery.count()));
    return timeout;
  }

  // Relays output, handles signals, exits and the control channel until every worker is reaped
  // (or, after SIGKILL, abandoned).
  void supervise() {
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, Worker::Stream*>> owners;
    const std::size_t first_stream = ctrl_ ? 2 : 1;
    for (;;) {
      reap();
      if (all_reaped()) break;
      if (attempt_.phase == WorkerPhase::kStopping && Clock::now() >= attempt_.deadline)
        kill_now(fmt::format("still running {:g} s after {}", cfg_.grace_period_s, signal_name(attempt_.stop_signal)));
      if (attempt_.phase == WorkerPhase::kKilling && Clock::now() >= attempt_.deadline) {
        abandon_unkillable();
        break;
      }
      fds.assign(1, pollfd{signals_.fd(), POLLIN, 0});
      if (ctrl_) fds.push_back(pollfd{ctrl_->fd(), ctrl_->poll_events(), 0});
      add_streams(fds, owners);
      if (poll(fds.data(), fds.size(), poll_timeout_ms()) < 0 && errno != EINTR)
        throw SystemError("poll failed: " + errno_text(errno));

      for (int sig; (sig = signals_.next()) != 0;) on_signal(sig);
      if (ctrl_) service_control(fds[1].revents);
      for (std::size_t i = first_stream; i < fds.size(); ++i)
        if (fds[i].revents) owners[i].first->pump(*owners[i].second);
      if (stall_.enabled() && attempt_.phase == WorkerPhase::kRunning) {
        if (auto r = stall_.check())
          on_stall(std::move(*r));
        else if (ctrl_ && Clock::now() - ranks_sent_ >= kRanksEvery)
          send_ranks();
      }
      if (dash_.on && Clock::now() - dash_.published >= kDashboardEvery) publish_dashboard();
    }
  }

  // --- trainbox run --dashboard: what this launcher knows, handed over (a copy, no waiting) ---
  static std::string describe_cause(const RootCause& c) {
    std::string how = c.signal ? "killed by " + signal_name(c.signal) : fmt::format("exit code {}", c.exit_code);
    if (c.rank < 0)
      return fmt::format("node {} ({}) could not start its workers: {}", c.node_rank, c.host, c.error_message);
    return fmt::format("rank {} (local rank {}, pid {}) on node {} ({}): {}{}", c.rank, c.local_rank, c.pid,
                       c.node_rank, c.host, how, c.error_message.empty() ? "" : " — " + c.error_message);
  }

  void publish_dashboard() {
    if (!dash_.on) return;
    dash_.published = Clock::now();
    DashboardInput in;
    DashJob& j = in.job;
    j.command = dashboard::redact_command(cfg_.command);
    j.run_id = cfg_.run_id;
    j.host = host_;
    j.nnodes = cfg_.nnodes;
    j.world_size = cfg_.world_size();
    j.node_rank = cfg_.node_rank;
    j.attempt = attempt_.number;
    j.max_restarts = cfg_.max_restarts;
    j.stall_timeout_s = cfg_.stall_timeout_s;
    j.root_cause = dash_.root_cause;
    j.root_cause_rank = dash_.root_cause_rank;
    j.exit_code = dash_.exit_code;
    j.status = !dash_.status.empty() ? dash_.status : attempt_.phase == WorkerPhase::kRunning ? "running" : "stopping";
    const std::vector<RankProgress> ranks = stall_.everyone();
    for (const auto& p : ranks) {
      DashRank r;
      r.rank = p.who.rank;
      r.local_rank = p.who.local_rank;
      r.node_rank = p.remote ? p.node_rank : j.node_rank;
      r.host = p.remote ? p.host : j.host;
      r.pid = p.who.pid;
      r.reporting = p.reporting;
      r.finished = p.finished;
      r.step = p.step;
      r.phase = p.phase;
      r.state = p.kernel.known ? p.kernel.state : '?';
      r.heartbeat_age_s = p.reporting ? p.idle_s : -1;
      in.ranks.push_back(std::move(r));
    }
    if (stall_.enabled())
      if (auto r = judge_stall(ranks, cfg_.stall_timeout_s, /*any_node=*/true)) {
        in.stalled = r->stalled;
        in.culprits = r->culprits;
        j.stall_headline = r->headline;
        if (dash_.status.empty()) j.status = "stalled";
      }
    if (cfg_.log_dir_given)
      for (const auto& w : workers_) in.log_dirs.emplace_back(w.rank, worker_dir(cfg_, w.local_rank, attempt_.number));
    dash_.board->publish(std::move(in));
  }

  // Nothing of this attempt outlives it: leftover process groups, open pipes.
  void teardown() {
    for (auto& w : workers_)
      if (w.group_left && kill(-w.pid, SIGKILL) == 0)
        note(fmt::format("killed processes left in rank {}'s process group after it exited", w.rank));
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, Worker::Stream*>> owners;
    for (auto deadline = Clock::now() + kDrainWait;;) {
      fds.clear();
      add_streams(fds, owners);
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (fds.empty() || left <= 0) break;
      if (poll(fds.data(), fds.size(), static_cast<int>(left)) < 0 && errno != EINTR) break;
      for (std::size_t i = 0; i < fds.size(); ++i)
        if (fds[i].revents) owners[i].first->pump(*owners[i].second);
    }
    for (auto& w : workers_) {
      w.close_streams();
      watchdog_.forget(w.pid);
    }
    // Signals that arrived after the last exit still count (e.g. Ctrl-C during teardown).
    for (int sig; (sig = signals_.next()) != 0;)
      if (sig != SIGCHLD && sig != SIGUSR1 && sig != SIGUSR2) {
        stop_requested_ = true;
        if (ctrl_ && !signal_here()) on_signal(sig);
      }
  }

  RunConfig cfg_;  // a copy: the c10d rendezvous fills in the node rank, the world and the master
  std::string exe_;
  SignalScope& signals_;
  Watchdog& watchdog_;
  std::string host_;

  std::vector<Worker> workers_;  // this attempt's
  Attempt attempt_;
  bool stop_requested_ = false;  // a stopping signal came: no restart, whatever the outcome
  std::set<pid_t> abandoned_;    // unkillable workers left behind (abandon_unkillable)
  Clock::time_point ranks_sent_{};
  StallWatch stall_{cfg_.stall_timeout_s};
  // --dashboard: what is published besides the ranks (the job's end, the last root cause)
  struct DashboardFeed {
    explicit DashboardFeed(Dashboard* d) : board(d), on(d != nullptr) {}
    Dashboard* board;
    bool on;
    Clock::time_point published{};
    std::string status, root_cause;  // status "" while the job runs
    int root_cause_rank = -1;        // the rank root_cause names, while its logs are this attempt's
    int exit_code = -1;
    void cause(std::string what, int rank = -1) {
      root_cause = std::move(what);
      root_cause_rank = rank;
    }
    void cause(const RootCause& c) { cause(describe_cause(c), c.rank); }
  } dash_;

  // --- c10d only ---
  std::unique_ptr<RendezvousServer> server_;  // when this launcher hosts the rendezvous
  std::unique_ptr<ControlClient> ctrl_;       // set once this node has joined
  int first_attempt_ = 0;                     // elastic: a node admitted later starts at the job's attempt
  Assignment world_;                          // this attempt's world, as the rendezvous assigned it
};

}  // namespace

int launch(const RunConfig& given) {
  RunConfig cfg = given;
  for (const auto& n : cfg.notes) note(n);
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
  std::unique_ptr<Dashboard> dash;
  if (cfg.dashboard.enabled()) {
    std::error_code ec;
    dash = Dashboard::start(cfg.dashboard, std::filesystem::current_path(ec).string());
    note(fmt::format("dashboard: {} (/metrics for Prometheus)", dash->url()));
  }
  return Supervisor(cfg, exe, signals, watchdog, dash.get()).run();
}

}  // namespace trainbox::launch
