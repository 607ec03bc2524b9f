#!/usr/bin/env bash
# Runs zero_check (ZeRO stages 1, 2 and 3 against plain DDP: parity, identical ranks, padding,
# memory accounting, the scaler's inf check across shards) as 2, 3 and 4 ranks, the
# environment set by hand as a scheduler would. 3 ranks: buckets that do not split evenly.
set -uo pipefail
check=${1:?zero_check path}
fail=0
port() { "${TRAINBOX_PYTHON:-python3}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for n in 2 3 4; do
  p=$(port) pids=() rcs=()
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$p OMP_NUM_THREADS=1 \
      timeout 120 "$check" >"$tmp/out.$n.$r" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; rcs+=($?); done
  echo "--- world $n"
  cat "$tmp/out.$n.0"
  if [[ ${rcs[*]} =~ ^(0 )*0$ ]]; then echo "ok   world $n: every rank exited 0"
  else echo "FAIL world $n: exit codes ${rcs[*]}"; cat "$tmp"/out.$n.*; fail=1; fi
done
exit $fail
