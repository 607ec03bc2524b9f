#include <trainbox/launch/stall.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <trainbox/launch/proc_state.h>
#include <trainbox/launch/stacks.h>
#include <trainbox/util/heartbeat.h>
#include <trainbox/util/clock.h>

namespace trainbox::launch {

namespace {

// Phases in which a rank waits for the others: trainbox train's allreduce, barrier and
// rendezvous (its record while the process group forms), and the other collectives a Python
// worker's instrumentation reports (python/trainbox/_instrument.py).
bool waiting_phase(const std::string& p) {
  static const std::set<std::string, std::less<>> kWaiting = {"allreduce",  "barrier",        "rendezvous", "broadcast",
                                                              "all_gather", "reduce_scatter", "all_to_all", "reduce",
                                                              "gather",     "scatter",        "send",       "recv"};
  return kWaiting.count(p) > 0;
}

// Idle for this long before /proc is sampled: healthy ranks change their record many times a
// second and cost nothing; a stall window loses at most this much of its samples.
constexpr double kSampleAfterIdleS = 1.0;

std::string read_record(const std::string& path) {
  char buf[kHeartbeatBytes] = {};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  ::close(fd);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("rank{} {}", ranks.size() == 1 ? "" : "s", fmt::join(ranks, ", "));
}

std::string who(const RankProgress& p) {
  return p.remote ? fmt::format("rank {} (pid {} on {})", p.who.rank, p.who.pid, p.host)
                  : fmt::format("rank {} (pid {})", p.who.rank, p.who.pid);
}

ProcSample as_sample(const KernelView& k) {
  ProcSample s;
  s.state = k.state;
  s.wchan = k.frozen && k.wchan.empty() ? "do_freezer_trap" : k.wchan;
  if (k.state == 'D') {
    s.wchan = k.d_wchan.empty() ? k.wchan : k.d_wchan;
    s.d_tid = k.d_tid;
  }
  return s;
}

// ", last in `allreduce` at step 663 5.0 s ago" / " before its first heartbeat"
std::string last_seen(const RankProgress& p) {
  return p.reporting ? fmt::format(", last in `{}` at step {} {:.1f} s ago", p.phase, p.step, p.idle_s)
                     : std::string(" before its first heartbeat");
}

// The culprit tiers of the rule (stall.h): 0 stopped, 1 in D, 2 not waiting, 3 waiting.
int tier(const RankProgress& p) {
  if (p.kernel.stopped()) return 0;
  if (p.kernel.mostly_d()) return 1;
  if (!p.reporting || !waiting_phase(p.phase)) return 2;
  return 3;
}

}  // namespace

bool StallReport::is_culprit(int rank) const {
  return std::find(culprits.begin(), culprits.end(), rank) != culprits.end();
}

const RankProgress* StallReport::find(int rank) const {
  for (const auto& p : ranks)
    if (p.who.rank == rank) return &p;
  return nullptr;
}

void StallWatch::start(std::vector<WatchedRank> ranks, Clock::time_point now) {
  ranks_.clear();
  remote_.clear();
  reported_ = false;
  for (auto& r : ranks) {
    State s;
    s.who = std::move(r);
    s.changed = now;
    ranks_.push_back(std::move(s));
  }
}

void StallWatch::exited(pid_t pid) {
  for (auto& s : ranks_)
    if (s.who.pid == pid) s.exited = true;
}

void StallWatch::set_remote(int node_rank, std::vector<RankProgress> ranks, Clock::time_point now) {
  for (auto& p : ranks) {
    p.remote = true;
    p.node_rank = node_rank;
  }
  for (auto& [n, r] : remote_)
    if (n == node_rank) {
      r = Remote{std::move(ranks), now};
      return;
    }
  remote_.emplace_back(node_rank, Remote{std::move(ranks), now});
}

void StallWatch::read_all(Clock::time_point now) {
  for (auto& s : ranks_) {
    if (s.exited) continue;
    const std::string rec = read_record(s.who.heartbeat_path);
    const auto parsed = parse_heartbeat(rec);
    if (parsed && rec != s.last) {  // none yet, or a torn record: look again next time
      if (!s.reporting) s.first_record = now;
      s.last = rec;
      s.changed = now;
      s.reporting = true;
      s.step = parsed->step;
      s.phase = parsed->phase;
      s.samples.clear();
      reported_ = false;  // progress re-arms the detector
      continue;
    }
    // --- idle (or no record yet): the kernel's view ---
    if (s.reporting && to_seconds(now - s.changed) < kSampleAfterIdleS) continue;
    const auto k = read_proc(s.who.pid, proc_root_);
    if (!k) continue;
    s.samples.push_back({now, k->state, k->frozen(), k->cpu_ticks, k->wchan, static_cast<int>(k->d_tid)});
    // keep the window, plus the sample just before it (the CPU time at its start)
    const auto window_start = now - seconds(timeout_s_);
    std::size_t drop = 0;
    while (drop + 1 < s.samples.size() && s.samples[drop + 1].at <= window_start) ++drop;
    s.samples.erase(s.samples.begin(), s.samples.begin() + static_cast<long>(drop));
  }
}

KernelView StallWatch::kernel_view(const State& s, Clock::time_point now) const {
  KernelView v;
  if (s.samples.empty()) return v;
  const Sample& last = s.samples.back();
  v.known = true;
  v.state = last.state;
  v.frozen = last.frozen;
  v.wchan = last.wchan;
  auto stopped = [](const Sample& x) { return x.state == 'T' || x.state == 't' || x.frozen; };
  if (stopped(last)) {
    std::size_t i = s.samples.size() - 1;
    while (i > 0 && stopped(s.samples[i - 1])) --i;
    v.stopped_s = to_seconds(now - s.samples[i].at);
  }
  const auto window_start = std::max(s.samples.front().at, now - seconds(timeout_s_));
  v.window_s = to_seconds(now - window_start);
  // time in D: each sample's state holds until the next one (or until now)
  for (std::size_t i = 0; i < s.samples.size(); ++i) {
    const Sample& x = s.samples[i];
    if (x.state != 'D' || x.frozen) continue;
    const auto from = std::max(x.at, window_start);
    const auto to = i + 1 < s.samples.size() ? s.samples[i + 1].at : now;
    if (to > from) v.d_s += to_seconds(to - from);
    v.d_wchan = x.wchan;
    v.d_tid = x.d_tid;
  }
  const std::uint64_t first_ticks = s.samples.front().cpu_ticks;
  v.cpu_s =
      last.cpu_ticks >= first_ticks ? static_cast<double>(last.cpu_ticks - first_ticks) / clock_ticks_per_second() : 0;
  return v;
}

std::vector<RankProgress> StallWatch::snapshot(Clock::time_point now) {
  read_all(now);
  std::vector<RankProgress> out;
  for (const auto& s : ranks_) {
    RankProgress p;
    p.who = s.who;
    p.reporting = s.reporting;
    p.finished = s.exited || s.phase == "done";
    p.step = s.step;
    p.phase = s.phase;
    p.idle_s = to_seconds(now - s.changed);
    p.reporting_s = s.reporting ? to_seconds(now - s.first_record) : 0;
    if (!p.finished) p.kernel = kernel_view(s, now);
    out.push_back(p);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.who.rank < b.who.rank; });
  return out;
}

