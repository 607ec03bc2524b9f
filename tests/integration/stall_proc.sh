#!/usr/bin/env bash
# Stalls the heartbeats alone cannot explain, on CPU (Gloo): trainbox run reads every idle
# rank's /proc and names what the kernel sees.
#   1. rank 1 SIGSTOPped before the rendezvous (it never writes a record): named as stopped,
#      and the job ends within the stall timeout + 10 s (not the store's 300 s);
#   2. rank 1 SIGSTOPped during training, right after its allreduce record: the headline names
#      rank 1 as stopped (not rank 0, which waits like the others);
#   3. the teardown after --on-stall kill with that stopped rank: SIGTERM + SIGCONT, so it takes
#      at most 2 s, sends no SIGKILL and leaves no process;
#   4. a program that writes no records at all: a stopped rank is still named;
#   5. a rank in uninterruptible sleep (D): the parent of a vfork()ed child that stopped itself
#      (D in Linux's wait for the child, but killable): named with its wait channel, no stack
#      tool waits on it, and it is torn down (skipped where that parent is not shown as D);
#   6. a worker the launcher cannot reap after SIGKILL (a foreign tracer holds its zombie, as
#      a kernel call holds a D process): named, left behind, and the launcher exits anyway.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
marker=trainbox-stall-proc-test-$$
cleanup() { [[ $BASHPID == "$$" ]] || return 0; pkill -KILL -f "$marker" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
job=("${small[@]}" --set data.path="$marker" --set train.log_every=5)
now() { date +%s.%N; }
le() { awk -v a="$1" -v b="$2" -v c="$3" 'BEGIN { exit !(b - a <= c) }'; }  # le T0 T1 MAX: T1 - T0 <= MAX
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
# at_line FILE PATTERN: the time PATTERN first appears in FILE (polled), or "" after 60 s
at_line() {
  for _ in $(seq 600); do grep -qE -- "$2" "$1" 2>/dev/null && { now; return; }; sleep 0.1; done
}
# rank_pid RANK: the pid of this test's worker with that RANK
rank_pid() {
  local pid
  for pid in $(pgrep -f "$marker"); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "RANK=$1" && { echo "$pid"; return; }
  done
}
left() { sleep 0.5; pgrep -f "$marker"; }

# --- 1. stopped before the rendezvous ---
# rank 1's process stops itself before it execs trainbox train: ranks 0 and 2 reach the
# rendezvous (their record says so) and wait for it there.
stop_self='[ "$RANK" = 1 ] && kill -STOP $$; exec "$@"'
t0=$(now)
"$bin" run --standalone --nproc-per-node 3 --stall-timeout 5 --log-dir "$tmp/logs1" -- \
  sh -c "$stop_self" "$marker" "$bin" train "${job[@]}" --set train.epochs=100 --run-dir "$tmp/r1" >"$tmp/r1.out" 2>&1
rc=$?
t1=$(now)
check "1. stopped before the rendezvous: exit 124 (got $rc)" test "$rc" = 124
check "... named as stopped before its first heartbeat" \
  grep -qE 'stalled: rank 1 \(pid [0-9]+\) is stopped \(state T: SIGSTOP, a debugger or a freezer\) before its first heartbeat' \
  "$tmp/r1.out"
check "... ended within the stall timeout + 10 s ($(secs "$t0" "$t1") s)" le "$t0" "$t1" 15
check "... the summary's root cause is rank 1's stall" grep -qE 'message +: stalled: rank 1 \(pid' "$tmp/r1.out"
check "... nothing left" test -z "$(left)"

# --- 2./3. stopped during training, after its allreduce record ---
"$bin" run --standalone --nproc-per-node 3 --stall-timeout 5 --log-dir "$tmp/logs2" -- "$bin" train "${job[@]}" \
  --set train.epochs=1000 --run-dir "$tmp/r2" >"$tmp/r2.out" 2>&1 &
l=$!
hb=$tmp/logs2/attempt_0/1/heartbeat
stopped=""
for _ in $(seq 1200); do  # rank 1 in its allreduce of step 3 or later
  if grep -qE '^([3-9]|[1-9][0-9]+) allreduce ' "$hb" 2>/dev/null; then
    pid=$(rank_pid 1)
    [[ -n $pid ]] && kill -STOP "$pid" && stopped=$pid
    break
  fi
  sleep 0.02
done
check "2. rank 1 stopped after its allreduce record (pid ${stopped:-none}; record: $(head -c 30 "$hb" 2>/dev/null))" \
  test -n "$stopped"
t_kill=$(at_line "$tmp/r2.out" 'on-stall kill: stopping every worker')
wait $l; rc=$?
t_end=$(now)
check "... exit 124 (got $rc)" test "$rc" = 124
check "... the headline names rank 1 as stopped" \
  grep -qE "stalled: rank 1 \(pid $stopped\) is stopped \(state T: SIGSTOP, a debugger or a freezer\), last in \`[a-z_]+\` at step [0-9]+" \
  "$tmp/r2.out"
check "... and not rank 0" bash -c "! grep -qE 'stalled: rank 0 ' '$tmp/r2.out'"
check "... its stack line is marked with its state" \
  grep -qE "^  rank 1 \(pid $stopped, .*<-- stalled \(state T" "$tmp/r2.out"
check "... its stacks file has the kernel's view" grep -q '^# kernel: state T' "$tmp/logs2/attempt_0/stacks/rank_1.txt"
check "3. teardown with a stopped rank: at most 2 s ($(secs "${t_kill:-0}" "$t_end") s)" le "${t_kill:-0}" "$t_end" 2
check "... without SIGKILL (SIGCONT let it act on SIGTERM)" bash -c "! grep -q 'sending SIGKILL' '$tmp/r2.out'"
check "... nothing left" test -z "$(left)"

# --- 4. no records at all: the kernel's view alone ---
t0=$(now)
"$bin" run --standalone --nproc-per-node 2 --stall-timeout 3 -- \
  sh -c '[ "$RANK" = 1 ] && kill -STOP $$; sleep 60' "$marker" >"$tmp/r4.out" 2>&1
rc=$?
t1=$(now)
check "4. no records: a stopped rank is named, exit 124 (got $rc, $(secs "$t0" "$t1") s)" test "$rc" = 124
check "... as stopped before its first heartbeat" \
  grep -qE 'stalled: rank 1 \(pid [0-9]+\) is stopped \(state T: .*\) before its first heartbeat' "$tmp/r4.out"
check "... nothing left" test -z "$(left)"

# --- 5. uninterruptible sleep: a vfork parent whose child stopped itself ---
cat >"$tmp/vfork_d.py" <<'EOF'
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
if os.environ.get("RANK") == "1":
    if libc.vfork() == 0:  # the child shares our memory: only C calls until it is gone
        libc.kill(libc.getpid(), signal.SIGSTOP)
        libc._exit(0)
time.sleep(60)
EOF
# probe: is such a parent shown as D on this kernel?
RANK=1 "$py" "$tmp/vfork_d.py" "$marker" &
probe=$!
sleep 1
state=$(sed 's/.*) //' /proc/$probe/stat 2>/dev/null | cut -d' ' -f1)
kill -KILL $probe 2>/dev/null; wait $probe 2>/dev/null
pkill -KILL -f "$tmp/vfork_d.py" 2>/dev/null
if [[ $state == D ]]; then
  t0=$(now)
  "$bin" run --standalone --nproc-per-node 2 --stall-timeout 3 -- "$py" "$tmp/vfork_d.py" "$marker" >"$tmp/r5.out" 2>&1
  rc=$?
  t1=$(now)
  check "5. a rank in D: named, exit 124 (got $rc, $(secs "$t0" "$t1") s)" test "$rc" = 124
  check "... in uninterruptible sleep, with its wait channel" \
    grep -qE 'stalled: rank 1 \(pid [0-9]+\) is in uninterruptible sleep in [a-z_0-9.]+ \(D for [0-9.]+ s of 3 s\)' "$tmp/r5.out"
  # a tracer cannot attach to a process in D: no stack tool is run on it (one would wait out
  # --stack-timeout, 10 s), its kernel stack is taken instead
  check "... no tracer tried on it" grep -q 'no tracer can attach to a process in uninterruptible sleep' "$tmp/r5.out"
  check "... so it ended within the stall timeout + 7 s" le "$t0" "$t1" 10
  check "... torn down without SIGKILL" bash -c "! grep -q 'sending SIGKILL' '$tmp/r5.out'"
  check "... nothing left" test -z "$(left)"
else
  skip_part 5 "a vfork parent is in state '${state:-?}' here, not D"
fi

# --- 6. a worker that outlives SIGKILL: the launcher must not hang on it ---
# A zombie ptracee is visible only to its tracer: with a tracer that never waits, the
# launcher cannot reap rank 1 after SIGKILL, as it cannot reap a worker stuck in D.
cat >"$tmp/tracer.py" <<'EOF'
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
if libc.ptrace(0x4206, int(sys.argv[1]), None, None) != 0:  # PTRACE_SEIZE, then never wait
    sys.exit(f"PTRACE_SEIZE failed: errno {ctypes.get_errno()}")
print("attached", flush=True)
time.sleep(120)
EOF
t0=$(now)
"$bin" run --standalone --nproc-per-node 2 --grace-period 1 -- "$py" -c \
  'import os, sys, time; time.sleep(3) or sys.exit(3) if os.environ["RANK"] == "0" else time.sleep(60)' "$marker" \
  >"$tmp/r6.out" 2>&1 &
l=$!
pid=""
for _ in $(seq 100); do pid=$(rank_pid 1); [[ -n $pid ]] && break; sleep 0.05; done
"$py" "$tmp/tracer.py" "$pid" "$marker" >"$tmp/tracer.out" 2>&1 &
tracer=$!
for _ in $(seq 100); do grep -q attached "$tmp/tracer.out" && break; sleep 0.05; done
if grep -q attached "$tmp/tracer.out"; then
  wait $l; rc=$?
  t1=$(now)
  check "6. a worker that outlives SIGKILL: the launcher exits with rank 0's code (got $rc, $(secs "$t0" "$t1") s)" \
    test "$rc" = 3
  check "... within rank 0's 3 s + the grace period + 5 s (+ 3 s slack)" le "$t0" "$t1" 12
  check "... naming the worker it left behind" \
    grep -qE "rank 1 \(pid $pid\) did not end within 5 s of SIGKILL \(state Z\); trainbox run exits without it" "$tmp/r6.out"
  check "... and the summary says so" grep -qE "rank 1 \(local_rank: 1, pid $pid\): left behind: not gone after SIGKILL" "$tmp/r6.out"
else
  check "6. the tracer attached ($(cat "$tmp/tracer.out"))" false
  kill $l 2>/dev/null; wait $l
fi
kill -KILL $tracer 2>/dev/null; wait $tracer 2>/dev/null
check "... nothing left once the tracer is gone" test -z "$(left)"
exit $fail
