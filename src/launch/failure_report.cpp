#include "failure_report.h"

#include <sys/wait.h>

#include <csignal>

#include <fmt/format.h>

#include <trainbox/launch/error_file.h>
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
  if (!w.reaped) return "still running";
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

std::string render_failure(const FailureReport& r) {
  const std::string rule(72, '='), thin(72, '-');
  const Worker& w = *r.root;
  std::string s;
  s += rule + "\n";
  s += fmt::format("{} FAILED (trainbox run exits {})\n", r.command, exit_code_of(w.wait_status));
  s += thin + "\n";
  s += "Root Cause (first observed failure):\n";
  s += fmt::format("[{}]:\n", w.rank);
  s += fmt::format("  time      : {}\n", local_time(w.ended_at));
  s += fmt::format("  host      : {}\n", r.host);
  s += fmt::format("  rank      : {} (local_rank: {})\n", w.rank, w.local_rank);
  if (WIFSIGNALED(w.wait_status))
    s += fmt::format("  exitcode  : {} (pid: {})\n", describe_wait_status(w.wait_status), w.pid);
  else
    s += fmt::format("  exitcode  : {} (pid: {})\n", exit_code_of(w.wait_status), w.pid);
  if (r.restarts > 0) s += fmt::format("  restarts  : {} used\n", r.restarts);
  auto err = read_error_file(r.root_error_file);
  s += fmt::format("  error_file: {}\n", err ? r.root_error_file : "<N/A>");
  if (err) {
    s += fmt::format("  message   : {}\n", err->message);
    if (!trim(err->traceback).empty()) s += "  traceback :\n" + indent_lines(err->traceback, "    ", 30);
  }
  if (!w.stderr_tail.empty()) {
    s += fmt::format("  stderr    : last {} line{}\n", w.stderr_tail.size(), w.stderr_tail.size() == 1 ? "" : "s");
    for (const auto& line : w.stderr_tail) s += "    | " + line + "\n";
  } else {
    s += "  stderr    : <empty>\n";
  }
  if (!r.others.empty()) {
    s += thin + "\n";
    s += "Other workers:\n";
    for (const Worker* o : r.others)
      s += fmt::format("  rank {} (local_rank: {}, pid {}): {}\n", o->rank, o->local_rank, o->pid, how_it_ended(*o));
  }
  s += rule + "\n";
  return s;
}

}  // namespace trainbox::launch
