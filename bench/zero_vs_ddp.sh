#!/usr/bin/env bash
# Benchmark: step time of dist.zero_stage = 1, 2 and 3 against plain DDP (stage 0), 2 ranks on
# CPU over Gloo, the built-in GPT of configs/text_gpt.toml (0.84 M parameters, fortunes),
# interleaved (0 1 2 3 0 1 2 3 …) so the VM's drift hits every stage alike. Step time is the
# trainer's own figure over its timed steps (global batch / samples_per_s: no start-up,
# evaluation or checkpoint in it). Also prints each stage's model-state bytes per rank.
# Prints each run, the medians, the ratios to stage 0 and one JSON line.
#   bench/zero_vs_ddp.sh [BUILD]      REPEAT=3 STEPS=40 BATCH=8 (per rank) THREADS=1 (per rank)
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
[[ -x $bin ]] || { echo "no $bin: build it first (make build)" >&2; exit 2; }
[[ -d /usr/share/games/fortunes ]] || { echo "no /usr/share/games/fortunes: apt-get install fortunes" >&2; exit 2; }
repeat=${REPEAT:-3} steps=${STEPS:-40} batch=${BATCH:-8} threads=${THREADS:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
job=(train "$root/configs/text_gpt.toml" --nproc-per-node 2 --quiet --json --set train.max_steps="$steps"
     --set train.batch_size="$batch" --set train.threads="$threads" --set data.text_holdout=0.01
     --set checkpoint.every_steps=0 --set train.log_every="$steps" --set train.device=cpu)

run() {  # run STAGE: "step_ms model_state_bytes" of one 2-rank job
  "$bin" "${job[@]}" --set dist.zero_stage="$1" --run-dir "$tmp/run-$RANDOM$RANDOM" 2>"$tmp/err" |
    "$py" -c 'import json, sys; d = json.load(sys.stdin); print(1000 * 2 * '"$batch"' / d["samples_per_s"], d["model_state_bytes"])' ||
    { echo "stage $1 run failed:" >&2; cat "$tmp/err" >&2; exit 1; }
}
declare -A times bytes
echo "# zero_vs_ddp: GPT 4x128 (text_gpt.toml), 2 ranks x batch $batch, $steps steps, $threads thread(s) per rank, Gloo, $repeat rounds interleaved"
for ((i = 1; i <= repeat; i++)); do
  row="round $i"
  for s in 0 1 2 3; do
    read -r ms b < <(run "$s")
    times[$s]+="$ms " bytes[$s]=$b
    row+=$(printf '   stage %d %7.1f ms/step' "$s" "$ms")
  done
  echo "$row"
done
median() { printf '%s\n' $@ | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
m0=$(median ${times[0]}) m1=$(median ${times[1]}) m2=$(median ${times[2]}) m3=$(median ${times[3]})
r1=$(awk -v a="$m0" -v b="$m1" 'BEGIN {printf "%.3f", b / a}')
r2=$(awk -v a="$m0" -v b="$m2" 'BEGIN {printf "%.3f", b / a}')
r3=$(awk -v a="$m0" -v b="$m3" 'BEGIN {printf "%.3f", b / a}')
printf 'median  stage 0 %.1f ms   stage 1 %.1f ms (%sx)   stage 2 %.1f ms (%sx)   stage 3 %.1f ms (%sx)\n' \
  "$m0" "$m1" "$r1" "$m2" "$r2" "$m3" "$r3"
printf 'model state per rank: stage 0 %s B   stage 1 %s B   stage 2 %s B   stage 3 %s B\n' \
  "${bytes[0]}" "${bytes[1]}" "${bytes[2]}" "${bytes[3]}"
printf '#json {"bench":"zero_vs_ddp","world":2,"backend":"gloo","repeat":%d,"steps":%d,"batch_per_rank":%d,"step_ms":{"0":%s,"1":%s,"2":%s,"3":%s},"ratio":{"1":%s,"2":%s,"3":%s},"model_state_bytes":{"0":%s,"1":%s,"2":%s,"3":%s}}\n' \
  "$repeat" "$steps" "$batch" "$m0" "$m1" "$m2" "$m3" "$r1" "$r2" "$r3" "${bytes[0]}" "${bytes[1]}" "${bytes[2]}" "${bytes[3]}"
