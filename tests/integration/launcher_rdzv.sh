#!/usr/bin/env bash
# trainbox run --rdzv-backend c10d with two launchers on this machine (127.0.0.1), workers that
# are small Python scripts (no torch): one world without --node-rank, [host:rank N] prefixes,
# a worker SIGKILLed on node 1 stopping both nodes with 137 and the same root cause, a lost
# node (launcher SIGKILLed: connection closed; launcher SIGSTOPped: heartbeat silence, the
# loopback stand-in for a cut link), restarts as one attempt on both nodes with a fresh
# MASTER_PORT, a signal on one node stopping both, and bad input (unresolvable or silent
# endpoint, a node missing, a second job with the same id, mismatched --nnodes), and the job
# digest: per-node --run-dir runs with one note, another optim.lr is refused (exit 2, one line).
# tests/integration/netns*.sh runs the same across network namespaces.
# Every wait is bounded. Needs TRAINBOX_BIN (set by ctest).
set -uo pipefail
bin=${TRAINBOX_BIN:?}
py=$(command -v python3) || { echo "SKIP: python3 is needed for the workers"; exit 77; }
tmp=$(mktemp -d)
export TMPDIR=$tmp
tag="tbxrdzv$$r$RANDOM"  # in every worker's argv: pgrep finds exactly this test's processes
cleanup() {
  [[ $BASHPID == "$$" ]] || return 0
  pkill -CONT -f "$tag" 2>/dev/null
  pkill -KILL -f "$tag" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
source "$(dirname "$0")/check_lib.sh"
FLUNK_LOGS="$tmp/n0.err $tmp/n1.err"
source "$(dirname "$0")/launcher_lib.sh"
host=$(hostname)

now() { date +%s.%N; }
elapsed() { "$py" -c "print(f'{$2 - $1:.2f}')"; }

cat >"$tmp/w.py" <<'EOF'
import os, signal, sys, time
mode, d = sys.argv[1], os.environ["TBX_DIR"]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
def mark(name, text=""):
    with open(os.path.join(d, f"{rank}.{name}"), "w") as f:
        f.write(text)
def wait_all(name, seconds=20):
    end = time.time() + seconds
    while time.time() < end and not all(os.path.exists(os.path.join(d, f"{r}.{name}")) for r in range(world)):
        time.sleep(0.02)
env = " ".join(f"{k}={os.environ[k]}" for k in ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                                "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                                "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID"))
mark(f"a{attempt}.env", env + "\n")
print("hello from", rank, flush=True)
if mode == "print":
    sys.exit(0)
mark(f"a{attempt}.ready")
if mode == "kill9":      # rank 3 (node 1) SIGKILLs itself once all are up, after 20 huge stderr lines
    wait_all(f"a{attempt}.ready")
    if rank == 3:
        for i in range(20):
            print("x" * 60000, file=sys.stderr, flush=True)  # a 1.2 MB tail must still cross the channel
        print("rank 3 about to die", file=sys.stderr, flush=True)
        mark("killed", str(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)
elif mode == "fail-once":  # rank 2 (node 1) exits 3 in attempt 0; attempt 1 succeeds everywhere
    wait_all(f"a{attempt}.ready")
    if attempt == 0 and rank == 2:
        sys.exit(3)
    if attempt == 0:
        time.sleep(600)
    sys.exit(0)
elif mode == "late-fail":  # everyone succeeds at once but rank 3, which fails 1 s later
    if rank == 3:
        time.sleep(1)
        sys.exit(4)
elif mode == "chatty":  # 256 KiB of stdout (more than a pipe holds), then sleep
    sys.stdout.write(("y" * 1023 + "\n") * 256); sys.stdout.flush()
    mark(f"a{attempt}.chatted")
    time.sleep(600)
elif mode == "sleep":
    time.sleep(600)
EOF

# node N NAME [launcher options…] -- MODE: one launcher in the background; pid in $n<N>.
node() {
  local i=$1 name=$2
  shift 2
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  mkdir -p "$tmp/$name"
  TBX_DIR="$tmp/$name" "$bin" run "${opts[@]}" -- "$py" "$tmp/w.py" "$2" "$tag-$name" >"$tmp/n$i.out" 2>"$tmp/n$i.err" &
  eval "n$i=\$!"
  # Node 0 first hosts the rendezvous (and so becomes node rank 0): wait until it listens.
  if [[ $i == 0 ]]; then
    local t=0
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || ((t++ >= 100)); do sleep 0.05; done
  fi
}
c10d() { echo --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "$1"; }

# --- one world of 4 from two launchers, no --node-rank ---
port=$(free_port)
node 0 world $(c10d world) -- print
node 1 world $(c10d world) --node-rank 5 -- print
bounded_wait "$n0" 20; rc0=$rc
bounded_wait "$n1" 20; rc1=$rc
if [[ $rc0 != 0 || $rc1 != 0 ]]; then
  flunk world "exits $rc0 and $rc1"
else
  cat "$tmp"/world/*.a0.env | sort >"$tmp/envs"
  mp=$(sed -nE 's/.*MASTER_PORT=([0-9]+).*/\1/p' "$tmp/envs" | sort -u)
  want=$(for r in 0 1 2 3; do
    echo "RANK=$r LOCAL_RANK=$((r % 2)) GROUP_RANK=$((r / 2)) WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$mp TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_RUN_ID=world"
  done)
  if [[ $(wc -l <<<"$mp") != 1 || $mp == "$port" ]]; then
    flunk world "MASTER_PORT is not one port other than the endpoint's: $mp"
  elif [[ $(cat "$tmp/envs") != "$want" ]]; then
    flunk world "environments differ:"$'\n'"$(diff <(echo "$want") "$tmp/envs")"
  else
    pass world
  fi
  has "$tmp/n0.out" "^\[$host:rank [01]\] hello from [01]$" && has "$tmp/n1.out" "^\[$host:rank [23]\] hello from [23]$" &&
    ! grep -qvE "^\[$host:rank [0-3]\] " "$tmp/n0.out" "$tmp/n1.out" && pass host-prefix ||
    flunk host-prefix "lines are not prefixed [$host:rank N]"
  has "$tmp/n1.err" 'node rank 1 of 2' && has "$tmp/n0.err" 'node rank 0 of 2 .*hosting the rendezvous' &&
    pass node-ranks || flunk node-ranks "the launchers do not say which node rank they got"
  has "$tmp/n1.err" '--node-rank 5 is ignored with --rdzv-backend c10d' && pass node-rank-ignored ||
    flunk node-rank-ignored "no note that --node-rank is ignored"
fi

# --- kill -9 of a worker on node 1: both launchers exit 137 and name rank 3 on node 1 ---
port=$(free_port)
node 0 kill9 $(c10d kill9) --grace-period 5 -- kill9
node 1 kill9 $(c10d kill9) --grace-period 5 -- kill9
bounded_wait "$n0" 30; rc0=$rc; t0=$(now)
bounded_wait "$n1" 10; rc1=$rc; t1=$(now)
if [[ $rc0 != 137 || $rc1 != 137 ]]; then
  flunk kill9-both-137 "exits $rc0 and $rc1, wanted 137 and 137"
else
  killed=$(cat "$tmp/kill9/3.killed" 2>/dev/null || echo 0)
  echo "     (worker killed → node 0's launcher exited after $(elapsed "$killed" "$t0") s, node 1's after $(elapsed "$killed" "$t1") s)"
  ok=1
  for i in 0 1; do
    if ! has "$tmp/n$i.err" 'Root Cause' || ! has "$tmp/n$i.err" "host +: $host \(node rank 1\)" ||
      ! has "$tmp/n$i.err" 'rank +: 3 \(local_rank: 1\)' || ! has "$tmp/n$i.err" 'exitcode +: signal SIGKILL \(9\)' ||
      ! has "$tmp/n$i.err" '\| rank 3 about to die'; then
      ok=0
      flunk kill9-both-137 "node $i's summary does not name rank 3 on node 1, SIGKILL and its stderr"
    fi
  done
  has "$tmp/n0.err" "note: this node's workers were stopped because of rank 3 on node 1" ||
    { ok=0; flunk kill9-both-137 "node 0 does not say its workers stopped because of node 1"; }
  ((ok)) && pass kill9-both-137
fi
gone "$tag-kill9" 5 && pass kill9-no-orphans || flunk kill9-no-orphans "$(pgrep -af "$tag-kill9")"

# --- node 0's workers succeed, then rank 3 on node 1 fails: the job fails on both, with 4 ---
port=$(free_port)
node 0 late $(c10d late) -- late-fail
node 1 late $(c10d late) -- late-fail
bounded_wait "$n0" 20; rc0=$rc
bounded_wait "$n1" 10; rc1=$rc
[[ $rc0 == 4 && $rc1 == 4 ]] && has "$tmp/n0.err" "note: this node's workers had finished; the job failed because of rank 3 on node 1" &&
  pass late-failure || flunk late-failure "exits $rc0 and $rc1 (wanted 4 and 4, node 0 saying its workers had finished)"

# --- node 1's launcher SIGKILLed (with its workers, by its watchdog): node 0 stops, 125 ---
port=$(free_port)
node 0 lost $(c10d lost) --rdzv-conf heartbeat_timeout=3 --grace-period 5 -- sleep
node 1 lost $(c10d lost) --rdzv-conf heartbeat_timeout=3 --grace-period 5 -- sleep
if wait_files "$tmp/lost" a0.ready 4 20; then
  t=$(now)
  { kill -KILL "$n1"; wait "$n1"; } 2>/dev/null  # no "Killed" job notice
  bounded_wait "$n0" 15; rc0=$rc
  echo "     (node 1's launcher SIGKILLed → node 0 exited after $(elapsed "$t" "$(now)") s)"
  expect_exit lost-launcher "$rc0" 125 "$tmp/n0.err" "lost node 1 \($host, 127\.0\.0\.1, last heard [0-9.]+ s ago\)" \
    "that node 1 was lost"
else
  flunk lost-launcher "workers did not start"
fi
gone "$tag-lost" 5 && pass lost-launcher-no-orphans || flunk lost-launcher-no-orphans "$(pgrep -af "$tag-lost")"

# --- the hosting launcher (node 0) SIGKILLed: node 1 loses the rendezvous and stops, 125 ---
port=$(free_port)
node 0 lost0 $(c10d lost0) --rdzv-conf heartbeat_timeout=3 --grace-period 5 -- sleep
node 1 lost0 $(c10d lost0) --rdzv-conf heartbeat_timeout=3 --grace-period 5 -- sleep
if wait_files "$tmp/lost0" a0.ready 4 20; then
  t=$(now)
  { kill -KILL "$n0"; wait "$n0"; } 2>/dev/null
  bounded_wait "$n1" 15; rc1=$rc
  echo "     (node 0's launcher SIGKILLed → node 1 exited after $(elapsed "$t" "$(now)") s)"
  [[ $rc1 == 125 ]] && has "$tmp/n1.err" "lost node 0 \($host, 127\.0\.0\.1, last heard [0-9.]+ s ago\)" &&
    pass lost-host || flunk lost-host "node 1 exited $rc1 (wanted 125 naming node 0)"
else
  flunk lost-host "workers did not start"
fi
gone "$tag-lost0" 5 && pass lost-host-no-orphans || flunk lost-host-no-orphans "$(pgrep -af "$tag-lost0")"

# --- node 1's launcher frozen (SIGSTOP: no FIN, no RST — what a cut link looks like): node 0
# declares it lost after heartbeat_timeout; node 1, thawed, reads that it was dropped and stops too ---
port=$(free_port)
node 0 silent $(c10d silent) --rdzv-conf heartbeat_interval=0.5,heartbeat_timeout=3 --grace-period 5 -- sleep
node 1 silent $(c10d silent) --rdzv-conf heartbeat_interval=0.5,heartbeat_timeout=3 --grace-period 5 -- sleep
if wait_files "$tmp/silent" a0.ready 4 20; then
  kill -STOP "$n1"
  t=$(now)
  bounded_wait "$n0" 15; rc0=$rc
  took=$(elapsed "$t" "$(now)")
  echo "     (node 1's launcher frozen → node 0 exited after $took s; heartbeat_timeout 3 s)"
  expect_exit lost-silent "$rc0" 125 "$tmp/n0.err" \
    "lost node 1 \($host, 127\.0\.0\.1, last heard [3-9]\.[0-9] s ago\): no heartbeat for 3 s" \
    "that node 1 was silent for the heartbeat timeout"
  kill -CONT "$n1"
  bounded_wait "$n1" 15; rc1=$rc
  [[ $rc1 == 125 ]] && has "$tmp/n1.err" 'the rendezvous declared this node lost: no heartbeat for 3 s' &&
    pass lost-silent-other-side || flunk lost-silent-other-side "thawed node 1 exited $rc1 (wanted 125, saying it was declared lost)"
else
  flunk lost-silent "workers did not start"
  kill -CONT "$n1"
fi
gone "$tag-silent" 5 && pass lost-silent-no-orphans || flunk lost-silent-no-orphans "$(pgrep -af "$tag-silent")"

# --- node 1's console blocks (its stdout is a pipe nobody reads): its workers stall, but its
# heartbeats go on, so node 0 does not declare it lost ---
port=$(free_port)
mkfifo "$tmp/fifo"
exec 7<>"$tmp/fifo"  # held open, never read: node 1's writes block once the pipe is full
node 0 blocked $(c10d blocked) --rdzv-conf heartbeat_interval=0.5,heartbeat_timeout=2 --grace-period 5 -- chatty
mkdir -p "$tmp/blocked"
TBX_DIR="$tmp/blocked" "$bin" run $(c10d blocked) --rdzv-conf heartbeat_interval=0.5,heartbeat_timeout=2 --grace-period 5 \
  -- "$py" "$tmp/w.py" chatty "$tag-blocked" >"$tmp/fifo" 2>"$tmp/n1.err" &
n1=$!
if wait_files "$tmp/blocked" a0.ready 4 20; then
  sleep 5  # 2.5 heartbeat timeouts
  if ! kill -0 "$n0" 2>/dev/null || has "$tmp/n0.err" 'lost node'; then
    flunk blocked-console "node 0 gave up on node 1 while node 1's console was blocked"
  else
    pass blocked-console
  fi
else
  flunk blocked-console "workers did not start"
fi
cat "$tmp/fifo" >/dev/null &
drain=$!
kill -TERM "$n0"
bounded_wait "$n0" 10; rc0=$rc
bounded_wait "$n1" 10; rc1=$rc
{ kill "$drain"; wait "$drain"; } 2>/dev/null
exec 7>&-
[[ $rc0 == 143 && $rc1 == 143 ]] || flunk blocked-console "after the drain: exits $rc0 and $rc1, wanted 143 and 143"
gone "$tag-blocked" 5 || flunk blocked-console "left: $(pgrep -af "$tag-blocked")"

# --- --max-restarts 1: rank 2 fails in attempt 0; both nodes run attempt 1 with the same
# TORCHELASTIC_RESTART_COUNT and a new MASTER_PORT, and succeed ---
port=$(free_port)
node 0 restart $(c10d restart) --max-restarts 1 --grace-period 5 -- fail-once
node 1 restart $(c10d restart) --max-restarts 1 --grace-period 5 -- fail-once
bounded_wait "$n0" 40; rc0=$rc
bounded_wait "$n1" 10; rc1=$rc
if [[ $rc0 != 0 || $rc1 != 0 ]]; then
  flunk restart-together "exits $rc0 and $rc1, wanted 0 and 0"
else
  p0=$(cat "$tmp"/restart/*.a0.env | sed -nE 's/.*MASTER_PORT=([0-9]+).*/\1/p' | sort -u)
  p1=$(cat "$tmp"/restart/*.a1.env | sed -nE 's/.*MASTER_PORT=([0-9]+).*/\1/p' | sort -u)
  counts=$(cat "$tmp"/restart/*.a1.env | sed -nE 's/.*TORCHELASTIC_RESTART_COUNT=([0-9]+).*/\1/p' | sort -u)
  if [[ $(ls "$tmp"/restart/*.a1.env | wc -l) != 4 ]]; then
    flunk restart-together "not all 4 ranks ran attempt 1"
  elif [[ $counts != 1 ]]; then
    flunk restart-together "TORCHELASTIC_RESTART_COUNT in attempt 1: $counts"
  elif [[ $(wc -l <<<"$p1") != 1 || $p1 == "$p0" ]]; then
    flunk restart-together "MASTER_PORT not one fresh port: attempt 0 $p0, attempt 1 $p1"
  elif ! has "$tmp/n0.err" 'rank 2 on node 1 .* failed with exit code 3; restarting the workers of all 2 nodes \(restart 1 of 1\)'; then
    flunk restart-together "node 0 does not say why it restarts"
  else
    pass restart-together
  fi
fi

# --- SIGTERM to node 1's launcher: it tells node 0; both stop and exit 143 ---
port=$(free_port)
node 0 sigterm $(c10d sigterm) --grace-period 5 -- sleep
node 1 sigterm $(c10d sigterm) --grace-period 5 -- sleep
if wait_files "$tmp/sigterm" a0.ready 4 20; then
  kill -TERM "$n1"
  bounded_wait "$n1" 10; rc1=$rc
  bounded_wait "$n0" 10; rc0=$rc
  [[ $rc0 == 143 && $rc1 == 143 ]] && has "$tmp/n0.err" "node 1 \($host\) got SIGTERM" && pass sigterm-both ||
    flunk sigterm-both "exits $rc0 and $rc1 (wanted 143 and 143, node 0 naming node 1's SIGTERM)"
else
  flunk sigterm-both "workers did not start"
fi
gone "$tag-sigterm" 5 && pass sigterm-no-orphans || flunk sigterm-no-orphans "$(pgrep -af "$tag-sigterm")"

# --- node 1's launcher cannot start its workers (exec format error there only): node 0
# stops too, and both exit 2 naming node 1's launcher ---
mkdir -p "$tmp/cwd0" "$tmp/cwd1"
printf '#!/bin/sh\nexec sleep 600\n' >"$tmp/cwd0/tool"
printf 'no #! line\n' >"$tmp/cwd1/tool"
chmod +x "$tmp/cwd0/tool" "$tmp/cwd1/tool"
port=$(free_port)
(cd "$tmp/cwd0" && exec "$bin" run $(c10d noexec) --grace-period 5 -- ./tool "$tag-noexec") >"$tmp/n0.out" 2>"$tmp/n0.err" &
n0=$!
t=0
until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || ((t++ >= 100)); do sleep 0.05; done
(cd "$tmp/cwd1" && exec "$bin" run $(c10d noexec) --grace-period 5 -- ./tool "$tag-noexec") >"$tmp/n1.out" 2>"$tmp/n1.err" &
n1=$!
bounded_wait "$n1" 15; rc1=$rc
bounded_wait "$n0" 15; rc0=$rc
[[ $rc0 == 2 && $rc1 == 2 ]] &&
  has "$tmp/n0.err" "launcher  : could not start its workers: cannot run './tool': Exec format error" &&
  has "$tmp/n0.err" "note: this node's workers were stopped because of node 1's launcher" && pass node-cannot-start ||
  flunk node-cannot-start "exits $rc0 and $rc1 (wanted 2 and 2, node 0 naming node 1's launcher)"
gone "$tag-noexec" 5 && pass node-cannot-start-no-orphans || flunk node-cannot-start-no-orphans "$(pgrep -af "$tag-noexec")"

# --- bad input: exit 2 within join_timeout, naming the endpoint and the values ---
port=$(free_port)
t=$(now)
timeout 20 "$bin" run --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "nonexistent.invalid:$port" \
  --rdzv-conf join_timeout=2 -- true >"$tmp/n0.out" 2>"$tmp/n0.err"
rc=$?
took=$(elapsed "$t" "$(now)")
[[ $rc == 2 ]] && has "$tmp/n0.err" "cannot reach the rendezvous at nonexistent.invalid:$port within join_timeout=2s" &&
  "$py" -c "import sys; sys.exit($took > 5)" && pass bad-endpoint ||
  flunk bad-endpoint "exit $rc after $took s"

"$py" -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True)
conns = []
end = time.time() + 30
while time.time() < end:
    c, _ = s.accept(); conns.append(c)' "$tag-silent-server" >"$tmp/silent-port" &
spid=$!
t=0
until [[ -s $tmp/silent-port ]] || ((t++ >= 100)); do sleep 0.1; done
sport=$(cat "$tmp/silent-port")
timeout 20 "$bin" run --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$sport" --rdzv-conf join_timeout=2 \
  -- true >"$tmp/n0.out" 2>"$tmp/n0.err"
rc=$?
[[ $rc == 2 ]] && has "$tmp/n0.err" "127.0.0.1:$sport never answered the join within join_timeout=2s: is it a trainbox run rendezvous" &&
  pass not-a-rendezvous || flunk not-a-rendezvous "exit $rc"
{ kill -KILL "$spid"; wait "$spid"; } 2>/dev/null

port=$(free_port)
timeout 20 "$bin" run --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id alone \
  --rdzv-conf join_timeout=2 -- true >"$tmp/n0.out" 2>"$tmp/n0.err"
rc=$?
# The launcher of a multi-node job names its host in its own fatal line, as its workers do.
[[ $rc == 2 ]] && has "$tmp/n0.err" "^trainbox: error \[$(hostname)\]: .*only 1 of 2 nodes joined job 'alone' at 127.0.0.1:$port within join_timeout=2s" &&
  pass node-missing || flunk node-missing "exit $rc: $(grep -m1 'error' "$tmp/n0.err")"

# A signal while waiting for the other node ends the wait at once: 128 + signal.
port=$(free_port)
node 0 waiting $(c10d waiting) -- print
sleep 0.5
t=$(now)
kill -TERM "$n0"
bounded_wait "$n0" 10
took=$(elapsed "$t" "$(now)")
[[ $rc == 143 ]] && has "$tmp/n0.err" 'got SIGTERM while waiting for the other nodes' &&
  "$py" -c "import sys; sys.exit($took > 2)" && pass signal-while-joining ||
  flunk signal-while-joining "exit $rc after $took s"

# A second job with the same id while the first runs, and one with another id: refused.
port=$(free_port)
node 0 first $(c10d same) --grace-period 5 -- sleep
node 1 first $(c10d same) --grace-period 5 -- sleep
if wait_files "$tmp/first" a0.ready 4 20; then
  timeout 20 "$bin" run $(c10d same) -- true >"$tmp/n2.out" 2>"$tmp/n2.err"
  rc=$?
  [[ $rc == 2 ]] && has "$tmp/n2.err" "job 'same' is already running with 2 nodes at 127.0.0.1:$port" &&
    pass same-id-refused || flunk same-id-refused "exit $rc: $(cat "$tmp/n2.err")"
  timeout 20 "$bin" run $(c10d other) -- true >"$tmp/n2.out" 2>"$tmp/n2.err"
  rc=$?
  [[ $rc == 2 ]] && has "$tmp/n2.err" "the rendezvous at 127.0.0.1:$port belongs to job 'same', not 'other'" &&
    pass other-id-refused || flunk other-id-refused "exit $rc: $(cat "$tmp/n2.err")"
  kill -TERM "$n0" "$n1"
  bounded_wait "$n0" 10
  bounded_wait "$n1" 10
  [[ $(pgrep -f "$tag-first" | wc -l) == 0 ]] || flunk same-id-refused "the running job was disturbed or left processes"
else
  flunk same-id-refused "the first job did not start"
fi

# Mismatched --nnodes: both launchers fail, naming both values.
port=$(free_port)
node 0 mismatch --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-conf join_timeout=10 -- print
node 1 mismatch --nnodes 3 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-conf join_timeout=10 -- print
bounded_wait "$n1" 15; rc1=$rc
bounded_wait "$n0" 15; rc0=$rc
msg='--nnodes differs between nodes: --nnodes 3 on [^ ]+, but --nnodes 2 on [^ ]+'
[[ $rc0 == 2 && $rc1 == 2 ]] && has "$tmp/n0.err" "$msg" && has "$tmp/n1.err" "$msg" && pass nnodes-mismatch ||
  flunk nnodes-mismatch "exits $rc0 and $rc1 (wanted 2 and 2, both naming --nnodes 3 and 2)"

# --- what the nodes' worker commands must share (docs/distributed.md, "What the nodes must agree on") ---
# pernode N NAME -- WORKER…: launcher N of a 2-node job of one rank a node.
pernode() {
  local i=$1 name=$2
  shift 3
  mkdir -p "$tmp/$name"
  TBX_DIR="$tmp/$name" timeout 60 "$bin" run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "$tag-$name" --rdzv-conf join_timeout=20 -- "$@" \
    >"$tmp/n$i.out" 2>"$tmp/n$i.err" &
  eval "n$i=\$!"
  if [[ $i == 0 ]]; then
    local t=0
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || ((t++ >= 100)); do sleep 0.05; done
  fi
}
# Per-node run dirs (runs/job-$HOSTNAME) run, and the difference is one line on each node. The
# worker is trainbox train itself where this build has it (--print-config: its config, no data).
worker=("$py" "$tmp/w.py" print "$tag-paths")
[[ ${TRAINBOX_WITH_TORCH:-ON} == ON ]] && worker=("$bin" train --print-config)
port=$(free_port)
pernode 0 paths -- "${worker[@]}" --run-dir "$tmp/runs/job-node0"
pernode 1 paths -- "${worker[@]}" --run-dir "$tmp/runs/job-node1"
bounded_wait "$n1" 30; rc1=$rc
bounded_wait "$n0" 30; rc0=$rc
note="the worker command differs between nodes only in what does not change the math: --run-dir [^ ]*job-node1 on [^ ]+, but --run-dir [^ ]*job-node0 on "
[[ $rc0 == 0 && $rc1 == 0 ]] && [[ $(grep -c 'does not change the math' "$tmp/n0.err") == 1 ]] &&
  [[ $(grep -c 'does not change the math' "$tmp/n1.err") == 1 ]] && has "$tmp/n0.err" "$note" &&
  has "$tmp/n1.err" "$note" && pass per-node-paths-run ||
  flunk per-node-paths-run "exits $rc0 and $rc1 (wanted 0 and 0, one note naming both --run-dir on each node)"
# A key that changes the math (a trainbox train worker's optim.lr, from --set or its config
# file): refused at the join, before any worker starts, with exit 2 and one line naming both.
port=$(free_port)
pernode 0 math -- "$bin" train --run-dir "$tmp/runs/math0"
pernode 1 math -- "$bin" train --run-dir "$tmp/runs/math1" --set optim.lr=0.01
bounded_wait "$n1" 30; rc1=$rc
bounded_wait "$n0" 30; rc0=$rc
msg="optim.lr differs between nodes: optim.lr = 0.01 on [^ ]+, but optim.lr = 0.001 on [^ ]+ \(which hosts"
# (the launchers of a multi-node job name their host in their fatal lines)
[[ $rc0 == 2 && $rc1 == 2 ]] && [[ $(grep -c 'error \[' "$tmp/n1.err") == 1 ]] && has "$tmp/n1.err" "error \[$(hostname)\]: $msg" &&
  has "$tmp/n0.err" "$msg" && [[ ! -e $tmp/runs/math0 && ! -e $tmp/runs/math1 ]] && pass math-key-refused ||
  flunk math-key-refused "exits $rc0 and $rc1 (wanted 2 and 2, one line on node 1 naming optim.lr on both)"
# A worker's fatal line names its host and rank when the job spans nodes (a multi-node log is read
# out of order): a bad option on both nodes' workers. The rank in each line must be the one the
# launcher's own console prefix gives that worker, and the two nodes must be ranks 0 and 1.
port=$(free_port)
pernode 0 fatal -- "$bin" doctor --no-such-option
pernode 1 fatal -- "$bin" doctor --no-such-option
bounded_wait "$n1" 30
bounded_wait "$n0" 30
host=$(hostname)
ranks=$(cat "$tmp/n0.err" "$tmp/n1.err" |
  sed -nE "s/^\[$host:rank ([0-9]+)\] trainbox: error \[$host rank ([0-9]+)\]: .*no-such-option.*/\1 \2/p" | sort)
# The first worker to fail stops the job, and the other node's worker may be killed before it
# prints: at least one node's line, each with its prefix's rank.
[[ $ranks == '0 0' || $ranks == '1 1' || $ranks == $'0 0\n1 1' ]] && ! grep -q '^\[[^]]*\] trainbox: error: ' "$tmp/n0.err" "$tmp/n1.err" &&
  pass fatal-line-names-host ||
  flunk fatal-line-names-host "wanted 'trainbox: error [$host rank R]:' lines, R as the prefix's; got: $(
    grep -h 'trainbox: error' "$tmp/n0.err" "$tmp/n1.err" | head -4)"

exit $fail
