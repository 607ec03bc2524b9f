#!/usr/bin/env bash
# The phases of docs/python.md's table as the heartbeat record itself shows them: a worker
# (python/phase_worker.py) sits in forward, backward, optimizer.step and torch.save in turn, each
# held by a hook until the test has read the record (TRAINBOX_HEARTBEAT_FILE, the launcher's
# attempt_0/0/heartbeat: "<step> <phase> <unix_ms>"), and "the innermost call wins" both ways:
# torch.save inside forward reads checkpoint, a module called inside torch.save reads forward.
# Consecutive holds expect different records, and each record read must have been written after
# its hold began (its unix_ms against the at-file's mtime), so none passes on an earlier record.
# A few seconds (one rank, a 4-weight model); every wait is bounded; nothing is timed.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
worker=$(dirname "$0")/python/phase_worker.py
if ! "$py" -c 'import torch.distributed' 2>/dev/null; then echo "skip: $py has no torch"; exit 77; fi
mkdir -p "$tmp/sync"
"$bin" run --no-prefix -n 1 --log-dir "$tmp/logs" -- "$worker" "$tmp/sync" >"$tmp/run.out" 2>&1 &
job=$!
hb=$tmp/logs/attempt_0/0/heartbeat
# expect_phase HOLD RECORD: once the worker is held at HOLD, the record reads "RECORD <ms>",
# written at or after the moment the hold began
expect_phase() {
  local name=$1 want=$2 at=$tmp/sync/at-$1 rec="" since=-1 i
  for i in $(seq 600); do [[ -e $at ]] && break; sleep 0.05; done  # 30 s at most
  [[ -e $at ]] && since=$(stat -c %.3Y "$at" | tr -d .)             # ms, the clock the record uses
  for i in $(seq 100); do                                           # the writer samples every 0.1 s
    rec=$(head -c 63 "$hb" 2>/dev/null | sed 's/ *$//')
    [[ $since -ge 0 && $rec =~ ^$want\ ([0-9]+)$ && ${BASH_REMATCH[1]} -ge $since ]] && break
    sleep 0.05
  done
  check "held in $name: the record reads '$want …', written since the hold (got '$rec', hold at $since)" \
    test "$since" -ge 0 -a "${rec% *}" = "$want" -a "${rec##* }" -ge "$since"
  touch "$tmp/sync/go-$name"
}
expect_phase forward "0 forward"
expect_phase backward "0 backward"
expect_phase optimizer "0 optimizer"
expect_phase user_code "1 user_code"
expect_phase checkpoint "1 checkpoint"
expect_phase user_code_2 "1 user_code"
expect_phase save_in_forward "1 checkpoint"  # torch.save inside forward: the innermost
expect_phase user_code_3 "1 user_code"
expect_phase forward_in_save "1 forward"     # forward inside torch.save: the innermost
wait $job
rc=$?
check "the worker finished (exit $rc)" test "$rc" = 0 || cat "$tmp/run.out"
check "... its last record: 1 optimizer step, done" grep -qE '^1 done [0-9]+ *$' "$hb"
exit $fail
