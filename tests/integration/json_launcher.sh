#!/usr/bin/env bash
# The --json rule (docs/distributed.md, "--json under a launcher"): every command that has
# --json prints one JSON document on stdout under `trainbox run -n 2` — rank 0's, unprefixed —
# and nothing else there. Each command runs under the launcher with 2 ranks on CPU, tiny, and
# its stdout must parse with Python's json as one document (json.load refuses "[rank 0] {" and
# a second document alike) holding that command's own keys; run without a launcher, the same
# command prints the same keys. smi runs on the stand-in NVML (tests/tools/nvml_standin.cpp)
# when its folder is given as $1, and is skipped with the reason otherwise. About 5 s on an idle
# 2-core VM.
#   json_launcher.sh [NVML_STANDIN_DIR]
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
standin=${1:-}
# An image folder of two classes for `data ls` (listing reads names, not pixels).
mkdir -p "$tmp/imgs/cat" "$tmp/imgs/dog"
for f in cat/a cat/b dog/c; do printf 'not decoded by ls' >"$tmp/imgs/$f.jpg"; done

# under NAME KEYS RC -- COMMAND…: COMMAND under `trainbox run -n 2` (logs in $tmp) exits RC ("*":
# any; the doctor finds what it finds), its stdout one JSON document with every key of KEYS
# (comma-separated; "list" for a JSON array).
under() {
  local name=$1 keys=$2 want=$3; shift 4
  timeout 120 "$bin" run -n 2 --log-dir "$tmp/logs-$name" -- "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local rc=$?
  if [[ $want != "*" && $rc != "$want" ]]; then
    echo "FAIL $name under trainbox run -n 2: exit $rc, wanted $want"; tail -n 5 "$tmp/$name.err"; fail=1; return
  fi
  if "$py" - "$tmp/$name.out" "$keys" "$rc" <<'PY'; then
import json, sys
path, keys, rc = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(path).read()
try:
    doc = json.loads(text)  # one document: "[rank 0] {" or two documents fail here
except ValueError as e:
    sys.exit(f"stdout is not one JSON document ({e}); it starts {text[:80]!r} (exit {rc})")
if keys == "list":
    if not isinstance(doc, list):
        sys.exit(f"wanted a JSON array, got {type(doc).__name__}")
else:
    missing = [k for k in keys.split(",") if k not in doc]
    if missing:
        sys.exit(f"the document lacks {missing}; it has {sorted(doc)[:12]}")
PY
    echo "ok   $name --json under trainbox run -n 2: one document (exit $rc)"
  else
    echo "FAIL $name --json under trainbox run -n 2"; tail -n 5 "$tmp/$name.err"; fail=1
  fi
}

under doctor report,findings,exit_code "*" -- "$bin" doctor --json
under data-ls kind,classes,class_counts 0 -- "$bin" data ls "$tmp/imgs" --json
under data-ls-files kind,files 0 -- "$bin" data ls "$tmp/imgs" --json --files
under smoke device,ok,checks 0 -- "$bin" smoke --json --device cpu
under train steps,samples,samples_per_s 0 -- "$bin" train "${small[@]}" --set train.max_steps=3 \
  --run-dir "$tmp/run" --json
under bench bench,header,rows 0 -- "$bin" bench allreduce -b 1K -e 4K -n 2 -w 0 --device cpu --json
under preflight ok,world_size,nodes,links,slow_nodes,slow_links 0 -- "$bin" preflight --timeout 20 --json
if [[ -n $standin && -e $standin/libnvidia-ml.so.1 ]]; then
  LD_LIBRARY_PATH=$standin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} under smi list 0 -- "$bin" smi --json
else
  echo "skip smi: no NVML stand-in given (smi needs a driver; tests/CMakeLists.txt passes the stand-in)"
fi

# preflight's document holds both ranks' verdicts: it is the job's, not rank 0's alone.
check "preflight's document: world 2, both ranks OK" "$py" -c '
import json, sys
d = json.load(open(sys.argv[1]))
ranks = [r["verdict"] for n in d["nodes"] for r in n["ranks"]]
sys.exit(0 if d["world_size"] == 2 and ranks == ["OK", "OK"] else 1)' "$tmp/preflight.out"
# A Python worker's trainbox.doctor() gets the report on every rank (its own result file), and
# leaves the worker's result file alone: the launcher passes on no result.
cat >"$tmp/w.py" <<'PY'
import os, trainbox
print(f"rank {os.environ['RANK']} report {'findings' in trainbox.doctor()}", flush=True)
PY
PYTHONPATH=$TRAINBOX_SOURCE_DIR/python${PYTHONPATH:+:$PYTHONPATH} timeout 60 "$bin" run -n 2 --log-dir "$tmp/logs-py" -- \
  "$py" "$tmp/w.py" >"$tmp/py.out" 2>"$tmp/py.err"
check "trainbox.doctor() in both workers of trainbox run -n 2: a report on each, no result passed on" \
  test "$(sort "$tmp/py.out")" = "$(printf '[rank 0] rank 0 report True\n[rank 1] rank 1 report True')"
# Without a launcher the same commands print the same document themselves (indented).
"$bin" doctor --json >"$tmp/doctor1.out" 2>/dev/null
check "doctor --json without a launcher: one document with the same keys" "$py" -c '
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
sys.exit(0 if sorted(a) == sorted(b) else 1)' "$tmp/doctor1.out" "$tmp/doctor.out"
exit $fail
