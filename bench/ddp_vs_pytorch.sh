#!/usr/bin/env bash
# Benchmark: 2-rank CPU data-parallel training (Gloo) — `trainbox train --nproc-per-node 2`
# against Python DDP under torchrun (bench/peers/ddp_peer.py), same model (the classic
# Net), data (Fashion-MNIST), per-rank batch and 1 thread per rank, in one run. Each side
# runs REPEAT times (interleaved); medians, ratio and a JSON line are printed.
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
nproc=${NPROC:-2}; batch=${BATCH:-64}; steps=${STEPS:-300}; repeat=${REPEAT:-3}
fashion=${TRAINBOX_FASHION_DIR:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ours=(); theirs=()
for ((r = 0; r < repeat; r++)); do
  rm -rf "$tmp/run"
  OMP_NUM_THREADS=1 "$build/bin/trainbox" train --nproc-per-node "$nproc" --run-dir "$tmp/run" --quiet \
    --set train.batch_size="$batch" --set train.max_steps=$((steps + 20)) --set train.threads=1 --set train.log_every=20 \
    --set output.tensorboard=false --set checkpoint.every_epochs=0 --set data.path="$fashion" >/dev/null 2>&1
  ours+=("$("$py" -c '
import json, sys
w = [e for e in map(json.loads, open(sys.argv[1])) if e["event"] == "train"][1:]
print(len(w) / sum(1 / e["samples_per_s"] for e in w))' "$tmp/run/metrics.jsonl")")
  theirs+=("$(OMP_NUM_THREADS=1 "$torchrun" --standalone --nproc-per-node "$nproc" "$root/bench/peers/ddp_peer.py" \
    --batch "$batch" --steps "$steps" --data "$fashion" 2>/dev/null | "$py" -c 'import json,sys; print(json.loads(sys.stdin.readlines()[-1])["samples_per_s"])')")
done
"$py" - "$nproc" "$batch" "${ours[*]}" "${theirs[*]}" <<'PY'
import json, statistics, sys
n, b = sys.argv[1], sys.argv[2]
ours = [float(x) for x in sys.argv[3].split()]
theirs = [float(x) for x in sys.argv[4].split()]
a, t = statistics.median(ours), statistics.median(theirs)
print(f"# ddp_vs_pytorch — {n} ranks x batch {b}, Gloo on CPU, 1 thread per rank, median of {len(ours)}")
print(f"{'impl':<28} {'samples/s':>12}")
print(f"{'trainbox train (C++ DDP)':<28} {a:12.0f}")
print(f"{'PyTorch DDP (torchrun)':<28} {t:12.0f}")
print(f"ratio: {a / t:.2f}x (goal >= 1.0x)")
print("#json " + json.dumps({"bench": "ddp_vs_pytorch", "ranks": int(n), "batch_per_rank": int(b), "trainbox": ours,
                             "pytorch": theirs, "ratio_of_medians": a / t}))
PY
