#!/usr/bin/env bash
# Hang forensics on CPU (Gloo): trainbox run names a stalled rank, the ranks waiting on it,
# and where every rank is, then acts.
#   1. 3 ranks, rank 1 stalls at step 40, --stall-timeout 5: named (with the waiting ranks)
#      no earlier than 5 s after the stall (less 0.5 s: both moments are seen by polling the
#      console every 0.1 s) and within 5 s + 3 s, the named idle time >= 5 s; stacks for all
#      3 ranks (rank 1's shows the injected sleep, ranks 0 and 2 the DDP allreduce wait);
#      exit 124; nothing left;
#   2. --on-stall restart --max-restarts 1, stall on attempt 0 only: the job completes with an
#      uninterrupted run's weights;
#   3. a Python DDP worker (torch.distributed, Gloo) reporting heartbeats with the documented
#      standard-library snippet, rank 1 sleeping before a collective: named, and py-spy's
#      Python stack shows the sleeping line (py-spy and torch.distributed come with the venv:
#      missing, they fail the test);
#   4. SIGUSR1 during a healthy run: stacks written, the job unharmed (same weights);
#   5. a stack tool that hangs (a fake eu-stack) is abandoned after --stack-timeout and the
#      teardown completes.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
marker=trainbox-hang-test-$$
cleanup() { [[ $BASHPID == "$$" ]] || return 0; pkill -KILL -f "$marker" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
job=("${small[@]}" --set data.path="$marker" --set train.log_every=5)
export_latest() { "$bin" export "$1/checkpoints/$(cat "$1/checkpoints/latest")" "$2" >/dev/null 2>&1; }
# at_line FILE PATTERN: seconds (epoch, fractional) when PATTERN first appears in FILE (polled), or "" after 60 s
at_line() {
  for _ in $(seq 600); do grep -qE -- "$2" "$1" 2>/dev/null && { date +%s.%N; return; }; sleep 0.1; done
}

# --- 1. rank 1 stalls at step 40 ---
"$bin" run --standalone --nproc-per-node 3 --stall-timeout 5 --log-dir "$tmp/logs1" -- "$bin" train "${job[@]}" \
  --set train.epochs=100 --set debug.stall_rank=1 --set debug.stall_step=40 --run-dir "$tmp/r1" >"$tmp/r1.out" 2>&1 &
l=$!
t_stall=$(at_line "$tmp/r1.out" 'debug.stall: rank 1 stalls at step 40')
t_named=$(at_line "$tmp/r1.out" 'stalled: rank 1 ')
wait $l; rc=$?
check "1. stall: exit 124 (got $rc)" test "$rc" = 124
check "... named: rank 1 in data at step 40, ranks 0, 2 waiting in allreduce" \
  grep -qE 'stalled: rank 1 \(pid [0-9]+\) has been in `data` at step 40 for [0-9.]+ s; ranks 0, 2 wait in allreduce' "$tmp/r1.out"
check "... the stall was announced and then named (seen at ${t_stall:-never}, ${t_named:-never})" \
  test -n "$t_stall" -a -n "$t_named"
gap=$(awk -v a="${t_stall:-0}" -v b="${t_named:-0}" 'BEGIN { printf "%.1f", b - a }')
check "... named no earlier than the stall timeout (less 0.5 s) and within it + 3 s (4.5 <= $gap <= 8 s)" \
  awk -v a="$t_stall" -v b="$t_named" 'BEGIN { exit !(a != "" && b != "" && b - a >= 4.5 && b - a <= 8) }'
idle=$(grep -oE 'stalled: rank 1 \(pid [0-9]+\) has been in `data` at step 40 for [0-9.]+ s' "$tmp/r1.out" | head -1 | grep -oE '[0-9.]+ s$')
check "... after an idle time of at least the timeout (${idle:-none})" awk -v n="${idle% s}" 'BEGIN { exit !(n != "" && n >= 5) }'
# main_thread FILE: the frames of the worker's main thread (TID = the pid in the file's header)
main_thread() {
  awk 'NR == 1 { match($0, /pid [0-9]+/); pid = substr($0, RSTART + 4, RLENGTH - 4) }
       /^TID / { main = ($2 == pid ":") } main && /^#/' "$1" 2>/dev/null
}
st=$tmp/logs1/attempt_0/stacks
check "... rank 1's main thread sleeps in the injected stall, called from the training loop's epoch, under fit()" \
  grep -qzP '#[0-9]+ +0x[0-9a-f]+ [^\n]*fault_injection_stall\(int, long, char const\*\)\n#[0-9]+ +0x[0-9a-f]+ trainbox::train::[^\n]*FitLoop::run_epoch\(long\)\n#[0-9]+ +0x[0-9a-f]+ trainbox::train::Trainer::Impl::fit\(\)' \
  <(main_thread "$st/rank_1.txt")
for r in 0 2; do
  check "... rank $r's main thread waits on the gradient allreduce (ProcessGroup::wait in DDP's finalize_backward)" \
    grep -qzP '#[0-9]+ +0x[0-9a-f]+ trainbox::dist::ProcessGroup::wait\([^\n]*\n(#[0-9]+ +0x[0-9a-f]+ trainbox::dist::DistributedDataParallel::finish_bucket\([^\n]*\n)?#[0-9]+ +0x[0-9a-f]+ trainbox::dist::DistributedDataParallel::finalize_backward\(\)' \
    <(main_thread "$st/rank_$r.txt")
done
check "... the console shows each rank's innermost frames, rank 1 marked" \
  grep -qE '^  rank 1 \(pid [0-9]+, data @ step 40\): sleep ← fault_injection_stall ← FitLoop::run_epoch +<-- stalled' "$tmp/r1.out"
check "... the summary's root cause is the stall" grep -qE 'message +: stalled: rank 1' "$tmp/r1.out"
sleep 0.5
check "... no process left" test -z "$(pgrep -f "$marker")"

# --- 2. --on-stall restart: the stall only on attempt 0; the job completes as if uninterrupted ---
ck=(--set train.epochs=2 --set checkpoint.every_steps=10)
"$bin" run --standalone --nproc-per-node 3 -- "$bin" train "${job[@]}" "${ck[@]}" --run-dir "$tmp/ref" --quiet >/dev/null 2>&1
timeout 180 "$bin" run --standalone --nproc-per-node 3 --stall-timeout 4 --on-stall restart --max-restarts 1 -- \
  "$bin" train "${job[@]}" "${ck[@]}" --set debug.stall_rank=1 --set debug.stall_step=40 --set debug.stall_attempt=0 \
  --run-dir "$tmp/r2" >"$tmp/r2.out" 2>&1
rc=$?
check "2. --on-stall restart: the job completes (exit $rc)" test "$rc" = 0
check "... after restarting for the stall" grep -q 'on-stall restart: stopping every worker for restart 1 of 1' "$tmp/r2.out"
export_latest "$tmp/ref" "$tmp/ref.st"; export_latest "$tmp/r2" "$tmp/r2.st"
check "... with the uninterrupted run's final weights" cmp -s "$tmp/ref.st" "$tmp/r2.st"

# --- 3. a Python DDP worker with the documented heartbeat snippet ---
pyspy=$(dirname "$py")/py-spy
[[ -x $pyspy ]] || pyspy=$(command -v py-spy)
if ! why=$("$py" -c 'import torch.distributed' 2>&1); then
  check "3. $py imports torch.distributed (run scripts/bootstrap): $(tail -n 1 <<<"$why")" false
elif [[ -z $pyspy ]]; then
  check "3. py-spy next to $py or on PATH (deps/requirements-tools.txt: run scripts/bootstrap)" false
else
  cat >"$tmp/ddp_worker.py" <<'EOF'
import os, sys, time
import torch
import torch.distributed as dist
# --- the heartbeat snippet of docs/distributed.md ("Hangs") ---
import mmap
_hb = None
if os.environ.get("TRAINBOX_HEARTBEAT_FILE"):
    _fd = os.open(os.environ["TRAINBOX_HEARTBEAT_FILE"], os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(_fd, 64)
    _hb = mmap.mmap(_fd, 64)
def beat(step, phase):
    if _hb is not None:
        _hb[:64] = f"{step} {phase} {time.time_ns() // 10**6}".ljust(63).encode()[:63] + b"\n"
# --- end of the snippet ---

def load_batch(step):
    if dist.get_rank() == 1 and step == 5:
        time.sleep(3600)  # the sleeping line py-spy must show
    return torch.ones(4)

dist.init_process_group("gloo")
for step in range(1000):
    beat(step, "data")
    x = load_batch(step)
    beat(step, "allreduce")
    dist.all_reduce(x)
    time.sleep(0.01)
dist.destroy_process_group()
EOF
  "$bin" run --standalone --nproc-per-node 2 --stall-timeout 3 --log-dir "$tmp/logs3" -- \
    "$py" "$tmp/ddp_worker.py" "$marker" >"$tmp/r3.out" 2>&1
  rc=$?
  check "3. Python DDP worker: the stall is named, exit 124 (got $rc)" test "$rc" = 124
  check "... rank 1 in data at step 5, rank 0 waiting in allreduce" \
    grep -qE 'stalled: rank 1 \(pid [0-9]+\) has been in `data` at step 5 .*; rank 0 waits in allreduce' "$tmp/r3.out"
  check "... py-spy's Python stack shows the sleeping line" \
    grep -qE 'load_batch \(.*ddp_worker.py:[0-9]+\)' "$tmp/logs3/attempt_0/stacks/rank_1.txt"
  check "... and the console its innermost frames" grep -qE '^  rank 1 .*load_batch \(ddp_worker.py:[0-9]+\)' "$tmp/r3.out"
fi

# --- 4. SIGUSR1 during a healthy run: stacks, and the same weights as without it ---
# 12 epochs (~380 steps): long enough that the signal lands mid-run even on a loaded machine
"$bin" run --standalone --nproc-per-node 2 -- "$bin" train "${job[@]}" --set train.epochs=12 --run-dir "$tmp/h0" --quiet \
  >/dev/null 2>&1
"$bin" run --standalone --nproc-per-node 2 --log-dir "$tmp/logs4" -- "$bin" train "${job[@]}" --set train.epochs=12 \
  --run-dir "$tmp/h1" --quiet >"$tmp/r4.out" 2>&1 &
l=$!
# rank 1 past its first steps (a record with step >= 3 that is not "done")
for _ in $(seq 400); do
  grep -qE '^([3-9]|[1-9][0-9]+) (data|forward_backward|allreduce|optimizer) ' "$tmp/logs4/attempt_0/1/heartbeat" 2>/dev/null && break
  sleep 0.05
done
kill -USR1 $l 2>/dev/null || echo "FAIL 4. the run ended before SIGUSR1 could be sent"
wait $l; rc=$?
check "4. SIGUSR1 mid-run: the job finishes (exit $rc)" test "$rc" = 0
check "... every rank's stacks were written" test -s "$tmp/logs4/attempt_0/stacks/rank_0.txt" -a -s "$tmp/logs4/attempt_0/stacks/rank_1.txt"
export_latest "$tmp/h0" "$tmp/h0.st"; export_latest "$tmp/h1" "$tmp/h1.st"
check "... and the weights equal a run without SIGUSR1" cmp -s "$tmp/h0.st" "$tmp/h1.st"

# --- 5. a stack tool that hangs is abandoned; the teardown completes ---
fake=$tmp/$marker-bin  # the marker in the fake tool's path: pgrep finds it if it outlives its deadline
mkdir -p "$fake"
printf '#!/bin/sh\nwhile true; do sleep 1; done\n' >"$fake/eu-stack"
chmod +x "$fake/eu-stack"
t0=$(date +%s)
PATH="$fake:$PATH" timeout 120 "$bin" run --standalone --nproc-per-node 2 --stall-timeout 3 --stack-timeout 2 -- \
  "$bin" train "${job[@]}" --set train.epochs=100 --set debug.stall_rank=0 --set debug.stall_step=10 --run-dir "$tmp/r5" \
  >"$tmp/r5.out" 2>&1
rc=$?
check "5. a hanging stack tool: the job still ends with 124 (got $rc, $(($(date +%s) - t0)) s)" test "$rc" = 124
check "... the capture was abandoned and said so" grep -q 'eu-stack did not answer within 2000 ms' "$tmp/r5.out"
sleep 0.5
check "... nothing left (the fake tool included)" test -z "$(pgrep -f "$marker")"
exit $fail
