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
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <trainbox/launch/ports.h>
#include <trainbox/util/errors.h>
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

// After the last worker exits, how long to wait for its pipes to reach EOF. Only a process
// that left the worker's group (setsid) can keep them open beyond a few milliseconds.
constexpr std::chrono::milliseconds kDrainWait{500};

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

// A mkdtemp folder for error files when there is no --log-dir; removed unless kept.
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
    std::error_code ec;
    if (!path_.empty() && !keep_) std::filesystem::remove_all(path_, ec);
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

std::string host_name() {
  char buf[256] = {};
  return gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string("?");
}

std::string join_command(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s.size() > 120 ? s.substr(0, 117) + "..." : s;
}

// --- one job: attempts, each a set of workers from spawn to the last exit ---
class Supervisor {
 public:
  Supervisor(const RunConfig& cfg, std::string exe, SignalScope& signals, Watchdog& watchdog)
      : cfg_(cfg), exe_(std::move(exe)), signals_(signals), watchdog_(watchdog), host_(host_name()) {}

  int run() {
    int last_attempt = 0;
    const int code = run_attempts(last_attempt);
    return pass_on_result(last_attempt, code);
  }

 private:
  // Attempts until one succeeds, the restarts are used up or a signal stops the job; returns
  // the launcher's exit code and leaves the last attempt's number in `attempt`.
  int run_attempts(int& attempt) {
    for (attempt = 0;; ++attempt) {
      run_attempt(attempt);
      if (interrupted_) {
        note(fmt::format("stopped {} worker{} after {}", workers_.size(), workers_.size() == 1 ? "" : "s",
                         signal_name(interrupted_)));
        return 128 + interrupted_;
      }
      if (!root_) return kExitOk;
      const Worker& r = *root_;
      if (attempt < cfg_.max_restarts && !stop_requested_) {
        note(fmt::format("rank {} (local_rank {}) failed with {}; restarting all {} workers (restart {} of {})", r.rank,
                         r.local_rank, describe_wait_status(r.wait_status), workers_.size(), attempt + 1,
                         cfg_.max_restarts));
        continue;
      }
      FailureReport report;
      report.command = join_command(cfg_.command);
      report.host = host_;
      report.restarts = attempt;
      report.root = root_;
      report.root_error_file = worker_dir(cfg_, r.local_rank, attempt) + "/error.json";
      for (const auto& w : workers_)
        if (&w != root_) report.others.push_back(&w);
      std::fputs(render_failure(report).c_str(), stderr);
      return exit_code_of(r.wait_status);
    }
  }

  // --- rank 0's --json result (util/result_file.h): after all worker output, on success and
  // on failure alike (a partial result can explain a failure), from the last attempt only ---
  int pass_on_result(int attempt, int code) const {
    if (cfg_.global_rank(0) != 0) return code;  // global rank 0 runs on node rank 0 only
    auto text = read_file(worker_dir(cfg_, 0, attempt) + "/result.json");
    if (!text || text->empty()) return code;  // a worker that does not know the contract
    try {
      forward_result(*text);
    } catch (const Error& e) {
      note(fmt::format("cannot pass on rank 0's result: {}", e.what()));
      if (code == kExitOk) return kExitFailed;  // whoever waits for the result must not see success
    }
    return code;
  }

