#!/usr/bin/env bash
# Zero-code instrumentation of Python workers (docs/python.md): an unmodified DDP-tutorial script
# (python/ddp_tutorial.py: Gloo on CPU, DistributedSampler, DataLoader(num_workers=2), torch.save
# snapshots, no trainbox import) under trainbox run.
#   1. the final weights with instrumentation are bit-identical to --no-instrument, and the
#      heartbeat's step is the number of optimizer steps the script made (--no-instrument: none);
#   2. -n 3 --stall-timeout 5, rank 1 frozen in its input pipeline (the test SIGSTOPs its two
#      DataLoader workers): rank 1 is named with phase data, ranks 0 and 2 as waiting in
#      allreduce; py-spy's Python stacks for every rank; exit 124; nothing left running;
#   2b. rank 1 stuck before init_process_group: a start-up stall, named within the stall timeout;
#   3. a sitecustomize.py of the user's on PYTHONPATH still runs, and the script sees the
#      PYTHONPATH it would have seen without trainbox;
#   4. a script that never imports torch runs exactly as with --no-instrument (same output,
#      nothing imported, no heartbeat written);
#   5. the trainbox module in a worker: heartbeat() writes the record, doctor(), smi();
#   6. a script that writes its own heartbeat (docs/distributed.md's snippet) keeps it: the
#      instrumentation, which sees torch.save and the exit, writes nothing over it.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
script=$(dirname "$0")/python/ddp_tutorial.py
marker=trainbox-pyinst-test-$$
cleanup() { [[ $BASHPID == "$$" ]] || return 0; pkill -KILL -f "$marker" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
if ! "$py" -c 'import torch.distributed' 2>/dev/null; then echo "skip: $py has no torch"; exit 77; fi

# --- 1. same weights with and without instrumentation ---
run_job() {  # run_job NAME [trainbox run options…]
  local name=$1; shift
  "$bin" run --standalone -n 2 --log-dir "$tmp/logs-$name" "$@" -- "$script" --epochs 2 --samples 1280 \
    --out "$tmp/$name/$marker" >"$tmp/$name.out" 2>&1
}
run_job plain --no-instrument; rc_plain=$?
run_job inst; rc_inst=$?
check "1. both runs complete (exit $rc_plain, $rc_inst)" test "$rc_plain$rc_inst" = 00
check "... the final weights are bit-identical" "$py" -c '
import sys, torch
a, b = (torch.load(p) for p in sys.argv[1:])
sys.exit(not (a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)))' \
  "$tmp/plain/$marker/snapshot_1.pt" "$tmp/inst/$marker/snapshot_1.pt"
# 1280 samples / 2 ranks / batch 32 = 20 optimizer steps an epoch, 2 epochs
check "... rank 1's last heartbeat: 40 optimizer steps, done" \
  grep -qE '^40 done [0-9]+ *$' "$tmp/logs-inst/attempt_0/1/heartbeat"
check "... --no-instrument writes no heartbeat" test ! -s "$tmp/logs-plain/attempt_0/1/heartbeat"

echo "#    ${SECONDS} s"
# --- 2. rank 1 frozen in data ---
"$bin" run --standalone -n 3 --stall-timeout 5 --grace-period 3 --log-dir "$tmp/logs2" -- "$script" --epochs 1000 \
  --out "$tmp/r2/$marker" >"$tmp/r2.out" 2>&1 &
l=$!
hb1=$tmp/logs2/attempt_0/1/heartbeat
for _ in $(seq 1200); do grep -qE '^([3-9]|[1-9][0-9]+) ' "$hb1" 2>/dev/null && break; sleep 0.05; done
rank1=""
for p in $(pgrep -f "$marker"); do  # rank 1's worker: RANK=1 and the leader of its process group
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx RANK=1 && [[ $(ps -o pgid= -p "$p" | tr -d ' ') == "$p" ]] &&
    rank1=$p
