// trainbox/launch/launcher.h — `trainbox run`: start nproc_per_node workers, watch them, tear down, restart.
//
// A torchrun-compatible, torch-free launcher (process supervision only, so it starts in
// milliseconds). launch() blocks until the job ends and returns the exit code:
//   0 when every worker exited 0; the root cause's exit code (128 + signal when a signal killed
//   it) when one failed; 128 + sig when the launcher got SIGINT/SIGTERM/SIGHUP/SIGQUIT.
//   With --rdzv-backend c10d (launch/rendezvous.h) the same on every node, for a failure or a
//   signal on any node; kExitNodeLost (125) when a node is lost. A rendezvous that fails
//   (refused, timed out) throws UsageError: nothing started, exit 2.
// Contract:
//   - Each worker runs in its own session (process group = the worker and all it starts), with
//     PR_SET_PDEATHSIG=SIGKILL, stdin /dev/null, the environment of worker_env().
//   - Output: every console line "[rank N] …" ("[host:rank N] …" with several nodes; stdout →
//     stdout, stderr → stderr), whole lines only; --log-dir / --redirects / --tee /
//     --local-ranks-filter with torchrun's meanings.
//   - The first worker to fail is the root cause: every worker's group gets SIGTERM, SIGKILL
//     after grace_period_s; then a restart (up to max_restarts, TORCHELASTIC_RESTART_COUNT + 1)
//     or the failure summary on stderr.
//   - Result (util/result_file.h): each worker's TRAINBOX_RESULT_FILE is its own result.json;
//     when the job ends, rank 0's from the last attempt (if this node runs rank 0 and the file
//     is non-empty) is passed on verbatim after all worker output: to the launcher's own
//     $TRAINBOX_RESULT_FILE if set, else to stdout, unprefixed.
//   - Failure summary: each other worker is "succeeded", "exited on its own (…)", "stopped by
//     trainbox run (SIGTERM)" or "exited with code N after trainbox run's SIGTERM"; only a
//     signal sent while it still ran counts (an exited, unreaped worker is not "stopped").
//   - SIGUSR1/SIGUSR2 are forwarded to every worker group; SIGINT/SIGTERM/SIGHUP/SIGQUIT too,
//     followed by the grace period and SIGKILL. A second one kills at once.
//   - No orphans: a watchdog process SIGKILLs every worker group if the launcher is SIGKILLed;
//     processes left in a worker's group after the run are SIGKILLed.
//   - Port: --standalone picks a free port on 127.0.0.1; with c10d node rank 0 reports one it
//     found free (a fresh one for each restart); node rank 0 otherwise checks that
//     MASTER_ADDR:MASTER_PORT can be bound first (UsageError naming both and the holder).
// Call from the main thread of a single-threaded program: it blocks the handled signals and
// ignores SIGPIPE while it runs (restored on return), and it forks. With c10d, a heartbeat
// thread (and, in the launcher hosting the rendezvous, its server thread) runs beside it,
// started after the watchdog's fork with every handled signal blocked; workers are forked
// with everything built beforehand (nothing but async-signal-safe calls between fork and exec).
//
//   RunArgs a; a.nproc_per_node = "4"; a.command = {"trainbox", "train", "cfg.toml"};
//   return launch(resolve_run_config(a));
#pragma once
#include <trainbox/launch/run_config.h>

namespace trainbox::launch {

// Throws UsageError for a command that cannot run or a busy port (before starting anything),
// SystemError when the machine refuses (fork, pipes). Worker failures are exit codes, not throws.
int launch(const RunConfig& cfg);

}  // namespace trainbox::launch
