// tools/trainbox/json_result.h — how every `--json` command prints its one document.
//
// The rule (docs/distributed.md, "--json under a launcher"): a command's --json output is one
// JSON document on stdout, whatever starts it. Under `trainbox run` each rank's stdout is
// prefixed ("[rank 0] {"), so the document goes through the result file instead
// (util/result_file.h): rank 0 writes it, the launcher prints it once, unprefixed, after the
// workers' output. Under torchrun or srun (no result file) rank 0 prints it itself and the
// other ranks print nothing. The job's commands (train, bench, preflight) call write_result with
// the job's rank; the per-process reports (doctor, smi, data ls, smoke) call print_json_result.
// tests/integration/json_launcher.sh runs each under `trainbox run -n 2` and parses the stdout.
#pragma once
#include <cstdlib>
#include <exception>

#include <nlohmann/json.hpp>

#include <trainbox/distributed/worker_env.h>
#include <trainbox/util/result_file.h>

namespace trainbox::cli {

// This process's rank from the launcher's variables (RANK, SLURM_PROCID …); 0 for a single
// process, and 0 when they are inconsistent (the doctor must still report, and says why).
inline int job_rank() {
  try {
    return dist::WorkerEnv::from_environment().rank;
  } catch (const std::exception&) {
    return 0;
  }
}

// A per-process report: to $TRAINBOX_RESULT_FILE on any rank (a result file is always this
// process's own: `trainbox run` gives each rank one and passes on rank 0's, a parent such as
// doctor --smoke or the Python package's trainbox.doctor() gives its child one), else to stdout
// on rank 0 only (indented by `indent`; -1: one line).
inline void print_json_result(const nlohmann::json& j, int indent = 2) {
  const char* file = std::getenv(kResultFileEnv);
  write_result(j, file && *file ? 0 : job_rank(), indent);
}

}  // namespace trainbox::cli
