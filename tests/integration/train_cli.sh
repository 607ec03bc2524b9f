#!/usr/bin/env bash
# trainbox train / export as a user meets them: the run dir's files, and every kind of
# bad input answered with one line, exit 2, and nothing half-written.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"

# --- a normal run: the files a run dir holds ---
expect run 0 '"test_accuracy"' -- "$bin" train "${small[@]}" --set train.epochs=1 --run-dir "$tmp/ok" --json
for f in config.toml metrics.jsonl checkpoints/latest; do check "run dir has $f" test -s "$tmp/ok/$f"; done
check "run dir has a TensorBoard event file" compgen -G "$tmp/ok/events.out.tfevents.*" >/dev/null
check "resolved config lists every key" grep -q '^eval_batch_size = 1000' "$tmp/ok/config.toml"
expect reuse-needs-resume 2 'already has checkpoints.*|--resume auto' -- "$bin" train "${small[@]}" --run-dir "$tmp/ok"

# --- mixed precision on CPU (bf16 autocast), CUDA graphs on CPU (a note, then eager) ---
expect amp-bf16-cpu 0 '"test_accuracy"' -- "$bin" train "${small[@]}" --set train.epochs=1 --set train.amp=bf16 --run-dir "$tmp/bf16" --json
expect graphs-on-cpu 0 'cuda_graphs = true has no effect on CPU' -- "$bin" train "${small[@]}" --set train.epochs=1 \
  --set train.cuda_graphs=true --run-dir "$tmp/graphs"
expect fp16-needs-cuda 2 'needs a CUDA device' -- "$bin" train "${small[@]}" --set train.amp=fp16 --run-dir "$tmp/fp16"

# --- settings that depend on the machine (docs/config.md): train.amp = "auto", train.threads ---
# TRAINBOX_CPU_FLAGS stands in for a CPU with or without native bf16. "auto" on one without is
# fp32: the losses of amp = "off", bit for bit; on one with it, bf16 autocast: other losses.
m=("${small[@]}" --set train.epochs=1 --set train.max_steps=4 --set data.synthetic_samples=256)
no_bf16=(env TRAINBOX_CPU_FLAGS="fpu sse2 avx2 fma avx512f")
expect amp-off 0 '' -- "$bin" train "${m[@]}" --run-dir "$tmp/amp-off"
expect amp-auto-emulating-cpu 0 'train.amp = "auto": off on this CPU: this CPU has no native bf16 \(avx512_bf16 or amx_bf16' \
  -- "${no_bf16[@]}" "$bin" train "${m[@]}" --set train.amp=auto --run-dir "$tmp/amp-auto-off"
check "... trains in fp32: amp = \"off\"'s losses, exactly" cmp -s <(losses "$tmp/amp-off/metrics.jsonl") \
  <(losses "$tmp/amp-auto-off/metrics.jsonl")
check "... config.toml keeps amp = \"auto\" (decided again where it runs)" grep -qx 'amp = "auto"' "$tmp/amp-auto-off/config.toml"
expect amp-auto-native-cpu 0 'train.amp = "auto": bf16 on this CPU' -- env TRAINBOX_CPU_FLAGS="avx2 avx512f avx512_bf16" \
  "$bin" train "${m[@]}" --set train.amp=auto --run-dir "$tmp/amp-auto-bf16"
check "... trains under bf16 autocast: other losses than fp32's (the comparison above can fail)" \
  test "$(losses "$tmp/amp-off/metrics.jsonl")" != "$(losses "$tmp/amp-auto-bf16/metrics.jsonl")"
expect amp-bf16-emulating-cpu 0 'warning: train.amp = "bf16" on a CPU that would emulate it.*fix: set train.amp = "off"' \
  -- "${no_bf16[@]}" "$bin" train "${m[@]}" --set train.amp=bf16 --run-dir "$tmp/amp-bf16-warn"
check "... warned once" test "$(grep -c 'warning: train.amp' "$tmp/out" "$tmp/err" | awk -F: '{s += $2} END {print s}')" = 1
expect threads-vs-omp 0 'train.threads = 1 overrides OMP_NUM_THREADS=2 \(the config.s count wins; set train.threads = 0' \
  -- env OMP_NUM_THREADS=2 "$bin" train "${m[@]}" --run-dir "$tmp/threads-2"
expect threads-same-as-omp 0 '' -- env OMP_NUM_THREADS=1 "$bin" train "${m[@]}" --run-dir "$tmp/threads-1"
check "... no note when they agree" test "$(grep -c 'overrides OMP_NUM_THREADS' "$tmp/err")" = 0