std::vector<RankProgress> StallWatch::everyone(Clock::time_point now) {
  std::vector<RankProgress> all = snapshot(now);
  for (const auto& [node, r] : remote_) {
    const double age = std::max(0.0, to_seconds(now - r.received));
    for (RankProgress p : r.ranks) {  // as of now, not as of when it was sent
      p.idle_s += age;
      if (p.reporting) p.reporting_s += age;
      if (p.kernel.stopped()) p.kernel.stopped_s += age;
      all.push_back(std::move(p));
    }
  }
  return all;
}

std::optional<StallReport> StallWatch::check(Clock::time_point now) {
  if (!enabled() || ranks_.empty()) return std::nullopt;
  if (reported_) {
    snapshot(now);  // still reads the records: progress re-arms the report
    return std::nullopt;
  }
  auto r = judge_stall(everyone(now), timeout_s_);
  if (r) reported_ = true;
  return r;
}

namespace {

// The headline's words for one culprit: frozen or stopped, in D, silent since start-up, or in
// a phase for too long (`by_cpu`: picked because its CPU time stood still). `reporters`: the
// ranks that write heartbeats.
std::string culprit_text(const RankProgress& p, double timeout_s, const std::vector<int>& reporters, bool by_cpu) {
  std::string d;
  if (p.kernel.stopped()) {
    d = p.kernel.frozen && p.kernel.state != 'T' && p.kernel.state != 't'
            ? fmt::format("{} is frozen by a cgroup freezer (in {})", who(p), p.kernel.wchan)
            : fmt::format("{} is stopped ({})", who(p), describe_state(as_sample(p.kernel)));
    d += last_seen(p);
  } else if (p.kernel.mostly_d()) {
    const std::string wchan = p.kernel.d_wchan.empty() ? std::string("an unknown kernel function") : p.kernel.d_wchan;
    d = fmt::format("{} is in uninterruptible sleep in {} (D for {:.1f} s of {:g} s{})", who(p), wchan, p.kernel.d_s,
                    timeout_s, p.kernel.d_tid ? fmt::format(", thread {}", p.kernel.d_tid) : std::string());
    d += last_seen(p);
  } else if (!p.reporting) {
    std::vector<int> others;
    for (int x : reporters)
      if (x != p.who.rank) others.push_back(x);
    d = others.empty() ? fmt::format("{} has written no heartbeat in {:.1f} s", who(p), p.idle_s)
                       : fmt::format("start-up stall: {} has written no heartbeat in {:.1f} s while {} {}", who(p),
                                     p.idle_s, rank_list(others), others.size() == 1 ? "has" : "have");
    if (p.kernel.known) d += fmt::format(" ({})", describe_state(as_sample(p.kernel)));
  } else {
    d = fmt::format("{} has been in `{}` at step {} for {:.1f} s", who(p), p.phase, p.step, p.idle_s);
    if (by_cpu)
      d += fmt::format(" (its CPU time stood still: {:.2f} s in {:.1f} s)", p.kernel.cpu_s, p.kernel.window_s);
  }
  return d;
}

}  // namespace

