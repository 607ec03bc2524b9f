#!/usr/bin/env bash
# Runs ddp_check as 2 and 3 ranks (environment set by hand, as a scheduler would), then
# with different models on different ranks: a clear error, exit 2, no hang.
set -uo pipefail
check=${1:?ddp_check path}
fail=0
port() { "${TRAINBOX_PYTHON:-python3}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
run_world() {  # run_world N MODE → exit code of rank 0 (all ranks must agree)
  local n=$1 mode=$2 p; p=$(port)
  local pids=() rcs=()
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$p \
      timeout 120 "$check" "$mode" >"$tmp/out.$n.$mode.$r" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; rcs+=($?); done
  echo "${rcs[*]}"
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for n in 2 3; do
  rcs=$(run_world $n check)
  cat "$tmp/out.$n.check.0"
  [[ $rcs == "0 0" || $rcs == "0 0 0" ]] && echo "ok   world $n: every rank exited 0" || { echo "FAIL world $n: exit codes $rcs"; cat "$tmp"/out.$n.check.*; fail=1; }
done
rcs=$(run_world 2 mismatch)
if [[ $rcs == "2 2" ]] && grep -q "parameter 'fc2.weight' has shape" "$tmp/out.2.mismatch.0"; then
  echo "ok   different models: both ranks exit 2 naming fc2.weight"
else
  echo "FAIL different models: exit codes $rcs"; cat "$tmp"/out.2.mismatch.*; fail=1
fi
exit $fail
