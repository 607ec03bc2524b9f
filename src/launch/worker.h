// src/launch/worker.h (private) — one worker process: spawn it, relay its output, remember how it ended.
//
// spawn_worker forks and execs the command in a new session (so the worker and everything it
// starts share one process group the launcher can signal as a whole), with
// PR_SET_PDEATHSIG=SIGKILL, stdin from /dev/null and stdout/stderr into pipes. await_exec then
// waits until the exec succeeded (a CLOEXEC status pipe reports exec's errno), so signalling
// the group afterwards can never miss a worker still between fork and setsid. Spawning all
// workers before awaiting any lets their execs overlap (8 ranks: ~5 ms less on a small VM).
// Worker::pump relays what is readable: raw bytes to the per-rank log file, whole lines with
// "[rank N] " to the console, the last kTailLines stderr lines kept for the failure summary.
#pragma once
#include <signal.h>
#include <sys/types.h>

#include <ctime>
#include <deque>
#include <string>
#include <vector>

#include <trainbox/launch/line_buffer.h>
#include <trainbox/util/unique_fd.h>

namespace trainbox::launch {

// 20 lines: a Python traceback's tail (the exception and a few frames) fits.
inline constexpr std::size_t kTailLines = 20;

struct SpawnSpec {
  int local_rank = 0, rank = 0;
  std::string exe;  // resolved path of argv[0]
  std::vector<std::string> argv;
  std::vector<std::string> env;        // the whole environment, "NAME=value"
  std::string stdout_log, stderr_log;  // "" = no file
  bool stdout_console = true, stderr_console = true;
  std::string prefix;  // "[rank 3] " or ""
};

class Worker {
 public:
  struct Stream {
    UniqueFd pipe;  // read end, O_NONBLOCK
    UniqueFd file;  // per-rank log, or none
    LineBuffer lines;
    bool console = true;
    int console_fd = 1;
  };

  int local_rank = 0, rank = 0;
  pid_t pid = -1;  // also the process group id (setsid)
  std::string prefix;
  Stream out, err;
  std::deque<std::string> stderr_tail;

  // --- how it ended ---
  bool reaped = false;
  int wait_status = 0;
  std::time_t ended_at = 0;
  // Stopping signals trainbox run sent while the process still ran (not to a zombie): what
  // the summary needs to say whether the launcher ended it or it ended on its own.
  int stop_signal = 0;        // the first one (SIGTERM at teardown), 0 when none
  bool sigkill_sent = false;  // SIGKILL followed (grace period over, or a second Ctrl-C)
  bool group_left = false;    // processes of its group outlived it (still worth signalling)
  UniqueFd exec_status;       // until await_exec: EOF = exec'd, an int = exec's errno

  bool failed() const { return reaped && !(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0); }
  bool streams_open() const { return out.pipe || err.pipe; }
  // Reads what is available on `s` (stop at EAGAIN, or after 1 MiB to stay fair to the other
  // ranks); relays it. Closes the stream at EOF, flushing a partial last line.
  void pump(Stream& s);
  // Flushes partial lines and closes both streams (the launcher gave up waiting for EOF).
  void close_streams();
  // kill(-pid, sig) for the whole group; falls back to the pid if the group is gone.
  void signal_group(int sig) const;
  // Whether the process has ended, without reaping it (waitid WNOWAIT): a zombie still
  // counts as not reaped, but nothing sent to it now can change how it ended.
  bool has_exited() const;

 private:
  void relay(Stream& s, const std::vector<std::string>& lines);
};

// Throws SystemError when fork or pipes fail.
Worker spawn_worker(const SpawnSpec& spec);
// Waits for the worker's exec. Throws UsageError (after reaping it) when the command could not
// be executed.
void await_exec(Worker& w, const std::string& command);

// Where the command runs from: a path as given, or the first executable match on PATH.
// Throws UsageError naming the command when there is none.
std::string find_executable(const std::string& command);

// "SIGTERM" ("signal 42" for one without a name).
std::string signal_name(int sig);
// "exit code 3" / "signal SIGKILL (9)".
std::string describe_wait_status(int wait_status);
// The launcher's exit code for a worker's end: its exit code, or 128 + signal.
int exit_code_of(int wait_status);

}  // namespace trainbox::launch