std::optional<StallReport> judge_stall(std::vector<RankProgress> ranks, double timeout_s, bool any_node) {
  std::sort(ranks.begin(), ranks.end(), [](const auto& a, const auto& b) { return a.who.rank < b.who.rank; });
  StallReport r;
  r.ranks = std::move(ranks);
  // --- who is stalled ---
  double longest_reporting = 0;  // among all ranks: has another rank been writing for the timeout?
  for (const auto& p : r.ranks)
    if (p.reporting && !p.finished) longest_reporting = std::max(longest_reporting, p.reporting_s);
  std::vector<int> reporters;
  for (const auto& p : r.ranks)
    if (p.reporting) reporters.push_back(p.who.rank);
  bool local_stalled = false;
  std::vector<const RankProgress*> stalled;
  for (const auto& p : r.ranks) {
    if (p.finished) continue;
    bool is = false;
    if (p.reporting) {
      is = p.idle_s >= timeout_s;
    } else {
      const bool startup = p.idle_s >= timeout_s && longest_reporting >= timeout_s;
      const bool kernel = p.idle_s >= timeout_s && (p.kernel.stopped_s >= timeout_s || p.kernel.mostly_d());
      is = startup || kernel;
    }
    if (!is) continue;
    stalled.push_back(&p);
    r.stalled.push_back(p.who.rank);
    if (!p.remote) local_stalled = true;
  }
  if (stalled.empty() || (!local_stalled && !any_node)) return std::nullopt;
  // Only waiters have crossed the timeout, and a rank outside any collective is about to: that
  // is the rank they wait for, seen a little later than they were (records are read every
  // 0.25 s, and a Python worker's sampled record trails its rank by up to 0.1 s). Judge again
  // at the next read rather than name the waiters; a rank that makes progress is never close.
  const double close = timeout_s - std::min(1.0, timeout_s / 4);
  if (std::all_of(stalled.begin(), stalled.end(), [](auto* p) { return tier(*p) == 3; }))
    for (const auto& p : r.ranks)
      if (!p.finished && p.reporting && tier(p) < 3 && p.idle_s >= close && p.idle_s < timeout_s) return std::nullopt;

  // --- the culprits: the lowest tier; among waiting ranks, CPU still before CPU burning, then the lowest step ---
  int best = 4;
  for (const auto* p : stalled) best = std::min(best, tier(*p));
  std::vector<const RankProgress*> cand;
  for (const auto* p : stalled)
    if (tier(*p) == best) cand.push_back(p);
  bool by_cpu = false;
  if (best == 3) {
    const bool any_still = std::any_of(cand.begin(), cand.end(), [](auto* p) { return p->kernel.cpu_still(); });
    const bool any_burning =
        std::any_of(cand.begin(), cand.end(), [](auto* p) { return p->kernel.known && !p->kernel.cpu_still(); });
    if (any_still && any_burning) {
      by_cpu = true;
      cand.erase(std::remove_if(cand.begin(), cand.end(), [](auto* p) { return !p->kernel.cpu_still(); }), cand.end());
    }
    std::int64_t low = cand.front()->step;
    for (const auto* p : cand) low = std::min(low, p->step);
    cand.erase(std::remove_if(cand.begin(), cand.end(), [&](auto* p) { return p->step != low; }), cand.end());
  }
  for (const auto* p : cand) r.culprits.push_back(p->who.rank);
  for (const auto& p : r.ranks)
    if (!r.is_culprit(p.who.rank) && p.reporting && !p.finished && waiting_phase(p.phase))
      r.waiting.push_back(p.who.rank);

  // --- the headline ---
  std::string head;
  for (const auto* p : cand) head += (head.empty() ? "" : "; ") + culprit_text(*p, timeout_s, reporters, by_cpu);
  if (!r.waiting.empty()) {
    std::set<std::string> phases;
    for (int w : r.waiting) phases.insert(r.find(w)->phase);
    head += fmt::format("; {} {} in {}", rank_list(r.waiting), r.waiting.size() == 1 ? "waits" : "wait",
                        fmt::join(phases, "/"));  // "rank 0 waits", "ranks 0, 2 wait"
  }
  r.headline = head;
  return r;
}

