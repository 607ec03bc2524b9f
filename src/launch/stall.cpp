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

#include <trainbox/launch/stacks.h>
#include <trainbox/util/heartbeat.h>

namespace trainbox::launch {

namespace {

// Phases in which a rank waits for the others: trainbox train's allreduce and barrier, and the
// other collectives a Python worker's instrumentation reports (python/trainbox/_instrument.py).
bool waiting_phase(const std::string& p) {
  static const std::set<std::string, std::less<>> kWaiting = {
      "allreduce", "barrier", "broadcast", "all_gather", "reduce_scatter", "all_to_all",
      "reduce",    "gather",  "scatter",   "send",       "recv"};
  return kWaiting.count(p) > 0;
}

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

}  // namespace

bool StallReport::is_culprit(int rank) const {
  return std::find(culprits.begin(), culprits.end(), rank) != culprits.end();
}

void StallWatch::start(std::vector<WatchedRank> ranks, Clock::time_point now) {
  ranks_.clear();
  reported_ = false;
  for (auto& r : ranks) ranks_.push_back(State{std::move(r), {}, now});
}

void StallWatch::exited(pid_t pid) {
  for (auto& s : ranks_)
    if (s.who.pid == pid) s.exited = true;
}

void StallWatch::read_all(Clock::time_point now) {
  for (auto& s : ranks_) {
    if (s.exited) continue;
    const std::string rec = read_record(s.who.heartbeat_path);
    const auto parsed = parse_heartbeat(rec);
    if (!parsed) continue;  // none yet, or a torn record: look again next time
    if (rec != s.last) {
      s.last = rec;
      s.changed = now;
      s.reporting = true;
      s.step = parsed->step;
      s.phase = parsed->phase;
      reported_ = false;  // progress re-arms the detector
    }
  }
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
    p.idle_s = std::chrono::duration<double>(now - s.changed).count();
    out.push_back(p);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.who.rank < b.who.rank; });
  return out;
}

std::optional<StallReport> StallWatch::check(Clock::time_point now) {
  if (!enabled() || ranks_.empty()) return std::nullopt;
  StallReport r;
  r.ranks = snapshot(now);
  if (reported_) return std::nullopt;
  std::vector<const RankProgress*> stalled;
  for (const auto& p : r.ranks)
    if (p.reporting && !p.finished && p.idle_s >= timeout_s_) stalled.push_back(&p);
  if (stalled.empty()) return std::nullopt;
  reported_ = true;
  // Culprits: stalled outside a waiting phase; if all stalled ranks wait, the lowest step.
  for (const auto* p : stalled)
    if (!waiting_phase(p->phase)) r.culprits.push_back(p->who.rank);
  if (r.culprits.empty()) {
    std::int64_t low = stalled.front()->step;
    for (const auto* p : stalled) low = std::min(low, p->step);
    for (const auto* p : stalled)
      if (p->step == low) r.culprits.push_back(p->who.rank);
  }
  for (const auto& p : r.ranks)
    if (!r.is_culprit(p.who.rank) && p.reporting && !p.finished && waiting_phase(p.phase))
      r.waiting.push_back(p.who.rank);
  std::string head;
  for (int c : r.culprits) {
    const auto& p = *std::find_if(r.ranks.begin(), r.ranks.end(), [&](const auto& x) { return x.who.rank == c; });
    head += fmt::format("{}rank {} (pid {}) has been in `{}` at step {} for {:.1f} s", head.empty() ? "" : "; ", c,
                        p.who.pid, p.phase, p.step, p.idle_s);
  }
  if (!r.waiting.empty()) {
    std::set<std::string> phases;
    for (int w : r.waiting)
      for (const auto& p : r.ranks)
        if (p.who.rank == w) phases.insert(p.phase);
    head += fmt::format("; {} wait in {}", rank_list(r.waiting), fmt::join(phases, "/"));
  }
  r.headline = head;
  return r;
}

std::vector<std::string> dump_stacks(const std::vector<RankProgress>& ranks, const std::vector<int>& culprits,
                                     const std::string& dir, std::chrono::milliseconds deadline) {
  std::vector<std::string> lines;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::vector<std::future<StackCapture>> jobs;
  for (const auto& r : ranks)
    jobs.push_back(std::async(std::launch::async, [pid = r.who.pid, deadline] { return capture_stacks(pid, deadline); }));
  std::set<std::string> notes;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const auto& r = ranks[i];
    StackCapture c = jobs[i].get();
    const std::string path = fmt::format("{}/rank_{}.txt", dir, r.who.rank);
    std::ofstream(path) << fmt::format("# rank {} (local rank {}, pid {}){}\n", r.who.rank, r.who.local_rank, r.who.pid,
                                       r.reporting ? fmt::format(", step {}, phase {}", r.step, r.phase) : "")
                        << c.text;
    for (const auto& n : c.notes) notes.insert(n);
    const std::string where = r.reporting ? fmt::format("{} @ step {}", r.phase, r.step) : std::string("no heartbeat");
    std::string frames = innermost_frames(c.text);
    if (frames.empty()) frames = c.timed_out ? "(stack capture abandoned)" : "(no stack)";
    const bool culprit = std::find(culprits.begin(), culprits.end(), r.who.rank) != culprits.end();
    lines.push_back(fmt::format("  rank {} (pid {}, {}): {}{}", r.who.rank, r.who.pid, where, frames,
                                culprit ? "   <-- stalled" : ""));
  }
  lines.push_back(fmt::format("  stacks: {}/rank_*.txt", dir));
  for (const auto& n : notes) lines.push_back("  note: " + n);
  return lines;
}

}  // namespace trainbox::launch
