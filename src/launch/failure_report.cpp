#include "failure_report.h"

#include <sys/wait.h>

#include <csignal>

#include <fmt/format.h>

#include <trainbox/launch/error_file.h>
#include <trainbox/launch/rendezvous.h>
#include <trainbox/util/strings.h>

namespace trainbox::launch {

namespace {
std::string local_time(std::time_t t) {
  char buf[64];
  std::tm tm{};
  localtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d_%H:%M:%S", &tm);
  return buf;
}

std::string indent_lines(const std::string& text, const std::string& pad, std::size_t max_lines) {
  auto lines = split(text, '\n');
  std::size_t first = lines.size() > max_lines ? lines.size() - max_lines : 0;
  std::string out;
  for (std::size_t i = first; i < lines.size(); ++i) out += pad + lines[i] + "\n";
  return out;
}
}  // namespace

std::string how_it_ended(const Worker& w) {
  if (!w.reaped) return w.sigkill_sent ? "left behind: not gone after SIGKILL (unkillable)" : "still running";
  const int st = w.wait_status;
  if (!w.stop_signal) {  // the launcher never signalled it while it ran
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return "succeeded";
    return fmt::format("exited on its own ({})", describe_wait_status(st));
  }
  const std::string sent = signal_name(w.stop_signal);
  if (WIFSIGNALED(st)) {
    const int sig = WTERMSIG(st);
    if (sig == SIGKILL && w.sigkill_sent)
      return w.stop_signal == SIGKILL ? "stopped by trainbox run (SIGKILL)"
                                      : fmt::format("stopped by trainbox run (SIGKILL after {})", sent);
    if (sig == w.stop_signal) return fmt::format("stopped by trainbox run ({})", sent);
    return fmt::format("ended by {} after trainbox run's {}", describe_wait_status(st), sent);
  }
  return fmt::format("exited with code {} after trainbox run's {}", exit_code_of(st), sent);
}

RootCause root_cause_of(const Worker& w, const std::string& host, int node_rank, const std::string& error_file) {
  RootCause c;
  c.host = host;
  c.node_rank = node_rank;
  c.rank = w.rank;
  c.local_rank = w.local_rank;
  c.pid = w.pid;
  if (WIFSIGNALED(w.wait_status))
    c.signal = WTERMSIG(w.wait_status);
  else
    c.exit_code = exit_code_of(w.wait_status);
  c.time = static_cast<std::int64_t>(w.ended_at);
  // Bounded, because the cause travels over the control channel (1 MiB a message): 20 lines
  // of at most 2000 bytes, 64 KiB of traceback — far more than a summary shows anyway.
  auto clip = [](const std::string& t, std::size_t max) {
    return t.size() <= max ? t : t.substr(0, max) + fmt::format(" […{} more bytes]", t.size() - max);
  };
  for (const auto& line : w.stderr_tail) c.stderr_tail.push_back(clip(line, 2000));
  if (auto err = read_error_file(error_file)) {
    c.error_file = error_file;
    c.error_message = clip(err->message, 8192);
    c.traceback =
        err->traceback.size() <= 65536 ? err->traceback : err->traceback.substr(err->traceback.size() - 65536);
  }
  return c;
}

std::string render_failure(const FailureReport& r) {
  const std::string rule(72, '='), thin(72, '-');
  const bool multi = r.nnodes > 1;
  std::string s;
  s += rule + "\n";
  s += fmt::format("{} FAILED (trainbox run exits {})\n", r.command, r.exit_code);
  s += thin + "\n";
  bool root_here = false;
  if (r.root) {
    const RootCause& c = *r.root;
    root_here = !multi || c.node_rank == r.node_rank;
    s += "Root Cause (first observed failure):\n";
    if (c.rank < 0) {  // a launcher that could not start its workers
      s += fmt::format("[node {}]:\n", c.node_rank);
      s += fmt::format("  host      : {} (node rank {})\n", c.host, c.node_rank);
      s += fmt::format("  launcher  : could not start its workers: {} (exit code {}, pid: {})\n", c.error_message,
                       c.exit_code, c.pid);
    }
  }
  if (r.root && r.root->rank >= 0) {
    const RootCause& c = *r.root;
    s += fmt::format("[{}]:\n", c.rank);
    s += fmt::format("  time      : {}\n", local_time(static_cast<std::time_t>(c.time)));
    s += multi ? fmt::format("  host      : {} (node rank {})\n", c.host, c.node_rank)
               : fmt::format("  host      : {}\n", c.host);
    s += fmt::format("  rank      : {} (local_rank: {})\n", c.rank, c.local_rank);
    if (c.signal) {
      const char* abbrev = sigabbrev_np(c.signal);
      s += fmt::format("  exitcode  : signal SIG{} ({}) (pid: {})\n", abbrev ? abbrev : "?", c.signal, c.pid);
    } else {
      s += fmt::format("  exitcode  : {} (pid: {})\n", c.exit_code, c.pid);
    }
    if (r.restarts > 0) s += fmt::format("  restarts  : {} used\n", r.restarts);
    s += fmt::format("  error_file: {}\n", c.error_file.empty() ? "<N/A>" : c.error_file);
    if (!c.error_message.empty()) {
      s += fmt::format("  message   : {}\n", c.error_message);
      if (!trim(c.traceback).empty()) s += "  traceback :\n" + indent_lines(c.traceback, "    ", 30);
    }
    if (!c.stderr_tail.empty()) {
      s += fmt::format("  stderr    : last {} line{}\n", c.stderr_tail.size(), c.stderr_tail.size() == 1 ? "" : "s");
      for (const auto& line : c.stderr_tail) s += "    | " + line + "\n";
    } else {
      s += "  stderr    : <empty>\n";
    }
  } else if (r.lost && multi && r.lost->node_rank == r.node_rank) {
    root_here = true;  // no "because of" note: the cause is this node
    s += "Root Cause:\n";
    s += fmt::format(
        "  the rendezvous declared this node lost: {} (last heard {:.1f} s before; was this "
        "launcher frozen or its network cut?)\n",
        r.lost->why, r.lost->last_heard_s);
  } else if (r.lost) {
    s += "Root Cause:\n";
    s += fmt::format("  {}: {}\n", r.lost->describe(), r.lost->why);
    s += "  (its launcher vanished: killed, host down or network cut; its workers' fate is unknown here)\n";
  }
  if (!r.workers.empty()) {
    s += thin + "\n";
    s += !multi
             ? std::string("Other workers:\n")
             : fmt::format("{} on this node ({}, node rank {}):\n",
                           root_here && r.root && r.root->rank >= 0 ? "Other workers" : "Workers", r.host, r.node_rank);
    bool failed_on_own = false, stopped = false;
    for (const Worker* o : r.workers) {
      s += fmt::format("  rank {} (local_rank: {}, pid {}): {}\n", o->rank, o->local_rank, o->pid, how_it_ended(*o));
      failed_on_own = failed_on_own || (o->failed() && !o->stop_signal);
      stopped = stopped || o->stop_signal;
    }
    if (multi && !root_here) {
      std::string where = r.root && r.root->rank < 0 ? fmt::format("node {}'s launcher", r.root->node_rank)
                          : r.root ? fmt::format("rank {} on node {}", r.root->rank, r.root->node_rank)
                                   : fmt::format("the loss of node {}", r.lost ? r.lost->node_rank : -1);
      s += failed_on_own ? fmt::format("  note: this node's workers failed only as a consequence of {}\n", where)
           : stopped     ? fmt::format("  note: this node's workers were stopped because of {}\n", where)
                     : fmt::format("  note: this node's workers had finished; the job failed because of {}\n", where);
    }
  }
  s += rule + "\n";
  return s;
}

}  // namespace trainbox::launch