std::vector<std::string> dump_stacks(const std::vector<RankProgress>& ranks, const std::vector<int>& culprits,
                                     const std::string& dir, std::chrono::milliseconds deadline) {
  std::vector<std::string> lines;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  // A tracer cannot attach to a process in D until its kernel call returns (eu-stack would
  // wait out the whole deadline): for a rank in D most of the window and now, the kernel
  // stack in its file is what there is.
  auto in_d = [](const RankProgress& r) {
    const auto now = read_proc(r.who.pid);
    return r.kernel.mostly_d() && now && now->uninterruptible();
  };
  std::vector<std::future<StackCapture>> jobs;
  for (const auto& r : ranks)
    jobs.push_back(r.remote || in_d(r) ? std::future<StackCapture>()
                                       : std::async(std::launch::async, [pid = r.who.pid, deadline] {
                                           return capture_stacks(pid, deadline);
                                         }));
  std::set<std::string> notes;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const auto& r = ranks[i];
    const bool culprit = std::find(culprits.begin(), culprits.end(), r.who.rank) != culprits.end();
    const std::string where = r.reporting ? fmt::format("{} @ step {}", r.phase, r.step) : std::string("no heartbeat");
    // The kernel's state where it says more than "sleeping" or "running".
    const KernelView& k = r.kernel;
    const std::string state = k.stopped() || k.mostly_d() ? fmt::format(" ({})", describe_state(as_sample(k))) : "";
    if (r.remote) {
      lines.push_back(fmt::format("  rank {} (pid {} on {}, {}): stacks on that node{}{}", r.who.rank, r.who.pid,
                                  r.host, where, culprit ? "   <-- stalled" : "", state));
      continue;
    }
    StackCapture c;
    if (jobs[i].valid())
      c = jobs[i].get();
    else
      c.notes.push_back(
          "no tracer can attach to a process in uninterruptible sleep (D): its kernel stack "
          "(/proc/<pid>/stack, readable by root) is in its stacks file instead");
    const std::string path = fmt::format("{}/rank_{}.txt", dir, r.who.rank);
    std::string kernel;
    if (auto now = read_proc(r.who.pid, "/proc", true)) {
      kernel = fmt::format("# kernel: {}, CPU time {:.2f} s", describe_state(*now),
                           static_cast<double>(now->cpu_ticks) / clock_ticks_per_second());
      if (k.known)
        kernel += fmt::format(" ({:.2f} s in the last {:.1f} s idle; stopped {:.1f} s, D {:.1f} s)", k.cpu_s,
                              k.window_s, k.stopped_s, k.d_s);
      kernel += "\n";
      if (!now->kernel_stack.empty()) kernel += fmt::format("=== /proc/{}/stack ===\n{}", r.who.pid, now->kernel_stack);
    }
    std::ofstream(path) << fmt::format("# rank {} (local rank {}, pid {}){}\n", r.who.rank, r.who.local_rank, r.who.pid,
                                       r.reporting ? fmt::format(", step {}, phase {}", r.step, r.phase) : "")
                        << kernel << c.text;
    for (const auto& n : c.notes) notes.insert(n);
    std::string frames = innermost_frames(c.text);
    if (frames.empty()) frames = c.timed_out ? "(stack capture abandoned)" : "(no stack)";
    lines.push_back(fmt::format("  rank {} (pid {}, {}): {}{}{}", r.who.rank, r.who.pid, where, frames,
                                culprit ? "   <-- stalled" : "", state));
  }
  lines.push_back(fmt::format("  stacks: {}/rank_*.txt", dir));
  for (const auto& n : notes) lines.push_back("  note: " + n);
  return lines;
}

}  // namespace trainbox::launch
