#!/usr/bin/env bash
# Benchmark: activation checkpointing on the GPT of 8 layers (issue 35's goal: <= 1/3 of the
# peak activation memory for <= 1.4x the step time). For model.activation_checkpointing =
# none and blocks, interleaved (none blocks none blocks …) so the VM's drift hits both alike:
#   activations  `trainbox train --plan --json`'s measured figure: the peak of allocated tensor
#                bytes of one forward/backward beyond what lives before it (the counting CPU
#                allocator: exact; CUDA: the caching allocator's peak) — deterministic per shape;
#   step time    a short `trainbox train --json` run's own timing: micro-batch / samples_per_s
#                over its timed steps (train_s: no evaluation or checkpoint in it).
# Prints each run, the medians, the ratios blocks/none and one JSON line.
#   bench/activation_checkpointing.sh [BUILD]     REPEAT=3 STEPS=30 THREADS=2 DEVICE=cpu
#   shape: N_LAYER=8 N_EMBD=128 N_HEAD=4 BLOCK=128 BATCH=16 DROPOUT=0.1
#   POLICY=blocks (or every_k:K, model.activation_checkpointing_every = K) against none
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
[[ -x $bin ]] || { echo "no $bin: build it first (make build)" >&2; exit 2; }
repeat=${REPEAT:-3} steps=${STEPS:-30} threads=${THREADS:-2} device=${DEVICE:-cpu}
n_layer=${N_LAYER:-8} n_embd=${N_EMBD:-128} n_head=${N_HEAD:-4} block=${BLOCK:-128} batch=${BATCH:-16}
dropout=${DROPOUT:-0.1} policy=${POLICY:-blocks}
every=2
[[ $policy == every_k:* ]] && every=${policy#every_k:}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -c 'import random, sys; random.seed(1); w = "the cat sat on a mat and ran far away".split()
open(sys.argv[1], "w").write(" ".join(random.choice(w) for _ in range(40000)))' "$tmp/t.txt"
job=(--set model.name=gpt --set data.dataset=text --set data.path="$tmp/t.txt" --set model.n_layer="$n_layer"
     --set model.n_embd="$n_embd" --set model.n_head="$n_head" --set model.block_size="$block"
     --set model.dropout="$dropout" --set model.activation_checkpointing_every="$every" --set train.batch_size="$batch" --set optim.name=adamw --set train.device="$device"
     --set train.threads="$threads" --set output.progress=off)

activations() {  # activations POLICY: bytes
  "$bin" train "${job[@]}" --set model.activation_checkpointing="${1%%:*}" --plan --json 2>"$tmp/err" |
    "$py" -c 'import json, sys; print(json.load(sys.stdin)["per_rank"]["activations_bytes"])' ||
    { echo "plan with $1 failed:" >&2; cat "$tmp/err" >&2; exit 1; }
}
step_ms() {  # step_ms POLICY: milliseconds per optimizer step
  "$bin" train "${job[@]}" --set model.activation_checkpointing="${1%%:*}" --set train.max_steps="$steps" \
    --set train.epochs=1 --quiet --json --run-dir "$tmp/run-$RANDOM$RANDOM" 2>"$tmp/err" |
    "$py" -c 'import json, sys; d = json.load(sys.stdin); print(1000 * '"$batch"' / d["samples_per_s"])' ||
    { echo "run with $1 failed:" >&2; cat "$tmp/err" >&2; exit 1; }
}

echo "# activation checkpointing: gpt n_layer $n_layer, n_embd $n_embd, n_head $n_head, block_size $block, batch $batch,"
echo "#   dropout $dropout, adamw, $device, $threads threads; $steps steps a run, $repeat runs each, interleaved"
echo "# $("$bin" --version 2>/dev/null | head -1)"
an=() ab=() tn=() tb=()
for ((i = 1; i <= repeat; i++)); do
  a=$(activations none) t=$(step_ms none)
  an+=("$a") tn+=("$t")
  printf 'run %d   none    activations %12d B   step %8.1f ms\n' "$i" "$a" "$t"
  a=$(activations "$policy") t=$(step_ms "$policy")
  ab+=("$a") tb+=("$t")
  printf 'run %d   %-7s activations %12d B   step %8.1f ms\n' "$i" "$policy" "$a" "$t"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
man=$(median "${an[@]}") mab=$(median "${ab[@]}") mtn=$(median "${tn[@]}") mtb=$(median "${tb[@]}")
mem_ratio=$(awk -v a="$man" -v b="$mab" 'BEGIN {printf "%.3f", b / a}')
time_ratio=$(awk -v a="$mtn" -v b="$mtb" 'BEGIN {printf "%.3f", b / a}')
printf 'median  none    activations %12d B   step %8.1f ms\n' "$man" "$mtn"
printf 'median  %-7s activations %12d B   step %8.1f ms\n' "$policy" "$mab" "$mtb"
printf 'ratio   %s/none: activations %s (goal <= 0.333), step time %s (goal <= 1.4)\n' "$policy" "$mem_ratio" "$time_ratio"
printf '#json {"bench":"activation_checkpointing","policy":"%s","dropout":%s,"n_layer":%d,"n_embd":%d,"block_size":%d,"batch":%d,"device":"%s","threads":%d,"repeat":%d,"steps":%d,"activations_none_bytes":%s,"activations_blocks_bytes":%s,"step_ms_none":%s,"step_ms_blocks":%s,"memory_ratio":%s,"time_ratio":%s}\n' \
  "$policy" "$dropout" "$n_layer" "$n_embd" "$block" "$batch" "$device" "$threads" "$repeat" "$steps" "$man" "$mab" "$mtn" "$mtb" "$mem_ratio" "$time_ratio"
