// trainbox/util/process.h — running helper programs from the torch-free CLI.
//
//   auto r = trainbox::run_capture({"/usr/bin/env", "true"});   // r.exit_code, r.out
// A child's --json result without its console: run_for_result() in result_file.h.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace trainbox {

struct CaptureResult {
  int exit_code = -1;  // 128+signal when killed by a signal; 127 when it could not start
  std::string out;     // everything written to stdout
  bool timed_out = false;
};

// Runs argv[0] (path) with argv, stdin from /dev/null, stderr inherited, stdout captured.
CaptureResult run_capture(const std::vector<std::string>& argv);

// Runs argv[0] (searched on PATH) with stdout and stderr captured together in `out`, in a
// process group of its own; after timeout_ms the whole group is SIGKILLed and timed_out set.
// For diagnostic tools that may hang (eu-stack, py-spy on a stuck process).
CaptureResult run_capture_for(const std::vector<std::string>& argv, int timeout_ms);

// Runs fn in a forked child and returns what it returned as out (exit code 0; a thrown
// exception's message with exit code 1). After timeout_ms the child is SIGKILLed and
// timed_out is set: for work that can hang in a driver (cuInit, NVML on a stuck GPU).
// Fork from a single-threaded process only.
CaptureResult run_in_child(const std::function<std::string()>& fn, int timeout_ms);

// Directory of the running executable (/proc/self/exe), "" if unknown.
std::string self_exe_dir();

// A sibling program of the running executable: <dir>/name, then <dir>/../libexec/trainbox/name.
// Returns "" when neither exists.
std::string find_sibling_program(const std::string& name);

// True if path is a regular file this process may execute.
bool is_executable_file(const std::string& path);

// The first executable `name` in the directories of $PATH (as execvp would run it); ""
// when there is none. name must not contain '/'.
std::string find_on_path(const std::string& name);

// In a forked child just before exec: every signal back to its default disposition and an
// empty signal mask. exec resets handlers but keeps SIG_IGN and the mask, so a parent started
// with SIGINT ignored (a shell script's `cmd &`) or blocked (the launcher's signalfd) would hand
// that on, and a forwarded SIGINT would do nothing. Async-signal-safe (sigaction, sigprocmask).
void reset_signals_for_exec() noexcept;

// Seconds since this process started (the kernel's start time, /proc/self/stat, against
// /proc/uptime; a clock tick's resolution, 10 ms), or -1 where /proc cannot say.
double process_age_s() noexcept;

}  // namespace trainbox
