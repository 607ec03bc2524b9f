#!/usr/bin/env bash
# Benchmark: `trainbox train` against the same loop in Python PyTorch eager
# (bench/peers/train_peer.py), same torch wheel, same thread count, same data
# (Fashion-MNIST, in memory), in one run. Rows: the seed MLP at batch 64, the cnn at
# batch 512, and the GPT of configs/text_gpt.toml (4 layers, 4 heads, 128 wide, block 128,
# batch 16, fp32) on Debian's fortunes. Prints a table of samples/s (GPT: sequences of 128
# tokens/s; the JSON adds tokens/s) and peak RSS, the ratios, and JSON lines.
#   bench/train_vs_pytorch.sh [BUILD_DIR]        DEVICE=cuda for the GPU machine
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
threads=${THREADS:-$(nproc)}
device=${DEVICE:-cpu}
fashion=${TRAINBOX_FASHION_DIR:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# name model batch steps extra-trainbox-settings
text=${TRAINBOX_TEXT_DIR:-/usr/share/games/fortunes}
rows=("mlp-b64 mlp 64 938" "cnn-b512 cnn 512 60" "gpt-b16 gpt 16 150")
repeat=${REPEAT:-3}  # each side runs `repeat` times, interleaved; the median is reported
# COMPILE=1: also PyTorch with torch.compile (needs a working inductor: a C++ compiler on
# CPU, Triton on CUDA); a failed compile is reported as "-", never fatal.
compile=${COMPILE:-0}
[[ $device == cuda ]] && rows+=("mlp-b64-graphs mlp 64 938 --set train.cuda_graphs=true --set data.device_resident=true"
  "gpt-b16-bf16 gpt 16 300 --set train.amp=bf16 --set data.device_resident=true"
  "gpt-b16-bf16-graphs gpt 16 300 --set train.amp=bf16 --set data.device_resident=true --set train.cuda_graphs=true")
if [[ -n ${ROWS:-} ]]; then  # ROWS="mlp-b64 …": only these rows
  keep=()
  for row in "${rows[@]}"; do [[ " $ROWS " == *" ${row%% *} "* ]] && keep+=("$row"); done
  rows=("${keep[@]}")
fi

echo "# train_vs_pytorch — $(uname -n), $(nproc) CPUs, device $device, threads $threads, torch $("$py" -c 'import torch; print(torch.__version__)')"
printf '%-16s %14s %14s %8s %12s %12s %14s %8s\n' row trainbox_sps pytorch_sps ratio trainbox_rss pytorch_rss \
  compile_sps ratio_c
for row in "${rows[@]}"; do
  read -r name model batch steps extra <<<"$row"
  cfg=$root/configs/fashion_${model}.toml data=$fashion peer_extra=()
  [[ $model == gpt ]] && cfg=$root/configs/text_gpt.toml data=$text
  [[ $extra == *train.amp=bf16* ]] && peer_extra=(--amp bf16)
  for ((r = 0; r < repeat; r++)); do
    # trainbox: 20 warm-up steps then `steps` timed ones, as the peer. Logged every 20 steps:
    # the rate is total samples / total time over the windows after the first.
    rm -rf "$tmp/$name"
    "$build/bin/trainbox" train "$cfg" --run-dir "$tmp/$name" --json --quiet --device "$device" \
      --set train.batch_size="$batch" --set train.max_steps=$((steps + 20)) --set train.threads="$threads" \
      --set output.tensorboard=false --set checkpoint.every_epochs=0 --set train.log_every=20 \
      --set data.path="$data" $extra >"$tmp/$name.tb.$r.json"
    cp "$tmp/$name/metrics.jsonl" "$tmp/$name.metrics.$r.jsonl"
    "$py" "$root/bench/peers/train_peer.py" --model "$model" --batch "$batch" --steps "$steps" --threads "$threads" \
      --device "$device" --data "$data" "${peer_extra[@]}" >"$tmp/$name.py.$r.json"
    if [[ $compile == 1 ]]; then
      "$py" "$root/bench/peers/train_peer.py" --model "$model" --batch "$batch" --steps "$steps" --threads "$threads" \
        --device "$device" --data "$data" "${peer_extra[@]}" --compile >"$tmp/$name.pyc.$r.json" 2>"$tmp/$name.pyc.$r.err" ||
        rm -f "$tmp/$name.pyc.$r.json"
    fi
  done
  "$py" - "$name" "$tmp" "$batch" "$repeat" <<'PY'
import json, statistics, sys
name, tmp, batch, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
import os
ours, theirs, rss_ours, rss_theirs, compiled = [], [], [], [], []
for r in range(repeat):
    w = [json.loads(l) for l in open(f"{tmp}/{name}.metrics.{r}.jsonl")]
    w = [x for x in w if x["event"] == "train"][1:]  # skip the warm-up window
    # equal-size windows of 20 steps: overall rate = samples / sum of window times
    ours.append(len(w) * 20 * batch / sum(20 * batch / x["samples_per_s"] for x in w))
    rss_ours.append(json.load(open(f"{tmp}/{name}.tb.{r}.json"))["peak_memory_bytes"])
    pt = json.load(open(f"{tmp}/{name}.py.{r}.json"))
    theirs.append(pt["samples_per_s"])
    rss_theirs.append(pt["peak_rss_bytes"])
    pc = f"{tmp}/{name}.pyc.{r}.json"
    if os.path.exists(pc) and os.path.getsize(pc) > 0:
        compiled.append(json.load(open(pc))["samples_per_s"])
a, b = statistics.median(ours), statistics.median(theirs)
ratio = a / b
c = statistics.median(compiled) if compiled else None
print(f"{name:<16} {a:14.0f} {b:14.0f} {ratio:7.2f}x "
      f"{max(rss_ours) / 2**20:10.0f}Mi {max(rss_theirs) / 2**20:10.0f}Mi "
      + (f"{c:14.0f} {a / c:7.2f}x" if c else f"{'-':>14} {'-':>8}"))
print("#json " + json.dumps({"bench": "train_vs_pytorch", "row": name, "repeat": repeat,
      "trainbox_samples_per_s": ours, "pytorch_samples_per_s": theirs, "ratio_of_medians": ratio,
      "pytorch_compile_samples_per_s": compiled, "ratio_to_compile": a / c if c else None,
      "trainbox_peak_bytes": max(rss_ours), "pytorch_peak_rss_bytes": max(rss_theirs),
      "trainbox_tokens_per_s": a * 128 if name.startswith("gpt") else None,
      "pytorch_tokens_per_s": b * 128 if name.startswith("gpt") else None}))
PY
done
echo "# goals: mlp-b64 >= 1.3x, cnn-b512 >= 1.0x, gpt-b16 >= 1.15x with lower RSS (CPU); mlp-b64-graphs >= 3x, gpt-b16-bf16* >= 1.5x eager and >= 1.0x torch.compile (CUDA). Peak memory: trainbox reports VmHWM on CPU and the CUDA allocator's peak on GPU."