done
loaders=""; [[ -n $rank1 ]] && loaders=$(pgrep -P "$rank1" | tr '\n' ' ')
check "2. rank 1 (pid ${rank1:-?}) has 2 DataLoader workers ($loaders)" test "$(wc -w <<<"$loaders")" = 2
if [[ -n $loaders ]]; then kill -STOP $loaders; else kill -TERM $l; fi
wait $l; rc=$?
check "... the stall stops the job: exit 124 (got $rc)" test "$rc" = 124
grep -E 'stalled:|^\[?.*  rank [0-9] \(pid' "$tmp/r2.out" | sed 's/^/#    /'
check "... rank 1 named in data, ranks 0, 2 waiting in allreduce" \
  grep -qE 'stalled: rank 1 .*`?data`? at step [0-9]+.*; ranks 0, 2 wait in allreduce' "$tmp/r2.out"
for r in 0 1 2; do
  check "... rank $r's stacks saved, with Python frames" grep -qE '\((.*/)?ddp_tutorial\.py:[0-9]+\)' \
    "$tmp/logs2/attempt_0/stacks/rank_$r.txt"
done
check "... rank 1's stack is in the DataLoader" grep -qE '_next_data|_get_data|_try_get_data' \
  "$tmp/logs2/attempt_0/stacks/rank_1.txt"
check "... rank 0's in backward" grep -qE 'backward' "$tmp/logs2/attempt_0/stacks/rank_0.txt"
sleep 0.5
check "... no process left" test -z "$(pgrep -f "$marker")"

echo "#    ${SECONDS} s"
# --- 2b. rank 1 never reaches init_process_group (stuck in its start-up: a sitecustomize.py of
# the test's sleeps in rank 1 alone, the script unedited): ranks 0 and 2 wait in rendezvous, and
# rank 1 is named as a start-up stall within the stall timeout, not after c10d's own timeout ---
mkdir -p "$tmp/stuck"
cat >"$tmp/stuck/sitecustomize.py" <<'PY'
import os, time
if os.environ.get("RANK") == "1":
    time.sleep(3600)
PY
SECONDS=0
PYTHONPATH="$tmp/stuck" "$bin" run --standalone -n 3 --stall-timeout 5 --grace-period 3 --log-dir "$tmp/logs2b" -- \
  "$script" --epochs 1000 --out "$tmp/r2b/$marker" >"$tmp/r2b.out" 2>&1
rc=$? took=$SECONDS
grep -E 'stalled:' "$tmp/r2b.out" | sed 's/^/#    /'
check "2b. a rank stuck before init_process_group stops the job: exit 124 (got $rc) in ${took} s (< 60)" \
  test "$rc" = 124 -a "$took" -lt 60
check "... rank 1 named as a start-up stall, ranks 0, 2 waiting in rendezvous" \
  grep -qE 'stalled: start-up stall: rank 1 .*has written no heartbeat.*; ranks 0, 2 wait in rendezvous' "$tmp/r2b.out"
sleep 0.5
check "... no process left" test -z "$(pgrep -f "$marker")"

echo "#    ${SECONDS} s"
# --- 3. the user's own sitecustomize.py ---
mkdir -p "$tmp/site" "$tmp/lib"
cat >"$tmp/site/sitecustomize.py" <<'PY'
import os
os.environ["USER_SITECUSTOMIZE"] = "ran"
PY
cat >"$tmp/probe.py" <<'PY'
import os, sys
print("sitecustomize:", os.environ.get("USER_SITECUSTOMIZE"))
print("PYTHONPATH:", os.environ.get("PYTHONPATH"))
print("sys.path:", [p for p in sys.path[1:] if "site-packages" not in p])
print("TRAINBOX_INSTRUMENT" in os.environ, "torch" in sys.modules, "trainbox" in sys.modules)
print("hook:", any(type(f).__name__ == "_TorchHook" for f in sys.meta_path))
PY
PYTHONPATH="$tmp/site:$tmp/lib" "$bin" run --no-prefix -n 1 --log-dir "$tmp/logs3" -- "$tmp/probe.py" "$marker" \
  >"$tmp/r3.out" 2>&1
check "3. the user's sitecustomize.py ran" grep -qx 'sitecustomize: ran' "$tmp/r3.out"
check "... the script sees the user's PYTHONPATH" grep -qx "PYTHONPATH: $tmp/site:$tmp/lib" "$tmp/r3.out"
check "... and the instrumentation's hook is armed" grep -qx 'hook: True' "$tmp/r3.out"

