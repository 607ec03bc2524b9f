// src/launch/watchdog.h (private) — kills the workers when the launcher itself is SIGKILLed.
//
// SIGKILL cannot be caught, and PR_SET_PDEATHSIG only reaches a worker itself, not the
// processes it started (pytorch#92151: orphaned grandchildren holding GPUs). So the launcher
// forks a tiny watchdog in its own session (Ctrl-C and Slurm's signals to the launcher's
// group do not reach it) holding the read end of a pipe whose write end only the launcher
// holds (O_CLOEXEC: workers never inherit it). The launcher tells it each worker's process
// group ("+pgid\n") and when a group is gone ("-pgid\n"). EOF means the launcher is gone:
// the watchdog SIGKILLs every group it still knows, removes the launcher's temporary folder
// (if it was given one) and exits. After a normal run nothing is left to kill and it just
// exits. Single-threaded launcher only (fork).
//
//   Watchdog wd = Watchdog::start();
//   wd.watch(worker_pid);        // the worker called setsid(): pgid == pid
//   wd.forget(worker_pid);       // its group is empty
#pragma once
#include <sys/types.h>

#include <string>
#include <utility>

#include <trainbox/util/unique_fd.h>

namespace trainbox::launch {

// The launcher's temporary log folder (no --log-dir) holds evidence a summary may have named:
// a worker's error file (attempt_N/<rank>/error.json), stack dumps (attempt_N/stacks/) or
// NCCL flight-recorder dumps (attempt_N/nccl_trace_rank_*).
// Such a folder outlives the launcher (both the launcher and the watchdog keep it); one
// without is removed. docs/distributed.md, "Where the files go".
bool holds_evidence(const std::string& temp_dir);

class Watchdog {
 public:
  // Forks the watchdog; `temp_dir` ("" = none) is removed when the launcher is gone.
  // Throws SystemError when it cannot.
  static Watchdog start(const std::string& temp_dir = {});
  Watchdog() = default;
  Watchdog(Watchdog&& o) noexcept : pid_(std::exchange(o.pid_, -1)), pipe_(std::move(o.pipe_)) {}
  Watchdog& operator=(Watchdog&&) = delete;
  ~Watchdog();  // closes the pipe (the watchdog exits) and reaps it

  void watch(pid_t pgid) noexcept;
  void forget(pid_t pgid) noexcept;
  pid_t pid() const { return pid_; }
  // The launcher reaped the watchdog (it died): stop writing to it.
  void lost() noexcept;

 private:
  void send(char op, pid_t pgid) noexcept;
  pid_t pid_ = -1;
  UniqueFd pipe_;
};

}  // namespace trainbox::launch
