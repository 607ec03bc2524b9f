#!/usr/bin/env bash
# What a first try found, in trainbox run and the container entrypoint (no torch needed):
#   - a launcher started with SIGINT ignored (a script's `cmd &`) still stops its workers with
#     a forwarded SIGINT: workers get default dispositions and an empty mask before exec;
#   - every path a failure summary or a stack dump prints exists after the launcher exits
#     (the temporary log folder is kept when it holds evidence, and removed when it does not);
#   - `trainbox run -- x.py` runs a script that imports torch with the Python trainbox was
#     built against, and says so;
#   - `trainbox entrypoint -- sample|preflight …` runs them through trainbox.
# Every wait is bounded. Needs TRAINBOX_BIN (set by ctest).
set -uo pipefail
bin=${TRAINBOX_BIN:?}
py=$(command -v python3) || { echo "SKIP: python3 is needed for the workers"; exit 77; }
source "$(dirname "$0")/launcher_lib.sh"
launcher_test tbxfirst
source "$(dirname "$0")/check_lib.sh"
FLUNK_LOGS=$tmp/err

cat >"$tmp/w.py" <<'PY'
import json, os, sys, time
mode, marker, d = sys.argv[1], sys.argv[2], sys.argv[3]
rank = int(os.environ["RANK"])
def mark(name): open(os.path.join(d, f"{rank}.{name}"), "w").close()
if mode == "sleep":  # until SIGINT: Python's KeyboardInterrupt when SIGINT has its default action
    mark("ready")
    try:
        time.sleep(120)
    except KeyboardInterrupt:
        mark("sigint")
        sys.exit(130)
elif mode == "error-file":  # rank 1 fails and says why in torchelastic's error file
    if rank == 1:
        with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
            json.dump({"message": {"message": "ValueError: bad batch", "extraInfo": {"py_callstack": "", "timestamp": "0"}}}, f)
        sys.exit(3)
    time.sleep(60)
elif mode == "wait-go":  # until $d/go exists, then success
    mark("ready")
    end = time.time() + 60
    while not os.path.exists(os.path.join(d, "go")) and time.time() < end:
        time.sleep(0.05)
PY

# every_printed_path_exists NAME: each `error_file: P`, `stacks: P` and `kept P` of $tmp/err exists.
every_printed_path_exists() {
  local p n=0 missing=""
  while read -r p; do
    ((n++))
    compgen -G "$p" >/dev/null || missing+=" $p"
  done < <(grep -oE '(error_file|stacks): /[^ ]+|kept /[^ :]+' "$tmp/err" | sed -E 's/^(error_file: |stacks: |kept )//')
  ((n > 0)) || { flunk "$1" "no path printed"; return; }
  [[ -z $missing ]] && pass "$1 ($n paths)" || flunk "$1" "printed but gone after exit:$missing"
}

# --- 17: SIGINT ignored in the launcher's parent; a forwarded SIGINT still reaches Python's handler ---
mkdir -p "$tmp/sigint"
(trap '' INT; exec "$bin" run --standalone --nproc-per-node 2 --grace-period 30 -- \
  "$py" "$tmp/w.py" sleep "$tag-sigint" "$tmp/sigint" >"$tmp/out" 2>"$tmp/err") &
lpid=$!
if wait_files "$tmp/sigint" ready 2 30; then
  grep -q 'SigIgn:.*' /proc/$lpid/status && sigign=$(awk '/SigIgn/ {print $2}' /proc/$lpid/status)
  (( (0x${sigign:-0} & 2) != 0 )) || flunk sigint-ignored-setup "the launcher does not ignore SIGINT (SigIgn $sigign)"
  kill -INT "$lpid"
  bounded_wait "$lpid" 60
  [[ $rc == 130 ]] || flunk sigint-forwarded "exit $rc, wanted 130"
  wait_files "$tmp/sigint" sigint 2 0 && pass sigint-forwarded-to-workers-started-with-it-ignored ||
    flunk sigint-forwarded "a worker did not get SIGINT (it was SIGKILLed after the grace period instead)"
  grep -q 'sending SIGKILL' "$tmp/err" && flunk sigint-no-sigkill "the launcher had to SIGKILL"
else
  flunk sigint-forwarded "workers did not start"
  kill -KILL "$lpid"
fi
gone "$tag-sigint" 5 || flunk sigint-no-orphans "$(pgrep -af "$tag-sigint")"

