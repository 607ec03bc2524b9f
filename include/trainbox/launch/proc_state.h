// trainbox/launch/proc_state.h — the kernel's view of a process, read from /proc: its
// scheduler state, CPU time, wait channel and kernel stack. Torch-free, Linux only.
//
// What the stall verdict (launch/stall.h) needs and a heartbeat cannot say:
//   - state (/proc/<pid>/stat field 3): T = stopped (SIGSTOP, Ctrl-Z, a freezer), t = stopped
//     by a tracer (a debugger), D = uninterruptible sleep (a dead NFS mount, a hung driver
//     call), R running, S sleeping, Z zombie. A process is D when any of its threads is (a data
//     loader thread on NFS blocks the main thread's futex wait): that thread's tid and wait
//     channel are reported.
//   - cpu_ticks (fields 14 + 15, utime + stime of every thread, in clock ticks): a rank whose
//     CPU time stands still is not polling, a rank whose CPU time grows is;
//   - wchan (/proc/<pid>/wchan): the kernel function it sleeps in ("do_signal_stop",
//     "do_freezer_trap" under a cgroup-v2 freezer, "nfs_wait_bit_killable"); "" when running;
//   - the kernel stack (/proc/<pid>/stack), readable by root only, on request.
// `proc_root` is "/proc" except in tests, which lay out fixture files the same way
// (<root>/<pid>/stat, wchan, stack, task/<tid>/stat, task/<tid>/wchan).
//
//   if (auto s = read_proc(pid)) if (s->stopped()) puts(describe_state(*s).c_str());
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace trainbox::launch {

struct ProcSample {
  pid_t pid = 0;
  char state = '?';             // the process's (see above): T t D R S Z X I
  std::uint64_t cpu_ticks = 0;  // utime + stime, all threads
  std::string wchan;            // of the main thread, or of the thread in D
  pid_t d_tid = 0;              // the thread in D, when it is not the main thread
  std::string kernel_stack;     // /proc/<pid>/stack when asked for and readable

  bool stopped() const { return state == 'T' || state == 't' || frozen(); }
  // Frozen by a cgroup freezer: v2 parks tasks in do_freezer_trap (state S), v1 in
  // __refrigerator (state D). Stopped in effect: only the freezer's owner can thaw it.
  bool frozen() const { return wchan == "do_freezer_trap" || wchan == "__refrigerator"; }
  bool uninterruptible() const { return state == 'D' && !frozen(); }
};

// nullopt when the process is gone or /proc is unreadable. Never throws.
std::optional<ProcSample> read_proc(pid_t pid, const std::string& proc_root = "/proc", bool with_stack = false);

// The state and CPU time fields of a /proc/<pid>/stat line (the command name may hold spaces
// and parentheses: the fields start after the last ')'). false for anything else.
bool parse_proc_stat(std::string_view line, char& state, std::uint64_t& cpu_ticks);

// Clock ticks per second (sysconf(_SC_CLK_TCK), 100 on Linux).
double clock_ticks_per_second();

// "state T: SIGSTOP, a debugger or a freezer", "state t: stopped by a debugger (ptrace)",
// "frozen by a cgroup freezer (do_freezer_trap)", "state D in nfs_wait_bit_killable",
// "state S in do_epoll_wait", "state R".
std::string describe_state(const ProcSample& s);

}  // namespace trainbox::launch
