// src/launch/failure_report.h (private) — the block `trainbox run` prints on stderr when a job fails.
//
// Laid out like torchrun's "Root Cause (first observed failure)" block, so people who know
// torchrun find every field where they expect it, plus what torchrun leaves out: the signal's
// name, the root cause's last stderr lines, and how every other worker ended.
#pragma once
#include <ctime>
#include <string>
#include <vector>

#include "worker.h"

namespace trainbox::launch {

struct FailureReport {
  std::string command;          // the user's command, for the title
  std::string host;
  int restarts = 0;             // restarts used before this failure
  const Worker* root = nullptr;
  std::string root_error_file;  // TORCHELASTIC_ERROR_FILE of the root cause
  std::vector<const Worker*> others;
};

std::string render_failure(const FailureReport& r);

// How a worker other than the root cause ended, saying who ended it: "succeeded",
// "exited on its own (exit code 4)", "stopped by trainbox run (SIGTERM)",
// "stopped by trainbox run (SIGKILL after SIGTERM)", "exited with code 0 after trainbox
// run's SIGTERM", "still running". Only a signal sent while the process still ran counts
// (Worker::stop_signal): one that reached a zombie changed nothing.
std::string how_it_ended(const Worker& w);

}  // namespace trainbox::launch