  SpawnSpec spec_for(int local_rank, int attempt) const {
    SpawnSpec s;
    s.local_rank = local_rank;
    s.rank = cfg_.global_rank(local_rank);
    s.exe = exe_;
    s.argv = cfg_.command;
    s.env = child_environment(worker_env(cfg_, local_rank, attempt));
    s.child_mask = signals_.original_mask();
    s.prefix = cfg_.prefix ? fmt::format("[rank {}] ", s.rank) : "";

    std::string dir = worker_dir(cfg_, local_rank, attempt);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
      throw UsageError(fmt::format("cannot create {}: {}", dir, ec.message()), "pass a writable --log-dir");
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
    if (stopping_) return;
    stopping_ = true;
    stop_signal_ = sig;
    // Capped at a year so the deadline cannot overflow the clock's 64-bit nanoseconds.
    const double grace = std::min(cfg_.grace_period_s, 365.0 * 24 * 3600);
    kill_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace));
    signal_all(sig);
  }

  void kill_now(const std::string& why) {
    if (killed_) return;
    killed_ = true;
    std::string ranks;
    for (const auto& w : workers_)
      if (!w.reaped) ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", w.rank);
    if (!ranks.empty())
      note(fmt::format("{}; sending SIGKILL to rank{} {}", why, ranks.find(',') == std::string::npos ? "" : "s",
                       ranks));
    signal_all(SIGKILL);
  }

  void on_signal(int sig) {
    if (sig == SIGCHLD) return;  // reap() runs every iteration
    if (sig == SIGUSR1 || sig == SIGUSR2) {
      for (auto& w : workers_)
        if (!w.reaped) w.signal_group(sig);
      return;
    }
    // SIGINT, SIGTERM, SIGHUP, SIGQUIT
    stop_requested_ = true;
    if (!stopping_) {
      interrupted_ = sig;
      note(fmt::format("got {}; forwarding it to every worker, SIGKILL after {:g} s", signal_name(sig),
                       cfg_.grace_period_s));
      begin_stop(sig);
    } else {
      kill_now(fmt::format("got {} while stopping", signal_name(sig)));
    }
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
      w->wait_status = status;
      w->ended_at = std::time(nullptr);
      w->group_left = kill(-pid, 0) == 0;
      if (!w->group_left) watchdog_.forget(pid);
      if (w->failed() && !stopping_) {
        root_ = w;  // the first failure observed: every later one may be its consequence
        begin_stop(SIGTERM);
      }
    }
  }

  void run_attempt(int attempt) {
    workers_.clear();
    workers_.reserve(static_cast<std::size_t>(cfg_.nproc_per_node));
    root_ = nullptr;
    stopping_ = killed_ = false;

    // --- spawn all, then wait for their execs (which overlap) ---
    try {
      for (int lr = 0; lr < cfg_.nproc_per_node; ++lr) {
        workers_.push_back(spawn_worker(spec_for(lr, attempt)));
        watchdog_.watch(workers_.back().pid);
      }
      for (auto& w : workers_) await_exec(w, cfg_.command.front());
    } catch (...) {
      signal_all(SIGKILL);
      for (auto& w : workers_) {
        int st;
        if (!w.reaped)
          while (waitpid(w.pid, &st, 0) < 0 && errno == EINTR) {}
        watchdog_.forget(w.pid);
      }
      throw;
    }

    // --- supervise: relay output, handle signals and exits until every worker is reaped ---
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, Worker::Stream*>> owners;
    for (;;) {
      reap();
      if (std::all_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.reaped; })) break;
      if (stopping_ && !killed_ && Clock::now() >= kill_at_)
        kill_now(fmt::format("still running {:g} s after {}", cfg_.grace_period_s, signal_name(stop_signal_)));

      fds.assign(1, pollfd{signals_.fd(), POLLIN, 0});
      owners.assign(1, {nullptr, nullptr});
      for (auto& w : workers_)
        for (Worker::Stream* s : {&w.out, &w.err})
          if (s->pipe) {
            fds.push_back(pollfd{s->pipe.get(), POLLIN, 0});
            owners.emplace_back(&w, s);
          }
      int timeout = -1;
      if (stopping_ && !killed_)
        timeout = static_cast<int>(std::max<long long>(
            0, std::chrono::duration_cast<std::chrono::milliseconds>(kill_at_ - Clock::now()).count() + 1));
      if (poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR)
        throw SystemError("poll failed: " + errno_text(errno));

      for (int sig; (sig = signals_.next()) != 0;) on_signal(sig);
      for (std::size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents) owners[i].first->pump(*owners[i].second);
    }

    // --- teardown: nothing of this attempt outlives it ---
    for (auto& w : workers_)
      if (w.group_left && kill(-w.pid, SIGKILL) == 0)
        note(fmt::format("killed processes left in rank {}'s process group after it exited", w.rank));
    for (auto deadline = Clock::now() + kDrainWait;;) {
      fds.clear();
      owners.clear();
      for (auto& w : workers_)
        for (Worker::Stream* s : {&w.out, &w.err})
          if (s->pipe) {
            fds.push_back(pollfd{s->pipe.get(), POLLIN, 0});
            owners.emplace_back(&w, s);
          }
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
      if (sig != SIGCHLD && sig != SIGUSR1 && sig != SIGUSR2) stop_requested_ = true;
  }

  const RunConfig& cfg_;
  std::string exe_;
  SignalScope& signals_;
  Watchdog& watchdog_;
  std::string host_;

  std::vector<Worker> workers_;
  Worker* root_ = nullptr;
  bool stopping_ = false, killed_ = false, stop_requested_ = false;
  int interrupted_ = 0;
  int stop_signal_ = SIGTERM;
  Clock::time_point kill_at_{};
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
  } else if (cfg.node_rank == 0) {
    check_port_available(cfg.master_addr, cfg.master_port);
  }

  // --- where error files (and logs) go ---
  const bool streams_to_files = cfg.redirects.all || cfg.tee.all || !cfg.redirects.by_local_rank.empty() ||
                                !cfg.tee.by_local_rank.empty();
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
    note(fmt::format("OMP_NUM_THREADS is not set; setting it to 1 for each of the {} workers so they do not "
                     "oversubscribe the CPU (set it yourself to tune)",
                     cfg.nproc_per_node));

  SignalScope signals;
  Watchdog watchdog = Watchdog::start(cfg.log_dir_given || streams_to_files ? std::string() : temp.path());
  return Supervisor(cfg, exe, signals, watchdog).run();
}

}  // namespace trainbox::launch
