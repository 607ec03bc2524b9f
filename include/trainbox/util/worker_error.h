// trainbox/util/worker_error.h — how a worker under `trainbox run` reports a usage error, so N
// ranks refusing the same command read as one error, not N copies and a failure report.
//
// The contract, one environment variable next to torchelastic's error file:
//   TRAINBOX_LAUNCHER_SAYS_USAGE_ERRORS=1  set by trainbox run for its workers
//     (launch/run_config.h, worker_env).
//   - Set, and the error's exit code is 2 (UsageError, ConfigError, DataError): the worker
//     writes the error into $TORCHELASTIC_ERROR_FILE and prints nothing; the launcher says it
//     once for the job (launch/outcome.h, usage_error_line) and exits 2.
//   - Unset (a single process, torchrun, Slurm), another exit code, or an error file that
//     cannot be written: printed as report_error prints it, and recorded in the error file.
//
//   catch (const trainbox::Error& e) { return trainbox::report_worker_error(e, /*error_file=*/true); }
#pragma once
#include <trainbox/util/errors.h>

namespace trainbox {

inline constexpr const char* kLauncherSaysUsageErrorsEnv = "TRAINBOX_LAUNCHER_SAYS_USAGE_ERRORS";

// Records `e` in the error file when `error_file` (write_error_file), then prints it unless the
// launcher says usage errors (above); returns its exit code.
int report_worker_error(const Error& e, bool error_file, const char* program = "trainbox");

}  // namespace trainbox