# --- 2: a failure summary's error_file outlives the launcher (no --log-dir) ---
mkdir -p "$tmp/fail"
timeout 60 "$bin" run --standalone --nproc-per-node 2 -- "$py" "$tmp/w.py" error-file "$tag-fail" "$tmp/fail" \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc == 3 ]] || flunk error-file-run "exit $rc, wanted 3"
grep -q 'error_file: /' "$tmp/err" || flunk error-file-printed "no error_file line in the summary"
every_printed_path_exists error-file-exists-after-exit
grep -q '^trainbox run: kept ' "$tmp/err" && pass kept-folder-said || flunk kept-folder-said "no 'kept' line"
rm -rf "$tmp"/trainbox-run-*

# --- 2: stacks written on SIGUSR1 outlive a job that then succeeds ---
mkdir -p "$tmp/usr1"
"$bin" run --standalone --nproc-per-node 2 -- "$py" "$tmp/w.py" wait-go "$tag-usr1" "$tmp/usr1" >"$tmp/out" 2>"$tmp/err" &
lpid=$!
if wait_files "$tmp/usr1" ready 2 30; then
  kill -USR1 "$lpid"
  for _ in $(seq 200); do grep -q 'stacks: ' "$tmp/err" && break; sleep 0.1; done
  touch "$tmp/usr1/go"
  bounded_wait "$lpid" 60
  [[ $rc == 0 ]] || flunk usr1-run "exit $rc, wanted 0"
  every_printed_path_exists stacks-exist-after-exit
else
  flunk usr1-run "workers did not start"
  kill -KILL "$lpid"
fi
rm -rf "$tmp"/trainbox-run-*

# --- 2: a clean run leaves no folder behind ---
mkdir -p "$tmp/clean"
touch "$tmp/clean/go"
timeout 60 "$bin" run --standalone --nproc-per-node 2 -- "$py" "$tmp/w.py" wait-go "$tag-clean" "$tmp/clean" \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc == 0 ]] || flunk clean-run "exit $rc"
compgen -G "$tmp/trainbox-run-*" >/dev/null && flunk clean-run-no-folder "left: $(echo "$tmp"/trainbox-run-*)" ||
  pass clean-run-no-folder

# --- 15: a script that imports torch runs with the build's Python, and the launcher says so ---
# The script "imports torch" only in a branch never taken, so it runs in any Python.
mkdir -p "$tmp/pyenv/bin"
ln -s "$py" "$tmp/pyenv/bin/python3"
printf 'import sys\nif False:\n    import torch\nprint("python=" + sys.executable)\n' >"$tmp/ddp.py"
(unset TRAINBOX_PYTHON; PATH="$tmp/pyenv/bin:$PATH" timeout 60 "$bin" run --standalone -- "$tmp/ddp.py" \
  >"$tmp/out" 2>"$tmp/err")
rc=$?
[[ $rc == 0 ]] || flunk python-choice-run "exit $rc"
if grep -q 'imports torch: running it with ' "$tmp/err"; then
  chosen=$(sed -nE 's/.*imports torch: running it with ([^,]+), the Python trainbox was built against.*/\1/p' "$tmp/err")
  grep -q "python=" "$tmp/out" && [[ $chosen != "$tmp/pyenv/bin/python3" ]] && grep -q TRAINBOX_PYTHON "$tmp/err" &&
    pass "python-choice: the build's Python ($chosen), said" || flunk python-choice "chose $chosen"
elif grep -q 'cannot import it; set TRAINBOX_PYTHON' "$tmp/err"; then
  pass "python-choice: no build Python known; PATH's python3 lacks torch, said so"
else
  grep -q "python=$tmp/pyenv/bin/python3" "$tmp/out" && "$tmp/pyenv/bin/python3" -c 'import torch' 2>/dev/null &&
    pass "python-choice: no build Python known, PATH's python3 has torch" ||
    flunk python-choice "no note, and: $(cat "$tmp/out")"
fi

# --- 5: the container shorthand knows every command (sample, preflight were missing) ---
for cmd in sample preflight doctor; do
  "$bin" entrypoint --quiet -- "$cmd" --help >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if grep -q "cannot run $cmd" "$tmp/err"; then
    flunk "entrypoint-$cmd" "$(head -1 "$tmp/err")"
  elif [[ -x $(dirname "$bin")/trainbox-torch || $cmd == doctor ]]; then
    [[ $rc == 0 ]] && grep -qi usage "$tmp/out" && pass "entrypoint-shorthand-$cmd" || flunk "entrypoint-$cmd" "exit $rc"
  else  # a torch-free build: trainbox itself answers that the command needs trainbox-torch
    [[ $rc == 2 ]] && grep -q 'needs trainbox-torch' "$tmp/err" && pass "entrypoint-shorthand-$cmd (no torch build)" ||
      flunk "entrypoint-$cmd" "exit $rc"
  fi
done
exit $fail
