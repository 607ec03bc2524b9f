#!/usr/bin/env bash
# Benchmark: `trainbox bench gemm` and `bench memcpy` against the same operations timed from
# Python torch (bench/peers/gemm_memcpy_peer.py), same device, in one run. Both call the
# same libraries (cuBLAS / oneDNN, cudaMemcpy), so they should agree within ~10%.
#   bench/gemm_memcpy_vs_pytorch.sh [BUILD_DIR]      DEVICE=cuda on the GPU machine
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
device=${DEVICE:-cpu}
if [[ $device == cuda ]]; then sizes=(2048 4096 8192); dtypes=(fp32 tf32 bf16 fp16); bytes=(67108864 1073741824)
else sizes=(256 512 1024); dtypes=(fp32 bf16); bytes=(67108864); fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$build/bin/trainbox" bench gemm --device "$device" --sizes "${sizes[@]}" --dtypes "${dtypes[@]}" --json >"$tmp/gemm.json"
"$build/bin/trainbox" bench memcpy --device "$device" --sizes "${bytes[@]}" --json >"$tmp/memcpy.json"
"$py" "$root/bench/peers/gemm_memcpy_peer.py" --device "$device" --sizes "${sizes[@]}" --dtypes "${dtypes[@]}" \
  --bytes "${bytes[@]}" >"$tmp/peer.jsonl"
"$py" - "$tmp" "$device" <<'PY'
import json, sys
tmp, device = sys.argv[1], sys.argv[2]
peer = [json.loads(l) for l in open(f"{tmp}/peer.jsonl")]
g = {(r["dtype"], r["m=n=k"]): r["tflops"] for r in json.load(open(f"{tmp}/gemm.json"))["rows"]}
m = {(r["direction"], r["bytes"]): r["gbps"] for r in json.load(open(f"{tmp}/memcpy.json"))["rows"]}
print(f"# gemm_memcpy_vs_pytorch — {device}")
print(f"{'what':<28} {'trainbox':>10} {'pytorch':>10} {'ratio':>7}")
ratios = []
for p in peer:
    key, ours = ((p["dtype"], p["n"]), g) if p["bench"] == "gemm" else ((p["direction"], p["bytes"]), m)
    if key not in ours:
        continue
    a, b = ours[key], p["tflops"] if p["bench"] == "gemm" else p["gbps"]
    ratios.append(a / b)
    unit = "TFLOP/s" if p["bench"] == "gemm" else "GB/s"
    print(f"{p['bench'] + ' ' + ' '.join(map(str, key)) + ' ' + unit:<28} {a:10.2f} {b:10.2f} {a / b:7.2f}")
ratios.sort()
print(f"median ratio {ratios[len(ratios) // 2]:.2f} (agreement goal: within 0.90-1.10)")
print("#json " + json.dumps({"bench": "gemm_memcpy_vs_pytorch", "device": device, "ratios": ratios}))
PY
