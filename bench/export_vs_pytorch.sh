#!/usr/bin/env bash
# Benchmark: `trainbox export` and what deploying the export buys. Two models: the GPT of
# configs/text_gpt.toml (4 layers, 128 wide, block 128, bytes) and a ResNet-18 (the resnet
# model's defaults: width 64, blocks 2-2-2-2, 3x3 stem) on 1x28x28 images, each trained one
# step so that a real checkpoint exists. Prints:
#   export time per format (safetensors, pt, onnx), median of REPEAT runs of the CLI (process
#     start and the checkpoint's verification included: what a user waits for);
#   inference on the CPU, same weights, one run: ONNX Runtime (CPUExecutionProvider), trainbox's
#     own forward (tests' `logits` helper: N forwards in one process, the one-forward run
#     subtracted, so start-up and loading cancel) and PyTorch eager (bench/peers/models.py
#     loading the .pt) — latency at batch 1 (ms) and throughput at batch 64 (samples/s).
#     The trainbox column is a difference of two process runs: on a machine loaded by other
#     work its noise is that of process start-up; use an idle machine and ITERS ≥ 50.
# These are figures for users, not a goal: inference is not trainbox's product.
#   bench/export_vs_pytorch.sh [BUILD_DIR]     THREADS=N (default nproc), REPEAT=3, ITERS=20
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
logits=$build/bin/logits
threads=${THREADS:-$(nproc)} repeat=${REPEAT:-3} iters=${ITERS:-20}
text=${TRAINBOX_TEXT_DIR:-/usr/share/games/fortunes}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=$threads

"$bin" train "$root/configs/text_gpt.toml" --run-dir "$tmp/gpt" --quiet --set "data.path=\"$text\"" \
  --set train.max_steps=1 --set data.text_holdout=0.01 --set "train.threads=$threads" >/dev/null
"$bin" train --run-dir "$tmp/resnet" --quiet --set model.name=resnet --set data.dataset=synthetic \
  --set data.synthetic_samples=64 --set train.max_steps=1 --set train.batch_size=16 --set "train.threads=$threads" >/dev/null
ckpt() { echo "$tmp/$1/checkpoints/$(cat "$tmp/$1/checkpoints/latest")"; }

now() { date +%s.%N; }
echo "# export_vs_pytorch — $(uname -n), $(nproc) CPUs, threads $threads, torch $("$py" -c 'import torch; print(torch.__version__)'), onnxruntime $("$py" -c 'import onnxruntime; print(onnxruntime.__version__)')"
printf '%-8s %-12s %10s %12s\n' model format export_s size_MB
for m in gpt resnet; do
  for f in safetensors pt onnx; do
    times=()
    for ((i = 0; i < repeat; i++)); do
      t0=$(now); "$bin" export "$(ckpt $m)" "$tmp/$m.$f" --force >/dev/null; t1=$(now)
      times+=("$(echo "$t1 - $t0" | bc -l)")
    done
    med=$(printf '%s\n' "${times[@]}" | sort -g | sed -n "$(( (repeat + 1) / 2 ))p")
    printf '%-8s %-12s %10.3f %12.2f\n' $m $f "$med" "$(echo "$(stat -c %s "$tmp/$m.$f") / 1000000" | bc -l)"
  done
done

# trainbox's forward: ITERS+1 copies of one batch in one `logits` call, minus a 1-copy call.
trainbox_forward() {  # MODEL BATCH → seconds per forward
  local m=$1 b=$2
  "$py" - "$m" "$b" "$iters" "$tmp" <<'PY'
import sys, torch
from safetensors.torch import save_file
m, b, n, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.manual_seed(0)
x = torch.randint(256, (b, 128)) if m == "gpt" else torch.randn(b, 1, 28, 28)
save_file({"x": x}, f"{d}/x1.safetensors")
save_file({"x": x, **{f"x_{i}": x.clone() for i in range(1, n + 1)}}, f"{d}/xn.safetensors")
PY
  local t0 t1 t2
  t0=$(now); "$logits" "$(ckpt "$m")" "$tmp/x1.safetensors" "$tmp/y.safetensors"; t1=$(now)
  "$logits" "$(ckpt "$m")" "$tmp/xn.safetensors" "$tmp/y.safetensors"; t2=$(now)
  echo "(($t2 - $t1) - ($t1 - $t0)) / $iters" | bc -l
}
tb_gpt1=$(trainbox_forward gpt 1) tb_gpt64=$(trainbox_forward gpt 64)
tb_res1=$(trainbox_forward resnet 1) tb_res64=$(trainbox_forward resnet 64)
"$py" "$root/bench/peers/export_peer.py" "$tmp" "$threads" "$iters" "$tb_gpt1" "$tb_gpt64" "$tb_res1" "$tb_res64"
