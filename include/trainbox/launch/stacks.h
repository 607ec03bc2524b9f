// trainbox/launch/stacks.h — where a process is: its threads' stacks, from outside, with
// real tools, bounded in time. Torch-free; the launcher uses it on a stall, on SIGUSR1 and
// before a stall teardown (launch/stall.h), writing <log_dir>/attempt_N/stacks/rank_R.txt.
//
// Tools (chosen for speed and robustness; both need ptrace rights, which a launcher has over
// its own workers, and both work on a stopped process):
//   - eu-stack (Debian: elfutils) for every native thread — ~30 ms for a trainbox worker;
//   - py-spy dump (PyPI: py-spy) for the Python frames when the process runs a Python
//     interpreter (its executable is python*).
// Tools are looked up on PATH, then next to $TRAINBOX_PYTHON (a venv's bin/). A missing tool
// is a note with the install command, never an error. A tool that does not
// answer within the deadline is killed (its whole process group) and the capture says so.
//
//   StackCapture c = capture_stacks(pid, std::chrono::seconds(5));
//   write(c.text);  puts(innermost_frames(c.text).c_str());   // "sleep ← fault_injection_stall ← run_training"
#pragma once
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace trainbox::launch {

struct StackCapture {
  std::string text;                // every tool's output, each under a "=== TOOL ===" line
  std::vector<std::string> notes;  // "py-spy not found: python3 -m pip install py-spy"
  bool python = false;             // the process runs a Python interpreter
  bool timed_out = false;          // a tool was abandoned at the deadline
};

// deadline: for each tool. Never throws.
StackCapture capture_stacks(pid_t pid, std::chrono::milliseconds deadline);

// The innermost meaningful frames of the process's main thread, innermost first, joined by
// " ← ": C library waits are named for what they are (sleep, wait, poll, read), C++ names lose
// their namespaces, arguments and templates; with Python frames (py-spy), the Python frames
// instead ("sleep_forever (train.py:12) ← main (train.py:30)"). "" when nothing is readable.
std::string innermost_frames(const std::string& capture_text, int depth = 3);

}  // namespace trainbox::launch
