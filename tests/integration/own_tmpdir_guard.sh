#!/usr/bin/env bash
# The guard of tests/integration/own_tmpdir.sh can fail: a command that leaves a launcher's
# kept folder in its TMPDIR fails (and the folder is gone), a clean one and a skip pass through,
# and a real launcher failure without --log-dir is caught. Needs TRAINBOX_BIN (set by ctest).
set -u
bin=${TRAINBOX_BIN:?}
guard="$(dirname "$0")/own_tmpdir.sh"
source "$(dirname "$0")/check_lib.sh"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
FLUNK_LOGS=$out
has() { grep -qE -- "$2" "$1"; }

"$guard" leak bash -c 'mkdir "$TMPDIR/trainbox-run-abc"; echo "$TMPDIR" >'"$out.dir" >"$out" 2>&1
rc=$?
leaked=$(cat "$out.dir")
rm -f "$out.dir"
[[ $rc == 1 ]] && has "$out" "FAIL leak left a launcher's kept folder in its TMPDIR: trainbox-run-abc" &&
  [[ ! -e $leaked ]] && pass leak-fails || flunk leak-fails "exit $rc: $(cat "$out")"

"$guard" clean bash -c 'mkdir "$TMPDIR/mine"; exit 0' >"$out" 2>&1
rc=$?
[[ $rc == 0 ]] && pass clean-passes || flunk clean-passes "exit $rc: $(cat "$out")"
"$guard" skip bash -c 'exit 77' >"$out" 2>&1
rc=$?
[[ $rc == 77 ]] && pass skip-passes-through || flunk skip-passes-through "exit $rc"

# A worker that writes an error file and fails: the launcher keeps its folder in TMPDIR (the
# command's own exit code, 3, stands: it already fails the test).
"$guard" real "$bin" run --nproc-per-node 1 -- bash -c 'echo "{}" >"$TORCHELASTIC_ERROR_FILE"; exit 3' >"$out" 2>&1
rc=$?
[[ $rc == 3 ]] && has "$out" "FAIL real left a launcher's kept folder in its TMPDIR: trainbox-run-" &&
  pass real-launcher-leak-named ||
  flunk real-launcher-leak-named "exit $rc: $(tail -n 3 "$out")"
exit $fail
