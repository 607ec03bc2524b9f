#!/usr/bin/env bash
# trainbox run as a user runs it, with small Python/shell workers (no torch needed): the
# worker environment (exact, and compared with real torchrun when the venv has it),
# "[rank N] " prefixes, the failure summary and exit codes, teardown (SIGTERM, then SIGKILL
# after --grace-period), signal forwarding, the watchdog after `kill -9` of the launcher,
# restarts, the port check, bad options, two "nodes" on one machine, and rank 0's --json
# result passed on through TRAINBOX_RESULT_FILE.
# Every wait is bounded. Needs TRAINBOX_BIN (set by ctest). TRAINBOX_PYTHON (the venv, with
# torch and torchrun) is needed for the comparison with torchrun and the error-file part: when
# it is set, a missing torchrun or torch fails; when it is not, those parts are skipped visibly
# (exit 77 after the rest passed).
set -uo pipefail
bin=${TRAINBOX_BIN:?}
py=$(command -v python3) || { echo "SKIP: python3 is needed for the workers"; exit 77; }
source "$(dirname "$0")/launcher_lib.sh"
launcher_test tbxlaunch
source "$(dirname "$0")/check_lib.sh"
skipped=()

# expect_rc NAME WANTED: checks $rc.
expect_rc() {
  [[ $rc == "$2" ]] && return 0
  flunk "$1" "exit $rc, wanted $2"
  return 1
}

# The worker: w.py MODE MARKER. Files in $TBX_DIR say what it saw ("<rank>.ready" …).
cat >"$tmp/w.py" <<'EOF'
import os, signal, subprocess, sys, time
mode, marker = sys.argv[1], sys.argv[2]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
d = os.environ["TBX_DIR"]

def mark(name):
    open(os.path.join(d, f"{rank}.{name}"), "w").close()

def wait_others(name, seconds=20):
    end = time.time() + seconds
    others = [r for r in range(world) if r != rank]
    while time.time() < end and not all(os.path.exists(os.path.join(d, f"{r}.{name}")) for r in others):
        time.sleep(0.02)

def grandchild():  # a process of the worker's own group, like a DataLoader worker
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", marker + "-grandchild"])

if mode == "exit3":  # rank 1 fails with 3; the others sleep
    if rank == 1:
        print("boom-rank1: something broke", file=sys.stderr, flush=True)
        sys.exit(3)
    time.sleep(600)
elif mode == "kill9":  # rank 1 SIGKILLs itself once everyone is up; the others sleep with a grandchild
    if rank == 1:
        wait_others("ready")
        os.kill(os.getpid(), signal.SIGKILL)
    grandchild(); mark("ready"); time.sleep(600)
elif mode == "ignore-term":  # rank 0 ignores SIGTERM; rank 1 then fails
    if rank == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN); mark("ready"); time.sleep(600)
    wait_others("ready")
    sys.exit(1)
elif mode == "note-signals":  # records SIGTERM/SIGUSR1/SIGUSR2, then ends as the signal asks
    def on_term(sig, frame):
        mark("term"); signal.signal(signal.SIGTERM, signal.SIG_DFL); os.kill(os.getpid(), signal.SIGTERM)
    def on_usr(sig, frame):
        mark("usr1" if sig == signal.SIGUSR1 else "usr2"); sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGUSR1, on_usr)
    signal.signal(signal.SIGUSR2, on_usr)
    grandchild(); mark("ready")
    while True:
        time.sleep(1)
elif mode == "term-exit7":  # rank 0 exits 7 when SIGTERMed; rank 1 then fails
    if rank == 0:
        signal.signal(signal.SIGTERM, lambda sig, frame: os._exit(7)); mark("ready"); time.sleep(600)
    wait_others("ready")
    sys.exit(3)
elif mode == "both-fail":  # on "go": rank 1 exits 3, rank 0 exits 4 just after (the test holds the launcher)
    open(os.path.join(d, f"{rank}.pid"), "w").write(str(os.getpid()))
    mark("ready")
    end = time.time() + 20
    while not os.path.exists(os.path.join(d, "go")) and time.time() < end:
        time.sleep(0.02)
    if rank == 0:
        time.sleep(0.1)
    sys.exit(3 if rank == 1 else 4)
