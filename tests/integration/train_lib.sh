# Shared by the train_*.sh tests: a small, fast, deterministic job and helpers.
bin=${TRAINBOX_BIN:?}
py=${TRAINBOX_PYTHON:-python3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# The launchers' temporary folders (kept after a failure: error files, stacks) land in $tmp and
# go with it (tests/integration/own_tmpdir.sh fails a test that leaves one).
export TMPDIR=$tmp
# 2000 synthetic 1x28x28 samples, batch 32: 63 steps per epoch, a second or two on CPU.
small=(--set data.dataset=synthetic --set data.synthetic_samples=2000 --set train.batch_size=32
       --set model.hidden=[64] --set train.deterministic=true --set train.threads=1 --set train.log_every=1
       --set output.progress=off --set checkpoint.every_epochs=0 --set train.device=cpu)
# These tests check the CPU/Gloo paths and compare runs bit for bit, so they pin the CPU
# even on a GPU machine (the gpu-labelled tests cover CUDA). gpus: CUDA GPUs torch sees.
gpus=$("$bin" doctor --json 2>/dev/null | "$py" -c '
import json, sys
d = json.load(sys.stdin); d = d.get("report", d)
print(max(0, d.get("driver", {}).get("cuda_device_count", 0) or 0))' 2>/dev/null || echo 0)
fail=0
# expect NAME WANTED_RC PATTERN -- command…: the exit code, and PATTERN (grep -E) in its output.
expect() {  # expect NAME WANTED_RC PATTERN -- command…
  local name=$1 want=$2 pattern=$3; shift 4
  "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [[ $rc != "$want" ]]; then echo "FAIL $name: exit $rc, wanted $want"; tail -n 5 "$tmp/out" "$tmp/err"; fail=1; return; fi
  if [[ -n $pattern ]] && ! grep -qE -- "$pattern" "$tmp/out" "$tmp/err"; then
    echo "FAIL $name: output lacks /$pattern/"; tail -n 5 "$tmp/out" "$tmp/err"; fail=1; return
  fi
  echo "ok   $name"
}
# skip_part PART REASON: a part of this test that did not run, as scripts/check-skips reads it
# (a failure outside the gpu label unless tests/allowed-skips.toml gives the reason).
skip_part() { echo "SKIP part $1: $2"; }
check() {  # check NAME CONDITION-COMMAND…
  local name=$1; shift
  if "$@"; then echo "ok   $name"; else echo "FAIL $name"; fail=1; fi
}
# The (step, loss) pairs of the "train" events in a metrics.jsonl; a later line for the
# same step (after a resume) replaces an earlier one.
losses() {
  "$py" -c '
import json, sys
seen = {}
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] == "train":
        seen[e["step"]] = repr(e["loss"])
for s in sorted(seen):
    print(s, seen[s])' "$1"
}
# same_losses A/metrics.jsonl B/metrics.jsonl TOL: the same number of "train" events, each
# loss within TOL relative (of max(1, |loss|)). Prints the largest difference seen.
same_losses() {
  "$py" - "$@" <<'PY'
import json, sys
def losses(p): return [e["loss"] for e in map(json.loads, open(p)) if e["event"] == "train"]
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
worst = max((abs(x - y) / max(1, abs(x)) for x, y in zip(a, b)), default=float("nan"))
print(f"#    {len(a)} vs {len(b)} losses, largest difference {worst:.2e} (tolerance {tol:g})")
sys.exit(0 if len(a) == len(b) > 0 and worst <= tol else 1)
PY
}
