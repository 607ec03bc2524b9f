#!/usr/bin/env bash
# trainbox entrypoint: prints its check, then execs the command — the command's exit code
# is the container's, whatever the check found, and a broken check never blocks start-up.
set -uo pipefail
bin=${TRAINBOX_BIN:?}; fixtures=${TRAINBOX_SOURCE_DIR:?}/tests/fixtures
fail=0
run() {  # run NAME WANTED_RC PATTERN -- command…
  local name=$1 want=$2 pattern=$3; shift 4
  local out; out=$("$@" 2>&1); local rc=$?
  if [[ $rc == "$want" ]] && grep -qE -- "$pattern" <<<"$out"; then echo "ok   $name"; else echo "FAIL $name (exit $rc)"; echo "$out"; fail=1; fi
}
run "command's exit code passes through" 7 '== trainbox' -- "$bin" entrypoint -- sh -c 'exit 7'
run "the image's self-description is in the banner" 0 '^image: trainbox on base:1 \(built on devel:1\)' -- \
  env TRAINBOX_IMAGE="trainbox on base:1 (built on devel:1)" "$bin" entrypoint -- true
run "errors in the check do not block (64 MiB shm, CVD empty)" 0 'shm-too-small' -- \
  "$bin" entrypoint --from "$fixtures/container-shm64-cvd-empty.json" -- true
run "a broken report is skipped, the command still runs" 0 'check skipped' -- \
  "$bin" entrypoint --from /dev/null -- true
# A check that hangs (here: a report path that is a FIFO nobody writes, as a probe stuck in
# cuInit would) is abandoned at the deadline and the command still runs.
fifo=$(mktemp -u); mkfifo "$fifo"
t0=$(date +%s%N)
run "a hung check is abandoned after --timeout, the command runs" 3 'took more than 1 s' -- \
  "$bin" entrypoint --from "$fifo" --timeout 1 -- sh -c 'exit 3'
ms=$((($(date +%s%N) - t0) / 1000000)); rm -f "$fifo"
if ((ms < 10000)); then echo "ok   ...within the deadline ($ms ms)"; else echo "FAIL hung check took $ms ms"; fail=1; fi
run "TRAINBOX_ENTRYPOINT_QUIET=1 skips the check" 0 '^quiet$' -- env TRAINBOX_ENTRYPOINT_QUIET=1 "$bin" entrypoint -- echo quiet
run "a bad TRAINBOX_ENTRYPOINT_TIMEOUT is named, and start-up goes on" 0 "ignoring timeout 'soon'.*using 30" -- \
  env TRAINBOX_ENTRYPOINT_TIMEOUT=soon "$bin" entrypoint -- true
# exec, not fork: the command runs as the entrypoint's own process (signals reach it directly).
out=$(mktemp); "$bin" entrypoint --quiet -- sh -c 'echo $$' >"$out" & pid=$!; wait $pid
if [[ $(cat "$out") == "$pid" ]]; then echo "ok   exec replaces the entrypoint (same pid $pid)"; else echo "FAIL exec: pid $pid, command saw $(cat "$out")"; fail=1; fi
rm -f "$out"
run "shorthand: a trainbox command that is no program on PATH runs through trainbox" 0 'LibTorch|Host' -- \
  env PATH=/usr/bin:/bin "$bin" entrypoint --quiet -- doctor
run "missing command: 127" 127 'cannot run' -- "$bin" entrypoint -- /nonexistent/cmd
run "no command: usage error" 2 'needs a command' -- "$bin" entrypoint
exit $fail