elif mode.startswith("result"):  # every rank writes its own result; stdout lines only if "noisy"
    noisy, fail = "noisy" in mode, "fail" in mode
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    path = os.environ["TRAINBOX_RESULT_FILE"]
    open(os.path.join(d, f"{rank}.path"), "w").write(path)
    if noisy:
        print(f"noise-before {rank}", flush=True)
    if attempt == 0:
        import json
        with open(path, "w") as f:
            json.dump({"rank": rank, "world": world, "attempt": attempt}, f)
            f.write("\n")
    mark("written")
    if noisy:
        wait_others("written")
        time.sleep(0.2)  # the others' output arrives after rank 0 wrote its result
        print(f"noise-after {rank}", flush=True)
    if fail:  # rank 1 fails once rank 0's result exists; rank 0 is stopped by SIGTERM
        if rank == 1:
            wait_others("written")
            sys.exit(3)
        time.sleep(600)
elif mode == "output":  # stdout and stderr lines, a line written in two pieces, no final newline
    sys.stdout.write(f"out-a {rank}\nout-b {rank}\npar"); sys.stdout.flush()
    time.sleep(0.2)
    sys.stdout.write(f"tial {rank}\n"); sys.stdout.flush()
    sys.stderr.write(f"err-a {rank}\n"); sys.stderr.flush()
    sys.stdout.write(f"no-newline {rank}"); sys.stdout.flush()
EOF
run_w() {  # run_w SCENARIO [launcher options…] -- MODE: foreground, bounded by $limit seconds
  local name=$1; shift
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  local mode=$2
  mkdir -p "$tmp/$name"
  TBX_DIR="$tmp/$name" timeout "${limit:-30}" "$bin" run "${opts[@]}" -- "$py" "$tmp/w.py" "$mode" "$tag-$name" \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
}

# --- the environment: exactly torchrun's variables ---
port=$(free_port)
env -i PATH="$PATH" HOME="$HOME" timeout 30 "$bin" run --nproc-per-node 2 --master-port "$port" \
  --log-dir "$tmp/envlogs" --no-prefix --redirects 1 -- env >"$tmp/out" 2>"$tmp/err"
rc=$?
if expect_rc env-exact 0; then
  ok=1
  for r in 0 1; do
    sort "$tmp/envlogs/attempt_0/$r/stdout.log" >"$tmp/env.$r"
    sort >"$tmp/want.$r" <<EOF
HOME=$HOME
PATH=$PATH
LOCAL_RANK=$r
RANK=$r
GROUP_RANK=0
ROLE_RANK=$r
ROLE_NAME=default
LOCAL_WORLD_SIZE=2
WORLD_SIZE=2
GROUP_WORLD_SIZE=1
ROLE_WORLD_SIZE=2
MASTER_ADDR=127.0.0.1
MASTER_PORT=$port
TORCHELASTIC_RESTART_COUNT=0
TORCHELASTIC_MAX_RESTARTS=0
TORCHELASTIC_RUN_ID=none
TORCHELASTIC_USE_AGENT_STORE=False
TORCHELASTIC_ERROR_FILE=$tmp/envlogs/attempt_0/$r/error.json
TORCHELASTIC_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT
TORCH_NCCL_ASYNC_ERROR_HANDLING=1
TRAINBOX_RESULT_FILE=$tmp/envlogs/attempt_0/$r/result.json
TRAINBOX_HEARTBEAT_FILE=$tmp/envlogs/attempt_0/$r/heartbeat
TRAINBOX_LAUNCHER_SAYS_USAGE_ERRORS=1
TORCH_FR_BUFFER_SIZE=2000
TORCH_NCCL_DUMP_ON_TIMEOUT=1
TORCH_FR_DUMP_TEMP_FILE=$tmp/envlogs/attempt_0/nccl_trace_rank_
OMP_NUM_THREADS=1
EOF
    if ! diff "$tmp/want.$r" "$tmp/env.$r" >"$tmp/diff"; then
      ok=0
      flunk env-exact "rank $r's environment differs (< wanted, > got):"
      cat "$tmp/diff"
    fi
  done
  ((ok)) && pass env-exact
fi
has "$tmp/err" 'OMP_NUM_THREADS is not set' && pass omp-note || flunk omp-note "no OMP_NUM_THREADS note"

# The same against real torchrun: the same variable names, the same values except the store
# (torchrun's agent hosts it; ours cannot without torch) and the error file's folder, plus
# ours: TRAINBOX_RESULT_FILE and TRAINBOX_HEARTBEAT_FILE (torchrun has no result or heartbeat
# contract), TRAINBOX_LAUNCHER_SAYS_USAGE_ERRORS (util/worker_error.h) and the NCCL flight
# recorder's settings (off by default under torchrun).
torchrun=${TRAINBOX_PYTHON:+$(dirname "$TRAINBOX_PYTHON")/torchrun}
if [[ -z $torchrun ]]; then
  skipped+=("env-vs-torchrun: no TRAINBOX_PYTHON (configure with -DTRAINBOX_PYTHON=…/.venv/bin/python)")
