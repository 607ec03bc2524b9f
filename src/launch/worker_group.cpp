#include "worker_group.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>

#include <trainbox/launch/proc_state.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/clock.h>

#include "console.h"
#include "failure_report.h"

extern char** environ;

namespace trainbox::launch {

namespace {

// After the last worker exits, how long to wait for its pipes to reach EOF. Only a process
// that left the worker's group (setsid) can keep them open beyond a few milliseconds.
constexpr std::chrono::milliseconds kDrainWait{500};
// After SIGKILL, how long a worker may take to be reaped before the launcher gives up on it.
// SIGKILL ends a process at once, except one in uninterruptible sleep (D: a dead NFS mount, a
// hung driver call), which ends only when that kernel call returns — maybe never. 5 s: a
// process freeing a large GPU context can take a few seconds to exit.
constexpr std::chrono::seconds kUnkillableWait{5};

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

// What worker `local_rank` of attempt `attempt` gets: torchrun's environment, its log files,
// its console prefix. Creates its folder (UsageError when it cannot) and removes stale files.
SpawnSpec spawn_spec(const RunConfig& cfg, const std::string& exe, const std::string& host, int local_rank,
                     int attempt) {
  SpawnSpec s;
  s.local_rank = local_rank;
  s.rank = cfg.global_rank(local_rank);
  s.exe = exe;
  s.argv = cfg.command;
  s.env = child_environment(worker_env(cfg, local_rank, attempt));
  // With several nodes the host tells otherwise identical lines apart (pytorch#117383).
  s.prefix = !cfg.prefix      ? ""
             : cfg.nnodes > 1 ? fmt::format("[{}:rank {}] ", host, s.rank)
                              : fmt::format("[rank {}] ", s.rank);

  std::string dir = worker_dir(cfg, local_rank, attempt);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UsageError(fmt::format("cannot create {}: {}", dir, ec.message()), "pass a writable --log-dir");
  // Stale ones from an earlier run would mislead: an old error as the root cause, an old
  // result passed on as this run's.
  std::filesystem::remove(dir + "/error.json", ec);
  std::filesystem::remove(dir + "/result.json", ec);

  // torchrun's Std: redirects = file only, tee = file and console; --log-dir alone = both.
  const int redirect = cfg.redirects.of(local_rank), tee = cfg.tee.of(local_rank);
  const bool shown = cfg.local_ranks_filter.empty() ||
                     std::binary_search(cfg.local_ranks_filter.begin(), cfg.local_ranks_filter.end(), local_rank);
  auto file = [&](int bit) { return cfg.log_dir_given || ((redirect | tee) & bit); };
  auto console = [&](int bit) { return shown && ((tee & bit) || !(redirect & bit)); };
  if (file(kStdout)) s.stdout_log = dir + "/stdout.log";
  if (file(kStderr)) s.stderr_log = dir + "/stderr.log";
  s.stdout_console = console(kStdout);
  s.stderr_console = console(kStderr);
  return s;
}

}  // namespace

void WorkerGroup::spawn(int number) {
  number_ = number;
  phase_ = WorkerPhase::kRunning;
  stop_signal_ = SIGTERM;
  deadline_ = {};
  cause_.reset();
  workers_.clear();
  abandoned_.clear();
  workers_.reserve(static_cast<std::size_t>(cfg_.nproc_per_node));
  try {
    for (int lr = 0; lr < cfg_.nproc_per_node; ++lr) {
      workers_.push_back(spawn_worker(spawn_spec(cfg_, exe_, host_, lr, number_)));
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

std::vector<WatchedRank> WorkerGroup::watched() const {
  std::vector<WatchedRank> watched;
  for (const auto& w : workers_)
    watched.push_back({w.rank, w.local_rank, w.pid, worker_dir(cfg_, w.local_rank, number_) + "/heartbeat"});
  return watched;
}

std::vector<std::pair<int, std::string>> WorkerGroup::log_dirs() const {
  std::vector<std::pair<int, std::string>> dirs;
  for (const auto& w : workers_) dirs.emplace_back(w.rank, worker_dir(cfg_, w.local_rank, number_));
  return dirs;
}

std::string WorkerGroup::attempt_dir() const {
  return std::filesystem::path(worker_dir(cfg_, 0, number_)).parent_path().string();
}

int WorkerGroup::signal_here() const {
  const auto* s = cause_ ? std::get_if<LocalSignal>(&*cause_) : nullptr;
  return s ? s->signal : 0;
}

Worker* WorkerGroup::find(pid_t pid) {
  for (auto& w : workers_)
    if (w.pid == pid) return &w;
  return nullptr;
}

WorkerGroup::Reaped WorkerGroup::reap() {
  Reaped r;
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return r;
    if (pid == watchdog_.pid()) {
      watchdog_.lost();
      note("warning: the watchdog process died; if trainbox run is SIGKILLed now, workers' children may survive");
      continue;
    }
    Worker* w = find(pid);
    if (!w) continue;
    w->reaped = true;
    r.ended.push_back(pid);
    w->wait_status = status;
    w->ended_at = std::time(nullptr);
    w->group_left = kill(-pid, 0) == 0;
    if (!w->group_left) watchdog_.forget(pid);
    if (w->failed() && phase_ == WorkerPhase::kRunning) {
      cause_ = LocalFailure{w};  // the first failure observed: every later one may be its consequence
      r.failed = w;
      begin_stop(SIGTERM);
    }
  }
}

bool WorkerGroup::all_reaped() const {
  return std::all_of(workers_.begin(), workers_.end(),
                     [this](const Worker& w) { return w.reaped || abandoned_.count(w.pid); });
}

// Signals every worker group: live workers, and the groups of exited ones that still have
// members (a worker's own children die with it). A worker that already exited but is not
// reaped yet (two ranks failing within the same few milliseconds) keeps its own story: the
// signal cannot have caused its end, so the summary must not say it was stopped.
void WorkerGroup::signal_all(int sig) {
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

void WorkerGroup::forward(int sig) {
  for (auto& w : workers_)
    if (!w.reaped) w.signal_group(sig);
}

void WorkerGroup::begin_stop(int sig) {
  if (phase_ != WorkerPhase::kRunning) return;
  phase_ = WorkerPhase::kStopping;
  stop_signal_ = sig;
  deadline_ = Clock::now() + seconds(cfg_.grace_period_s);  // capped: the deadline cannot overflow
  signal_all(sig);
  // A stopped worker (SIGSTOP, Ctrl-Z, a debugger's group stop) cannot act on the signal
  // until it is continued: SIGCONT right after it, as systemd does.
  signal_all(SIGCONT);
}

void WorkerGroup::kill_now(const std::string& why) {
  if (phase_ == WorkerPhase::kKilling) return;
  phase_ = WorkerPhase::kKilling;
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
  deadline_ = Clock::now() + kUnkillableWait;
}

bool WorkerGroup::enforce_deadline(std::vector<pid_t>& abandoned) {
  if (phase_ == WorkerPhase::kStopping && Clock::now() >= deadline_)
    kill_now(fmt::format("still running {:g} s after {}", cfg_.grace_period_s, signal_name(stop_signal_)));
  if (phase_ == WorkerPhase::kKilling && Clock::now() >= deadline_) {
    abandon_unkillable(abandoned);
    return true;
  }
  return false;
}

int WorkerGroup::deadline_ms() const {
  if (phase_ == WorkerPhase::kRunning) return -1;
  return static_cast<int>(std::max<long long>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count() + 1));
}

// Workers still not reaped kUnkillableWait after SIGKILL: named with what holds them (the
// kernel's wait channel), then left behind, so the launcher exits instead of hanging on
// them. They end when their kernel call returns (init reaps them then).
void WorkerGroup::abandon_unkillable(std::vector<pid_t>& abandoned) {
  for (auto& w : workers_) {
    if (w.reaped || abandoned_.count(w.pid)) continue;
    abandoned_.insert(w.pid);
    abandoned.push_back(w.pid);
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
                       w.rank, w.pid, kUnkillableWait.count(), k ? describe_state(*k) : std::string("state unknown")));
  }
}

void WorkerGroup::add_streams(std::vector<pollfd>& fds, std::vector<std::pair<Worker*, Worker::Stream*>>& owners) {
  owners.assign(fds.size(), {nullptr, nullptr});
  for (auto& w : workers_)
    for (Worker::Stream* s : {&w.out, &w.err})
      if (s->pipe) {
        fds.push_back(pollfd{s->pipe.get(), POLLIN, 0});
        owners.emplace_back(&w, s);
      }
}

void WorkerGroup::drain_pipes(Worker& w) {
  for (Worker::Stream* st : {&w.out, &w.err})
    for (int i = 0; i < 64 && st->pipe; ++i) w.pump(*st);  // ≤ 64 MiB; EAGAIN ends a round at once
}

void WorkerGroup::drain() {
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
}

RootCause WorkerGroup::root_cause(const Worker& w) const {
  return root_cause_of(w, host_, cfg_.node_rank, worker_dir(cfg_, w.local_rank, number_) + "/error.json");
}

}  // namespace trainbox::launch
