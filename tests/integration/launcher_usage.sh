#!/usr/bin/env bash
# Under a launcher a usage error is a usage error, not a crash (docs/distributed.md, "A usage
# error under a launcher"), 2 ranks on CPU:
#   1. `trainbox run -- trainbox train` with a value the model cannot take (dist.powersgd.rank =
#      100000, refused by every rank's DDP): exit 2, one line naming it, no failure report
#      ("FAILED", "stopped by trainbox run"), the error not repeated per rank, and no
#      trainbox-run-* folder left in TMPDIR;
#   2. the same through `trainbox train --nproc-per-node 2`;
#   3. a config error every rank finds at start-up (`trainbox run -- trainbox train --set
#      optim.lr=-1`): the same;
#   4. a worker that is not trainbox (Python, exit 2 on rank 0 without an error file): one line
#      with its last stderr line; a worker that exits 1 keeps the full report (the rule is exit 2);
#   5. `--plan --nproc-per-node 2 --budget 1KiB`: the plan for 2 ranks and its documented exit
#      1, with no launcher report (`FAILED`, `error_file: <N/A>`) and no folder left;
#   6. `trainbox train --nproc-per-node 2 --master-port P`: exit 2 naming `trainbox run
#      --nproc-per-node 2 --master-port P -- trainbox train …`.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
export OMP_NUM_THREADS=1  # no launcher note about it: the lines counted below are the error's own
job=("${small[@]}" --set data.synthetic_samples=256 --set train.epochs=1)
ps=(--set dist.grad_compression=powersgd --set dist.powersgd.rank=100000)
run2() { timeout 120 "$bin" run --standalone --nproc-per-node 2 -- "$@"; }
no_kept_folder() { ! compgen -G "$TMPDIR/trainbox-run-*" >/dev/null; }
# one_usage_line NAME PATTERN: the run's stderr ($tmp/err) is exactly one line, the launcher's,
# matching PATTERN; nothing of a failure report; no kept folder.
one_usage_line() {
  local name=$1 pattern=$2
  check "$name: one line on stderr" test "$(grep -c . "$tmp/err")" = 1 || cat "$tmp/err"
  check "... the launcher's usage-error line naming the error" \
    grep -qE "^trainbox run: usage error \(exit 2\) from (every rank \(2\)|rank [01] \(the other ranks were stopped\)): .*$pattern" \
    "$tmp/err"
  check "... no failure report" bash -c "! grep -qE 'FAILED|stopped by trainbox run|error_file|Root Cause' '$tmp/err'"
  check "... no trainbox-run-* folder left in TMPDIR" no_kept_folder
  rm -rf "$TMPDIR"/trainbox-run-*
}

# --- 1. a refusal by every rank's DDP, under trainbox run ---
expect "1. trainbox run -- trainbox train, dist.powersgd.rank = 100000: exit 2" 2 '' -- \
  run2 "$bin" train "${job[@]}" "${ps[@]}" --run-dir "$tmp/r1"
one_usage_line "..." 'dist.powersgd.rank = 100000 is larger than the smaller side of every matrix'

# --- 1b. with --max-restarts: a refusal repeats on every attempt, so none follows ---
expect "1b. the same with --max-restarts 2: exit 2, no restart" 2 '' -- \
  timeout 120 "$bin" run --standalone --nproc-per-node 2 --max-restarts 2 --log-dir "$tmp/r1b-logs" -- \
  "$bin" train "${job[@]}" "${ps[@]}" --run-dir "$tmp/r1b"
one_usage_line "..." 'dist.powersgd.rank = 100000 is larger than the smaller side of every matrix'
check "... one attempt only (no attempt_1 folder, no restart note)" \
  bash -c "! compgen -G '$tmp/r1b-logs/*attempt_1*' >/dev/null && ! compgen -G '$tmp/r1b-logs/*/attempt_1' >/dev/null && ! grep -q restarting '$tmp/err'"

# --- 2. the same through --nproc-per-node ---
expect "2. trainbox train --nproc-per-node 2, dist.powersgd.rank = 100000: exit 2" 2 '' -- \
  timeout 120 "$bin" train "${job[@]}" "${ps[@]}" --nproc-per-node 2 --run-dir "$tmp/r2"
one_usage_line "..." 'dist.powersgd.rank = 100000 is larger than the smaller side of every matrix'

# --- 3. a config error every rank finds ---
expect "3. trainbox run -- trainbox train --set optim.lr=-1: exit 2" 2 '' -- \
  run2 "$bin" train "${job[@]}" --set optim.lr=-1 --run-dir "$tmp/r3"
one_usage_line "..." 'optim.lr'

# --- 4. other programs: the rule is exit 2 ---
cat >"$tmp/w.py" <<'PY'
import os, sys, time
code = int(sys.argv[1])
if os.environ["RANK"] == "0":
    print("w.py: error: --epochs must be a number", file=sys.stderr)
    sys.exit(code)
time.sleep(60)
PY
expect "4. a Python worker exits 2 on rank 0 (no error file): exit 2" 2 '' -- run2 "$py" "$tmp/w.py" 2
check "... one line from the launcher with its last stderr line" \
  grep -qE "^trainbox run: usage error \(exit 2\) from rank 0 \(the other ranks were stopped\): w.py: error: --epochs must be a number" \
  "$tmp/err"
check "... no failure report" bash -c "! grep -qE 'FAILED|Root Cause' '$tmp/err'"
rm -rf "$TMPDIR"/trainbox-run-*
expect "... the same worker exiting 1 keeps the full report" 1 'FAILED \(trainbox run exits 1\)' -- \
  run2 "$py" "$tmp/w.py" 1
check "... and not the usage line" bash -c "! grep -q 'usage error' '$tmp/err'"
rm -rf "$TMPDIR"/trainbox-run-*

# --- 5. --plan under --nproc-per-node ---
expect "5. --plan --nproc-per-node 2 --budget 1KiB: the plan's exit 1" 1 '' -- \
  timeout 120 "$bin" train "${job[@]}" --plan --nproc-per-node 2 --budget 1KiB
check "... the plan is for 2 ranks" grep -q "world 2," "$tmp/out"
check "... no launcher report" bash -c "! grep -qE 'FAILED|error_file|Root Cause' '$tmp/out' '$tmp/err'"
check "... no trainbox-run-* folder left in TMPDIR" no_kept_folder

# --- 6. a launcher option given to train ---
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
expect "6. trainbox train --nproc-per-node 2 --master-port $port: exit 2" 2 \
  "--master-port is an option of trainbox run, not of trainbox train" -- \
  timeout 60 "$bin" train "${job[@]}" --nproc-per-node 2 --master-port "$port"
check "... the fix is the trainbox run command" \
  grep -qF -- "fix: trainbox run --nproc-per-node 2 --master-port $port -- trainbox train --set" "$tmp/err"
check "... and not CLI11's 'The following arguments were not expected'" \
  bash -c "! grep -q 'were not expected' '$tmp/err'"
exit $fail