elif [[ ! -x $torchrun ]]; then
  flunk env-vs-torchrun "no torchrun next to $TRAINBOX_PYTHON (the venv's torch installs it: run scripts/bootstrap)"
else
  env -i PATH="$PATH" HOME="$HOME" timeout 120 "$torchrun" --nproc-per-node 2 --master-port "$port" \
    --log-dir "$tmp/trlogs" --redirects 1 --no-python env >/dev/null 2>"$tmp/err"
  rc=$?
  if expect_rc env-vs-torchrun 0; then
    ok=1
    for r in 0 1; do
      # Python adds LC_CTYPE (PEP 538 locale coercion) to torchrun's own environment.
      find "$tmp/trlogs" -path "*/attempt_0/$r/stdout.log" -exec cat {} + | grep -v '^LC_CTYPE=' |
        sed -E 's|^(TORCHELASTIC_ERROR_FILE=).*(/attempt_0/[0-9]+/error.json)$|\1…\2|; s|^TORCHELASTIC_USE_AGENT_STORE=.*|TORCHELASTIC_USE_AGENT_STORE=…|' |
        sort >"$tmp/tr.$r"
      grep -vE '^(TRAINBOX_RESULT_FILE|TRAINBOX_HEARTBEAT_FILE|TRAINBOX_LAUNCHER_SAYS_USAGE_ERRORS|TORCH_FR_BUFFER_SIZE|TORCH_NCCL_DUMP_ON_TIMEOUT|TORCH_FR_DUMP_TEMP_FILE)=' "$tmp/env.$r" |
        sed -E 's|^(TORCHELASTIC_ERROR_FILE=).*(/attempt_0/[0-9]+/error.json)$|\1…\2|; s|^TORCHELASTIC_USE_AGENT_STORE=.*|TORCHELASTIC_USE_AGENT_STORE=…|' |
        sort >"$tmp/ours.$r"
      if ! diff "$tmp/tr.$r" "$tmp/ours.$r" >"$tmp/diff"; then
        ok=0
        flunk env-vs-torchrun "rank $r differs from torchrun (< torchrun, > trainbox run):"
        cat "$tmp/diff"
      fi
    done
    ((ok)) && pass env-vs-torchrun
  fi
fi

# --- output: every line prefixed, whole lines, stderr to stderr ---
run_w output --standalone --nproc-per-node 2 -- output
if expect_rc prefix 0; then
  if grep -vqE '^\[rank [01]\] ' "$tmp/out"; then
    flunk prefix "an unprefixed stdout line"
  elif ! has "$tmp/out" '^\[rank 1\] partial 1$' || ! has "$tmp/out" '^\[rank 0\] no-newline 0$' ||
    [[ $(wc -l <"$tmp/out") != 8 ]]; then
    flunk prefix "a line split, lost or merged"
  elif ! has "$tmp/err" '^\[rank 0\] err-a 0$' || has "$tmp/out" 'err-a'; then
    flunk prefix "stderr lines not on stderr with a prefix"
  elif grep -v '^trainbox run:' "$tmp/err" | grep -vqE '^\[rank [01]\] '; then
    flunk prefix "an unprefixed stderr line"
  else
    pass prefix
  fi
fi
run_w output --standalone --nproc-per-node 2 --no-prefix -- output
expect_rc no-prefix 0 && { has "$tmp/out" '^partial 0$' && ! has "$tmp/out" '^\[rank' && pass no-prefix ||
  flunk no-prefix "prefix still there"; }
run_w output --standalone --nproc-per-node 2 --local-ranks-filter 1 --log-dir "$tmp/logs-filter" -- output
if expect_rc local-ranks-filter 0; then
  if has "$tmp/out" '^\[rank 0\]' || ! has "$tmp/out" '^\[rank 1\] out-a 1$'; then
    flunk local-ranks-filter "rank 0 shown or rank 1 missing"
  elif [[ $(cat "$tmp/logs-filter/attempt_0/0/stdout.log") != $'out-a 0\nout-b 0\npartial 0\nno-newline 0' ]]; then
    flunk local-ranks-filter "rank 0's stdout.log is not its raw output"
  else
    pass local-ranks-filter
  fi
fi
run_w output --standalone --nproc-per-node 2 --redirects 1 --tee 2 --log-dir "$tmp/logs-red" -- output
if expect_rc redirects-tee 0; then
  if [[ -s $tmp/out ]]; then flunk redirects-tee "stdout reached the console despite --redirects 1"
  elif ! has "$tmp/logs-red/attempt_0/1/stdout.log" '^partial 1$'; then flunk redirects-tee "stdout.log lacks the output"
  elif ! has "$tmp/err" '^\[rank 1\] err-a 1$' || ! has "$tmp/logs-red/attempt_0/1/stderr.log" '^err-a 1$'; then
    flunk redirects-tee "--tee 2 did not send stderr to both"
  else pass redirects-tee; fi