# --- config errors ---
expect unknown-key 2 "did you mean 'optim.lr'" -- "$bin" train --set optim.lrr=0.1 --run-dir "$tmp/x1"
expect bad-type 2 'train.batch_size = "big" is not allowed' -- "$bin" train --set 'train.batch_size="big"' --run-dir "$tmp/x2"
expect out-of-range 2 'optim.lr = -1' -- "$bin" train --set optim.lr=-1 --run-dir "$tmp/x3"
printf '[train]\nepochs = \n' >"$tmp/broken.toml"
expect broken-toml 2 'broken.toml:2:' -- "$bin" train "$tmp/broken.toml" --run-dir "$tmp/x4"
expect unknown-option 2 'error' -- "$bin" train --epochs 3
check "no run dir created for config errors" test ! -e "$tmp/x1" -a ! -e "$tmp/x2"

# --- data errors ---
expect missing-dataset 2 'dataset-fashion-mnist' -- "$bin" train --set data.path="$tmp/nodata" --run-dir "$tmp/x5"
mkdir -p "$tmp/corrupt"
fashion=${TRAINBOX_FASHION_DIR:-/usr/share/datasets/fashion-mnist}
cp "$fashion"/t10k-* "$fashion"/train-labels-idx1-ubyte.gz "$tmp/corrupt/"
head -c 5000 "$fashion"/train-images-idx3-ubyte.gz >"$tmp/corrupt/train-images-idx3-ubyte.gz"
expect corrupt-dataset 2 'train-images-idx3-ubyte.gz' -- "$bin" train --set data.path="$tmp/corrupt" --run-dir "$tmp/x6"
check "no checkpoint written on data errors" test ! -e "$tmp/x5/checkpoints" -a ! -e "$tmp/x6/checkpoints"

# --- environment errors, said before training starts ---
expect unwritable-run-dir 2 'not writable' -- "$bin" train "${small[@]}" --run-dir /proc/trainbox-run
if ((gpus == 0)); then
  expect no-gpu 2 'sees no CUDA GPU' -- "$bin" train "${small[@]}" --device cuda --run-dir "$tmp/x7"
else
  expect gpu-index-out-of-range 2 "only $gpus GPU\(s\) are visible" -- "$bin" train "${small[@]}" --device cuda:$gpus --run-dir "$tmp/x7"
fi

# --- divergence: exit 1, the last good checkpoint stays latest ---
expect diverges 1 'diverged' -- "$bin" train "${small[@]}" --set train.epochs=3 --set optim.name=sgd --set optim.lr=10 \
  --set optim.momentum=0.99 --set schedule.warmup_steps=20 --set checkpoint.every_steps=2 --set train.log_every=2 --run-dir "$tmp/div"
if [[ -s $tmp/div/checkpoints/latest ]]; then
  good=$tmp/div/checkpoints/$(cat "$tmp/div/checkpoints/latest")
  expect export-last-good 0 'wrote' -- "$bin" export "$good" "$tmp/div.safetensors"
  check "last good checkpoint's weights are finite" "$py" -c '
import sys, numpy as np
from safetensors.numpy import load_file
sys.exit(0 if all(np.isfinite(v).all() for v in load_file(sys.argv[1]).values()) else 1)' "$tmp/div.safetensors"
else
  echo "FAIL diverges: no checkpoint before divergence"; fail=1
fi

# --- one writer per run dir: a second trainer is refused with the holder; a SIGKILLed holder leaves no stale lock ---
marker=trainbox-lock-test-$$
"$bin" train "${small[@]}" --set train.epochs=1000 --set data.path="$marker" --run-dir "$tmp/busy" >/dev/null 2>&1 &
first=$!
for _ in $(seq 200); do [[ -s $tmp/busy/.lock && -s $tmp/busy/metrics.jsonl ]] && break; sleep 0.1; done
expect second-writer-refused 2 "run dir .*/busy is in use by another trainbox train \(pid $first on host " -- \
  "$bin" train "${small[@]}" --set train.epochs=1 --run-dir "$tmp/busy" --resume auto
kill -9 "$first" 2>/dev/null; wait "$first" 2>/dev/null
expect no-stale-lock-after-sigkill 0 '"test_accuracy"' -- "$bin" train "${small[@]}" --set train.epochs=1 --run-dir "$tmp/busy" \
  --resume auto --json

# --- export errors ---
expect export-missing 2 'checkpoint .*nowhere does not exist' -- "$bin" export "$tmp/nowhere" "$tmp/o.safetensors"
check "no output for a failed export" test ! -e "$tmp/o.safetensors"
exit $fail
