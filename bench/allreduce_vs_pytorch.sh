#!/usr/bin/env bash
# Benchmark: `trainbox bench allreduce` against torch.distributed's allreduce (Gloo on CPU,
# NCCL with DEVICE=cuda), same sizes, same ranks, in one run. Both call the same c10d
# backends, so the in-place busbw should agree within ~10%; a larger gap is a measurement bug.
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
nproc=${NPROC:-2}; device=${DEVICE:-cpu}
b=${MINBYTES:-1048576}; e=${MAXBYTES:-33554432}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$build/bin/trainbox" run --standalone --nproc-per-node "$nproc" --no-prefix -- "$build/bin/trainbox" bench allreduce \
  --device "$device" -b "$b" -e "$e" -f 2 -n 30 -w 5 --json >"$tmp/ours.json" 2>/dev/null
"$torchrun" --standalone --nproc-per-node "$nproc" "$root/bench/peers/allreduce_peer.py" --device "$device" \
  -b "$b" -e "$e" -n 30 -w 5 >"$tmp/theirs.jsonl" 2>/dev/null
"$py" - "$tmp/ours.json" "$tmp/theirs.jsonl" "$nproc" "$device" <<'PY'
import json, sys
ours = {r["size"]: r for r in json.load(open(sys.argv[1]))["rows"]}
theirs = {r["size"]: r for r in map(json.loads, open(sys.argv[2]))}
print(f"# allreduce_vs_pytorch — {sys.argv[3]} ranks, {sys.argv[4]}, in-place busbw GB/s (median of 30)")
print(f"{'size':>10} {'trainbox':>10} {'pytorch':>10} {'ratio':>7}")
ratios = []
for s in sorted(set(ours) & set(theirs)):
    a, b = ours[s]["ip_busbw"], theirs[s]["busbw"]
    ratios.append(a / b)
    print(f"{s:>10} {a:10.3f} {b:10.3f} {a / b:7.2f}")
ratios.sort()
med = ratios[len(ratios) // 2]
print(f"median ratio {med:.2f} (agreement goal: within 0.90-1.10)")
print("#json " + json.dumps({"bench": "allreduce_vs_pytorch", "ratios": ratios, "median_ratio": med}))
PY