fi

# --- a worker exits 3: the launcher exits 3 and names it ---
limit=20 run_w exit3 --standalone --nproc-per-node 2 --grace-period 5 -- exit3
if expect_rc exit-code 3; then
  if ! has "$tmp/err" 'Root Cause' || ! has "$tmp/err" 'rank +: 1 \(local_rank: 1\)' ||
    ! has "$tmp/err" 'exitcode +: 3 ' || ! has "$tmp/err" '\| boom-rank1: something broke'; then
    flunk exit-code "the summary lacks the rank, the exit code or the stderr tail"
  elif ! has "$tmp/err" '^  rank 0 \(local_rank: 0, pid [0-9]+\): stopped by trainbox run \(SIGTERM\)$'; then
    flunk exit-code "the summary does not say the sleeping rank 0 was stopped by SIGTERM"
  else
    pass exit-code
  fi
fi
gone "$tag-exit3" 5 && pass exit-code-no-orphans || flunk exit-code-no-orphans "$(pgrep -af "$tag-exit3")"

# --- kill -9 of one of 3 workers: 137, others and their children gone within grace + 5 s ---
limit=7 run_w kill9 --standalone --nproc-per-node 3 --grace-period 2 -- kill9
if expect_rc kill9-worker 137; then
  has "$tmp/err" 'exitcode +: signal SIGKILL \(9\)' && has "$tmp/err" 'rank +: 1 ' && pass kill9-worker ||
    flunk kill9-worker "the summary does not name rank 1 and SIGKILL"
fi
gone "$tag-kill9" 3 && pass kill9-no-orphans || flunk kill9-no-orphans "left: $(pgrep -af "$tag-kill9")"

# --- a worker ignoring SIGTERM is SIGKILLed after the grace period ---
limit=15 run_w ignore-term --standalone --nproc-per-node 2 --grace-period 2 -- ignore-term
if expect_rc ignore-term 1; then
  has "$tmp/err" 'still running 2 s after SIGTERM; sending SIGKILL to rank 0' &&
    has "$tmp/err" 'rank 0 .*: stopped by trainbox run \(SIGKILL after SIGTERM\)$' && pass ignore-term ||
    flunk ignore-term "no SIGKILL after the grace period"
fi
gone "$tag-ignore-term" 3 && pass ignore-term-no-orphans || flunk ignore-term-no-orphans "$(pgrep -af "$tag-ignore-term")"

# --- a worker that handles SIGTERM by exiting: neither "on its own" nor "stopped" ---
limit=20 run_w term-exit7 --standalone --nproc-per-node 2 --grace-period 5 -- term-exit7
if expect_rc term-exit 3; then
  has "$tmp/err" "^  rank 0 .*: exited with code 7 after trainbox run's SIGTERM$" && pass term-exit ||
    flunk term-exit "rank 0's line does not say it exited with 7 after the SIGTERM"
fi

# --- two ranks fail on their own before teardown: neither is "stopped by trainbox run" ---
# The launcher is held with SIGSTOP while both exit, so both have ended (zombies, not yet
# reaped) before it can signal anyone: the case where a zombie used to be labelled stopped.
mkdir -p "$tmp/both-fail"
TBX_DIR="$tmp/both-fail" "$bin" run --standalone --nproc-per-node 2 --grace-period 5 -- \
  "$py" "$tmp/w.py" both-fail "$tag-both-fail" >"$tmp/out" 2>"$tmp/err" &
lpid=$!
if wait_files "$tmp/both-fail" ready 2 20; then
  kill -STOP "$lpid"
  touch "$tmp/both-fail/go"
  for r in 0 1; do  # until both are zombies: exited, and not reaped by the stopped launcher
    t=0
    until [[ $(ps -o stat= -p "$(cat "$tmp/both-fail/$r.pid")") == Z* ]] || ((t++ >= 200)); do sleep 0.1; done
  done
  kill -CONT "$lpid"
  bounded_wait "$lpid" 15
  # Either may be the root cause: both had ended when the launcher looked.
  if [[ $rc != 3 && $rc != 4 ]]; then
    flunk both-fail "exit $rc, wanted 3 or 4"
  elif has "$tmp/err" 'stopped by trainbox run'; then
    flunk both-fail "a rank that failed on its own is labelled stopped"
  elif ! has "$tmp/err" "^  rank $((rc == 3 ? 0 : 1)) .*: exited on its own \(exit code $((rc == 3 ? 4 : 3))\)$"; then
    flunk both-fail "the other rank is not labelled as having exited on its own"
  else
    pass both-fail
  fi
