#!/usr/bin/env bash
# Benchmark: the trainer's own speed, build A against build B, interleaved (A B A B …) so that
# the VM's drift hits both alike. The job is the seeds' MLP (the default config: Net
# 784-128-10 + Adam, batch 64, Fashion-MNIST), one epoch, no evaluation or checkpoint in the
# timing: samples/s is the trainer's own figure over its timed steps (train_s). Use it to show
# that a change of the trainer's code costs nothing (a refactor), or what it gains.
# Prints each run, the medians, the ratio B/A and one JSON line.
#   bench/trainer_ab.sh BUILD_A BUILD_B      REPEAT=5 THREADS=2 (train.threads)
set -euo pipefail
source "$(dirname "$0")/common.sh" "${2:-}"
[[ $# -eq 2 ]] || { echo "usage: bench/trainer_ab.sh BUILD_A BUILD_B (each a folder with bin/trainbox)" >&2; exit 2; }
a=$1/bin/trainbox b=$2/bin/trainbox
for x in "$a" "$b"; do [[ -x $x ]] || { echo "no $x: build it first" >&2; exit 2; }; done
repeat=${REPEAT:-5}
threads=${THREADS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
job=(train --quiet --json --set train.epochs=1 --set train.threads="$threads" --set checkpoint.every_epochs=0)

rate() {  # rate BIN: samples/s of one run
  "$1" "${job[@]}" --run-dir "$tmp/run-$RANDOM$RANDOM" 2>"$tmp/err" |
    "$py" -c 'import json, sys; print(json.load(sys.stdin)["samples_per_s"])' ||
    { echo "run of $1 failed:" >&2; cat "$tmp/err" >&2; exit 1; }
}
as=() bs=()
echo "# trainer A/B: seeds' MLP, 1 epoch, $threads threads, $repeat runs each, interleaved"
echo "# A: $a"
echo "# B: $b"
for ((i = 1; i <= repeat; i++)); do
  ra=$(rate "$a")
  rb=$(rate "$b")
  as+=("$ra") bs+=("$rb")
  printf 'run %d   A %10.0f samples/s   B %10.0f samples/s\n' "$i" "$ra" "$rb"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ma=$(median "${as[@]}") mb=$(median "${bs[@]}")
ratio=$(awk -v a="$ma" -v b="$mb" 'BEGIN {printf "%.3f", b / a}')
printf 'median  A %10.0f samples/s   B %10.0f samples/s   B/A %s\n' "$ma" "$mb" "$ratio"
printf '#json {"bench":"trainer_ab","repeat":%d,"threads":%d,"a_samples_per_s":%s,"b_samples_per_s":%s,"ratio":%s}\n' \
  "$repeat" "$threads" "$ma" "$mb" "$ratio"
