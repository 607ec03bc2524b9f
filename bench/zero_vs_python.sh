#!/usr/bin/env bash
# Benchmark: trainbox's dist.zero_stage = 1, 2 and 3 against PyTorch's sharded data parallel on
# the same GPT, ranks and batches, CPU over Gloo: DistributedDataParallel +
# ZeroRedundancyOptimizer(AdamW), and FSDP2 fully_shard (bench/peers/zero_peer.py, torchrun);
# plain DDP on both sides for reference. Interleaved (every variant once per round). Per
# variant: step time (trainbox: its own timed steps, global batch / samples_per_s; PyTorch:
# the median step after 2 warm-up steps) and the peak RSS (VmHWM) of the larger rank — both
# processes load the same libtorch, so the difference is what each keeps.
# Prints each run, the medians and one JSON line.
#   bench/zero_vs_python.sh [BUILD]   REPEAT=3 STEPS=15 BATCH=4 (per rank) N_LAYER=4 N_EMBD=256 N_HEAD=4 BLOCK=128
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
[[ -x $bin ]] || { echo "no $bin: build it first (make build)" >&2; exit 2; }
repeat=${REPEAT:-3} steps=${STEPS:-15} batch=${BATCH:-4}
n_layer=${N_LAYER:-4} n_embd=${N_EMBD:-256} n_head=${N_HEAD:-4} block=${BLOCK:-128}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -c 'import random, sys; random.seed(1); w = "the cat sat on a mat and ran far away".split()
open(sys.argv[1], "w").write(" ".join(random.choice(w) for _ in range(60000)))' "$tmp/t.txt"
job=(train --nproc-per-node 2 --quiet --json --set model.name=gpt --set data.dataset=text --set data.path="$tmp/t.txt"
     --set data.text_holdout=0.01 --set model.n_layer="$n_layer" --set model.n_embd="$n_embd"
     --set model.n_head="$n_head" --set model.block_size="$block" --set model.dropout=0
     --set train.batch_size="$batch" --set train.max_steps="$steps" --set train.epochs=1 --set train.threads=1
     --set train.log_every="$steps" --set optim.name=adamw --set checkpoint.every_steps=0
     --set checkpoint.every_epochs=0 --set train.device=cpu --set output.progress=off)

trainbox() {  # trainbox STAGE: "step_ms peak_rss_bytes"
  OMP_NUM_THREADS=1 "$bin" "${job[@]}" --set dist.zero_stage="$1" --run-dir "$tmp/run-$RANDOM$RANDOM" 2>"$tmp/err" |
    "$py" -c 'import json, sys; d = json.load(sys.stdin)
print(1000 * 2 * '"$batch"' / d["samples_per_s"], max(d["memory"]["rank_peak_rss_bytes"]))' ||
    { echo "trainbox stage $1 failed:" >&2; cat "$tmp/err" >&2; exit 1; }
}
pytorch() {  # pytorch MODE: "step_ms peak_rss_bytes"
  OMP_NUM_THREADS=1 "$torchrun" --standalone --nproc-per-node 2 "$root/bench/peers/zero_peer.py" --mode "$1" \
    --steps "$steps" --batch "$batch" --n-layer "$n_layer" --n-embd "$n_embd" --n-head "$n_head" --block "$block" \
    2>"$tmp/err" | "$py" -c 'import json, sys; d = json.loads(sys.stdin.readlines()[-1])
print(d["step_ms"], max(d["rank_peak_rss_bytes"]))' || { echo "pytorch $1 failed:" >&2; cat "$tmp/err" >&2; exit 1; }
}
variants=("trainbox:0" "trainbox:1" "trainbox:2" "trainbox:3" "pytorch:ddp" "pytorch:zero" "pytorch:fsdp2")
declare -A times rss
params=$("$py" - "$n_layer" "$n_embd" "$block" <<'PY'
import sys
l, c, t = map(int, sys.argv[1:])
print(l * (12 * c * c + 13 * c) + 256 * c + t * c + 2 * c)
PY
)
echo "# zero_vs_python: GPT ${n_layer}x${n_embd} (block $block, $params parameters), 2 ranks x batch $batch, $steps steps, 1 thread per rank, Gloo, AdamW, $repeat rounds interleaved"
for ((i = 1; i <= repeat; i++)); do
  for v in "${variants[@]}"; do
    read -r ms peak < <(${v%%:*} "${v#*:}")
    times[$v]+="$ms " rss[$v]+="$peak "
    printf 'round %d  %-14s %8.1f ms/step   peak RSS %7.1f MiB\n' "$i" "$v" "$ms" "$(awk -v b="$peak" 'BEGIN {print b / 1048576}')"
  done
done
"$py" - "$params" "${variants[@]}" <<PY
import json, statistics, sys
times = {$(for v in "${variants[@]}"; do printf '"%s": [%s], ' "$v" "$(echo ${times[$v]} | tr ' ' ',')"; done)}
rss = {$(for v in "${variants[@]}"; do printf '"%s": [%s], ' "$v" "$(echo ${rss[$v]} | tr ' ' ',')"; done)}
m = {v: (statistics.median(times[v]), statistics.median(rss[v])) for v in times}
for v, (t, r) in m.items():
    print(f"median  {v:<14} {t:8.1f} ms/step   peak RSS {r / 2**20:7.1f} MiB")
for ours in ("trainbox:1", "trainbox:2", "trainbox:3"):
    for theirs in ("pytorch:zero", "pytorch:fsdp2"):
        print(f"{ours} vs {theirs}: step time {m[ours][0] / m[theirs][0]:.2f}x, peak RSS {m[ours][1] / m[theirs][1]:.2f}x "
              f"({(m[ours][1] - m[theirs][1]) / 2**20:+.1f} MiB)")
print("#json " + json.dumps({"bench": "zero_vs_python", "params": int(sys.argv[1]), "world": 2, "backend": "gloo",
                             "step_ms": {v: t for v, (t, r) in m.items()},
                             "peak_rss_bytes": {v: r for v, (t, r) in m.items()}}))
PY