else
  flunk both-fail "workers did not start"
  kill -KILL "$lpid"
fi
gone "$tag-both-fail" 3 && pass both-fail-no-orphans || flunk both-fail-no-orphans "$(pgrep -af "$tag-both-fail")"

# --- SIGTERM to the launcher: forwarded, everyone gone, exit 143 ---
mkdir -p "$tmp/sigterm"
TBX_DIR="$tmp/sigterm" "$bin" run --standalone --nproc-per-node 2 --grace-period 5 -- \
  "$py" "$tmp/w.py" note-signals "$tag-sigterm" >"$tmp/out" 2>"$tmp/err" &
lpid=$!
if wait_files "$tmp/sigterm" ready 2 20; then
  kill -TERM "$lpid"
  bounded_wait "$lpid" 15
  if expect_rc sigterm-forwarded 143; then
    [[ -e $tmp/sigterm/0.term && -e $tmp/sigterm/1.term ]] && pass sigterm-forwarded ||
      flunk sigterm-forwarded "a worker never saw SIGTERM"
  fi
else
  flunk sigterm-forwarded "workers did not start"
  kill -KILL "$lpid"
fi
gone "$tag-sigterm" 3 && pass sigterm-no-orphans || flunk sigterm-no-orphans "$(pgrep -af "$tag-sigterm")"

# --- SIGUSR2 to the launcher reaches every worker (checkpoint-on-preemption handlers); SIGUSR1
# is the launcher's own: every worker's stacks, the job untouched ---
mkdir -p "$tmp/usr2"
TBX_DIR="$tmp/usr2" "$bin" run --standalone --nproc-per-node 2 -- \
  "$py" "$tmp/w.py" note-signals "$tag-usr2" >"$tmp/out" 2>"$tmp/err" &