echo "#    ${SECONDS} s"
# --- 4. a script that never imports torch: unchanged ---
PYTHONPATH="$tmp/lib" "$bin" run --no-prefix -n 1 --no-instrument -- "$tmp/probe.py" "$marker" >"$tmp/r4a.out" 2>&1
PYTHONPATH="$tmp/lib" "$bin" run --no-prefix -n 1 --log-dir "$tmp/logs4" -- "$tmp/probe.py" "$marker" >"$tmp/r4b.out" 2>&1
check "4. a torch-free script prints the same with and without instrumentation" \
  diff <(grep -v '^hook:' "$tmp/r4a.out") <(grep -v '^hook:' "$tmp/r4b.out")
check "... imported neither torch nor trainbox" grep -qx 'False False False' "$tmp/r4b.out"
check "... and wrote no heartbeat" test ! -s "$tmp/logs4/attempt_0/0/heartbeat"
# --- 5. the trainbox module: heartbeat() writes the record, doctor() and smi() ---
cat >"$tmp/module.py" <<'PY'
import sys, trainbox
trainbox.heartbeat(5, "data")
try:
    trainbox.heartbeat(6, "Data!")
    sys.exit("a bad phase was accepted")
except ValueError as e:
    print("bad phase:", e)
d = trainbox.doctor()
assert isinstance(d, dict) and "findings" in d, d
try:
    rows = trainbox.smi()
    assert isinstance(rows, list), rows
    print("smi rows:", len(rows))
except trainbox.TrainboxError as e:
    print("smi:", e)  # no NVIDIA driver here: the one-line reason
PY
# without TRAINBOX_BIN (ctest sets it), so the module finds the launcher that runs it
env -u TRAINBOX_BIN PYTHONPATH="$TRAINBOX_SOURCE_DIR/python" "$bin" run --no-prefix -n 1 --log-dir "$tmp/logs5" -- \
  "$tmp/module.py" \
  >"$tmp/r5.out" 2>&1
rc=$?
check "5. trainbox.heartbeat/doctor/smi in a worker (exit $rc)" test "$rc" = 0 || cat "$tmp/r5.out"
check "... heartbeat(5, 'data') is the record the launcher reads" grep -qE '^5 data [0-9]+ *$' "$tmp/logs5/attempt_0/0/heartbeat"
check "... a bad phase is refused, naming it" grep -q "bad phase: heartbeat phase 'Data!' is not a word" "$tmp/r5.out"
check "... smi: GPU rows, or the reason there are none" grep -qE '^smi( rows)?: ' "$tmp/r5.out"

# --- 6. a script's own heartbeat records are never overwritten ---
cat >"$tmp/own.py" <<'PY'
import mmap, os, sys, time
import torch
import torch.distributed as dist
fd = os.open(os.environ["TRAINBOX_HEARTBEAT_FILE"], os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(fd, 64)
hb = mmap.mmap(fd, 64)
dist.init_process_group("gloo")  # arms the instrumentation's writer
hb[:64] = f"7 custom {time.time_ns() // 10**6}".ljust(63).encode() + b"\n"
end = time.monotonic() + 0.6  # six of the writer's samples, all in torch.save ("checkpoint")
while time.monotonic() < end:
    torch.save(torch.zeros(1000), sys.argv[1])
dist.destroy_process_group()
PY
"$bin" run --no-prefix -n 1 --log-dir "$tmp/logs6" -- "$tmp/own.py" "$tmp/own-$marker.pt" >"$tmp/r6.out" 2>&1
rc=$?
check "6. a script with its own heartbeat writer (exit $rc)" test "$rc" = 0 || cat "$tmp/r6.out"
check "... its record stands, not the instrumentation's ($(head -c 40 "$tmp/logs6/attempt_0/0/heartbeat" 2>/dev/null))" \
  grep -qE '^7 custom [0-9]+ *$' "$tmp/logs6/attempt_0/0/heartbeat"
echo "#    ${SECONDS} s"
exit $fail