lpid=$!
if wait_files "$tmp/usr2" ready 2 20; then
  kill -USR1 "$lpid"
  for _ in $(seq 100); do grep -q 'stacks: ' "$tmp/err" && break; sleep 0.1; done
  has "$tmp/err" '^  rank 1 \(pid [0-9]+, no heartbeat\): ' && pass sigusr1-stacks || flunk sigusr1-stacks "no stack line per rank"
  ! ls "$tmp/usr2"/*.usr1 >/dev/null 2>&1 && pass sigusr1-not-forwarded ||
    flunk sigusr1-not-forwarded "a worker got SIGUSR1"
  kill -USR2 "$lpid"
  bounded_wait "$lpid" 15
  expect_rc sigusr2-forwarded 0 && { wait_files "$tmp/usr2" usr2 2 0 && pass sigusr2-forwarded ||
    flunk sigusr2-forwarded "a worker never saw SIGUSR2"; }
else
  flunk sigusr2-forwarded "workers did not start"
  kill -KILL "$lpid"
fi
gone "$tag-usr2" 3 && pass sigusr2-no-orphans || flunk sigusr2-no-orphans "$(pgrep -af "$tag-usr2")"

# --- kill -9 of the launcher: the watchdog kills workers and their children ---
mkdir -p "$tmp/watchdog"
rm -rf "$tmp"/trainbox-run-*  # folders kept by the checks above (they hold stacks: docs/distributed.md)
TBX_DIR="$tmp/watchdog" "$bin" run --standalone --nproc-per-node 2 -- \
  "$py" "$tmp/w.py" note-signals "$tag-watchdog" >"$tmp/out" 2>"$tmp/err" &
lpid=$!
if wait_files "$tmp/watchdog" ready 2 20; then
  pgrep -f "$tag-watchdog-grandchild" >/dev/null || flunk watchdog "no grandchild to orphan"
  { kill -KILL "$lpid"; bounded_wait "$lpid" 5; } 2>/dev/null  # no "Killed" job notice
  gone "$tag-watchdog" 5 && pass watchdog || flunk watchdog "left after kill -9 of the launcher: $(pgrep -af "$tag-watchdog")"
  # …and removes the launcher's error-file folder, which a SIGKILLed launcher cannot.
  t=0
  while compgen -G "$tmp/trainbox-run-*" >/dev/null && ((t++ < 30)); do sleep 0.1; done
  compgen -G "$tmp/trainbox-run-*" >/dev/null && flunk watchdog-temp-dir "left: $(echo "$tmp"/trainbox-run-*)" ||
    pass watchdog-temp-dir
else
  flunk watchdog "workers did not start"
  kill -KILL "$lpid"
fi

# --- restarts ---
limit=30 timeout 30 "$bin" run --standalone --nproc-per-node 2 --max-restarts 1 --log-dir "$tmp/restart" -- \
  sh -c 'test "$TORCHELASTIC_RESTART_COUNT" = 1 || exit 5' >"$tmp/out" 2>"$tmp/err"
rc=$?
if expect_rc max-restarts 0; then
  has "$tmp/err" 'failed with exit code 5; restarting all 2 workers \(restart 1 of 1\)' && [[ -d $tmp/restart/attempt_1/1 ]] &&
    pass max-restarts || flunk max-restarts "no restart note or attempt_1 folder"
fi
timeout 30 "$bin" run --standalone --nproc-per-node 2 --max-restarts 1 -- sh -c 'exit 5' >"$tmp/out" 2>"$tmp/err"
rc=$?
expect_rc max-restarts-exhausted 5 && { has "$tmp/err" 'restarts +: 1 used' && pass max-restarts-exhausted ||
  flunk max-restarts-exhausted "the summary does not count the restart"; }

# --- a busy master port: exit 2 naming address, port, holder and the way out ---
"$py" -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(60)' "$tag-holder" >"$tmp/holder" &
holder=$!
t=0
until [[ -s $tmp/holder ]] || ((t++ >= 100)); do sleep 0.1; done
busy=$(cat "$tmp/holder")
timeout 10 "$bin" run --master-port "$busy" -- true >"$tmp/out" 2>"$tmp/err"
rc=$?
if expect_rc busy-port 2; then
  has "$tmp/err" "port $busy on 127.0.0.1 is in use, held by pid $holder \(python" && has "$tmp/err" 'fix: .*--standalone' &&
    [[ $(wc -l <"$tmp/err") == 2 ]] && pass busy-port || flunk busy-port "the message lacks address, port, holder or hint"
fi
kill "$holder"
wait "$holder" 2>/dev/null
timeout 10 "$bin" run --master-port "$busy" -- true >"$tmp/out" 2>"$tmp/err"
rc=$?
expect_rc port-released 0 && pass port-released

# --- bad options: exit 2, one line and a fix ---
expect() {  # expect NAME WANTED_RC PATTERN -- command…
  local name=$1 want=$2 pattern=$3
  shift 4
  timeout 10 "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  expect_rc "$name" "$want" || return
  [[ -z $pattern ]] || has "$tmp/err" "$pattern" && pass "$name" || flunk "$name" "stderr lacks /$pattern/"
}
expect nproc-zero 2 'error: --nproc-per-node 0: must be a whole number from 1 to 65536' -- "$bin" run --nproc-per-node 0 -- true
expect unknown-option 2 'unknown option --bogus' -- "$bin" run --bogus -- true
expect no-command 2 'no command to run' -- "$bin" run --nproc-per-node 2
expect node-rank-range 2 '--node-rank 2: node ranks go from 0 to nnodes-1' -- "$bin" run --nnodes 2 --node-rank 2 -- true
expect bad-port 2 '--master-port 70000: must be a whole number from 1 to 65535' -- "$bin" run --master-port 70000 -- true
expect not-on-path 2 "cannot run '$tag-nope': not found on PATH" -- "$bin" run --standalone -- "$tag-nope"
printf 'no #! line\n' >"$tmp/not-a-program"
chmod +x "$tmp/not-a-program"
expect exec-format 2 "cannot run '$tmp/not-a-program': Exec format error" -- "$bin" run --standalone --nproc-per-node 3 -- "$tmp/not-a-program"
expect pet-fallback 0 '' -- env PET_NPROC_PER_NODE=3 "$bin" run --standalone -- sh -c '[ "$WORLD_SIZE" = 3 ]'
expect role 0 '' -- "$bin" run --standalone --role trainer -- sh -c '[ "$ROLE_NAME" = trainer ]'
expect without-dashes 0 '' -- "$bin" run --standalone --nproc-per-node 2 sh -c '[ "$LOCAL_WORLD_SIZE" = 2 ] && [ "$1" = -y ]' x -y
expect help 0 '' -- "$bin" run --help

# --- torchrun's habits: a .py runs through Python, -m runs a module, --no-python runs as given ---
printf 'import os, sys\nprint("py", os.environ["RANK"], sys.executable == sys.argv[1], *sys.argv[2:])\n' >"$tmp/script.py"
mkdir -p "$tmp/mods/tbxpkg"
touch "$tmp/mods/tbxpkg/__init__.py"
printf 'import os, sys\nprint("mod", os.environ["RANK"], *sys.argv[1:])\n' >"$tmp/mods/tbxpkg/hello.py"
real_py=$("$py" -c 'import sys; print(sys.executable)')
# (TRAINBOX_PYTHON, which ctest sets, would take precedence over PATH's python3)
env -u TRAINBOX_PYTHON timeout 20 "$bin" run --standalone -n 2 --no-prefix "$tmp/script.py" "$real_py" --lr 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
expect_rc py-script 0 && { [[ $(sort "$tmp/out") == $'py 0 True --lr 1\npy 1 True --lr 1' ]] && pass py-script ||
  flunk py-script "not run through python3 from PATH with its arguments"; }
# $TRAINBOX_PYTHON wins over PATH: a wrapper that says it was used.
printf '#!/bin/sh\necho via-trainbox-python\nexec %s "$@"\n' "$py" >"$tmp/mypython"
chmod +x "$tmp/mypython"
TRAINBOX_PYTHON=$tmp/mypython timeout 20 "$bin" run --standalone --no-prefix "$tmp/script.py" x >"$tmp/out" 2>"$tmp/err"
rc=$?
expect_rc py-trainbox-python 0 && { has "$tmp/out" '^via-trainbox-python$' && pass py-trainbox-python ||
  flunk py-trainbox-python "TRAINBOX_PYTHON was not used"; }
(cd "$tmp/mods" && timeout 20 "$bin" run --standalone -n 2 --no-prefix -m tbxpkg.hello --flag v) >"$tmp/out" 2>"$tmp/err"
rc=$?
expect_rc py-module 0 && { [[ $(sort "$tmp/out") == $'mod 0 --flag v\nmod 1 --flag v' ]] && pass py-module ||
  flunk py-module "-m did not run the module"; }
expect no-python 2 "cannot run '$tmp/script.py': Permission denied" -- "$bin" run --standalone --no-python "$tmp/script.py"
expect module-and-no-python 2 '-m and --no-python cannot be used together' -- "$bin" run -m --no-python x
expect no-python-anywhere 2 'no Python to run the script' -- env PATH=/nonexistent TRAINBOX_PYTHON= "$bin" run "$tmp/script.py"

# --- rendezvous options: torchrun's names, clear errors for what is not supported ---
expect rdzv-etcd 2 '--rdzv-backend etcd: not supported by trainbox run' -- "$bin" run --rdzv-backend etcd -- true
expect rdzv-no-endpoint 2 '--rdzv-backend c10d needs --rdzv-endpoint' -- "$bin" run --rdzv-backend c10d -- true
expect rdzv-conf-unknown 2 "unknown key 'shutdown_timeout'.*|accepted keys .*join_timeout, read_timeout" -- \
  "$bin" run --rdzv-backend c10d --rdzv-endpoint h --rdzv-conf shutdown_timeout=5 -- true
has "$tmp/err" 'accepted keys: join_timeout, read_timeout, heartbeat_interval, heartbeat_timeout, last_call, last_call_timeout, admit_backoff \(seconds\) and is_host' ||
  flunk rdzv-conf-unknown-hint "the accepted keys are not named"
expect nnodes-elastic 2 'an elastic node range needs --rdzv-backend c10d' -- "$bin" run --nnodes 1:2 -- true
expect monitor-interval 0 '' -- "$bin" run --standalone --monitor-interval 0.5 -- true
expect pet-rdzv-backend 2 'PET_RDZV_BACKEND=etcd: not supported' -- env PET_RDZV_BACKEND=etcd "$bin" run -- true

# --- two nodes on one machine: ranks 0..3 of a world of 4 ---
port=$(free_port)
node() {
  timeout 20 "$bin" run --nnodes 2 --node-rank "$1" --nproc-per-node 2 --master-port "$port" --no-prefix -- \
    sh -c 'echo "rank=$RANK world=$WORLD_SIZE group=$GROUP_RANK local=$LOCAL_RANK port=$MASTER_PORT"' >"$tmp/node$1" 2>/dev/null
}
node 0 &
n0=$!
node 1 &
n1=$!
wait "$n0"; rc0=$?
wait "$n1"; rc1=$?
sort "$tmp/node0" "$tmp/node1" >"$tmp/ranks"
if [[ $rc0 != 0 || $rc1 != 0 ]]; then
  flunk two-nodes "exits $rc0 and $rc1"
elif ! diff <(printf 'rank=%s world=4 group=%s local=%s port=%s\n' 0 0 0 "$port" 1 0 1 "$port" 2 1 0 "$port" 3 1 1 "$port") \
  "$tmp/ranks" >/dev/null; then
  flunk two-nodes "ranks: $(cat "$tmp/ranks")"
else
  pass two-nodes
fi

# --- rank 0's --json result (TRAINBOX_RESULT_FILE): the launcher's stdout parses as rank 0's ---
limit=20 run_w result --standalone --nproc-per-node 2 --log-dir "$tmp/logs-result" -- result
if expect_rc result-json 0; then
  if ! "$py" -c 'import json, sys; r = json.load(sys.stdin); sys.exit(r != {"rank": 0, "world": 2, "attempt": 0})' \
    <"$tmp/out"; then
    flunk result-json "stdout is not rank 0's result"
  elif [[ $(cat "$tmp/result/1.path") != "$tmp/logs-result/attempt_0/1/result.json" ]]; then
    flunk result-json "rank 1's TRAINBOX_RESULT_FILE is $(cat "$tmp/result/1.path")"
  else
    pass result-json
  fi
fi
# After all worker output, unprefixed, however late the others print.
limit=20 run_w result-noisy --standalone --nproc-per-node 2 -- result-noisy
if expect_rc result-after-output 0; then
  if [[ $(tail -n 1 "$tmp/out") != '{"rank": 0, "world": 2, "attempt": 0}' ]]; then
    flunk result-after-output "the last stdout line is not rank 0's result"
  elif [[ $(head -n -1 "$tmp/out" | grep -c '^\[rank [01]\] noise-') != 4 ]]; then
    flunk result-after-output "worker lines missing or after the result"
  else
    pass result-after-output
  fi
fi
# A TRAINBOX_RESULT_FILE the user exported: workers still get their own; the launcher writes
# rank 0's result there instead of to stdout (so launchers nest).
TRAINBOX_RESULT_FILE=$tmp/user-result.json limit=20 run_w result-user --standalone --nproc-per-node 2 -- result
if expect_rc result-user-file 0; then
  if [[ -s $tmp/out ]]; then
    flunk result-user-file "stdout is not empty"
  elif [[ $(cat "$tmp/user-result.json" 2>/dev/null) != '{"rank": 0, "world": 2, "attempt": 0}' ]]; then
    flunk result-user-file "the user's file is not rank 0's result"
  elif [[ $(cat "$tmp/result-user/0.path") == "$tmp/user-result.json" ]]; then
    flunk result-user-file "rank 0 got the user's path, not its own"
  else
    pass result-user-file
  fi
fi
# A failed job still passes on what rank 0 wrote …
limit=20 run_w result-fail --standalone --nproc-per-node 2 --grace-period 5 -- result-fail
if expect_rc result-on-failure 3; then
  [[ $(tail -n 1 "$tmp/out") == '{"rank": 0, "world": 2, "attempt": 0}' ]] && pass result-on-failure ||
    flunk result-on-failure "stdout does not end with rank 0's result"
fi
# … but only the last attempt's: attempt 1 writes none, so there is none.
limit=20 run_w result-restart --standalone --nproc-per-node 2 --grace-period 5 --max-restarts 1 -- result-fail
if expect_rc result-last-attempt 3; then
  has "$tmp/out" '"rank"' && flunk result-last-attempt "attempt 0's result was passed on" || pass result-last-attempt
fi
# A stale result in a reused --log-dir is not this run's.
limit=20 run_w output --standalone --nproc-per-node 2 --log-dir "$tmp/logs-result" -- output
if expect_rc result-stale 0; then
  has "$tmp/out" '"rank"' && flunk result-stale "the previous run's result was passed on" || pass result-stale
fi

# --- a Python worker's error file (torch.distributed.elastic's @record) reaches the summary ---
if [[ -z ${TRAINBOX_PYTHON:-} ]]; then
  skipped+=("error-file: no TRAINBOX_PYTHON (configure with -DTRAINBOX_PYTHON=…/.venv/bin/python)")
elif ! why=$("$TRAINBOX_PYTHON" -c 'import torch.distributed.elastic' 2>&1); then
  flunk error-file "$TRAINBOX_PYTHON cannot import torch.distributed.elastic (run scripts/bootstrap): $(tail -n 1 <<<"$why")"
else
  cat >"$tmp/record.py" <<'EOF'
from torch.distributed.elastic.multiprocessing.errors import record
@record
def main():
    raise ValueError("boom-42 from a recorded worker")
main()
EOF
  timeout 120 "$bin" run --standalone --nproc-per-node 1 -- "$TRAINBOX_PYTHON" "$tmp/record.py" "$tag-record" \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  expect_rc error-file 1 && { has "$tmp/err" 'message +: ValueError: boom-42 from a recorded worker' &&
    has "$tmp/err" 'error_file: /.*/attempt_0/0/error.json' && pass error-file ||
    flunk error-file "the summary lacks the error file's message"; }
fi

((fail)) && exit 1
if ((${#skipped[@]})); then printf 'SKIPPED: %s\n' "${skipped[@]}"; exit 77; fi
exit 0
