#!/usr/bin/env bash
# GPU: a checkpoint trained on the GPU exports where no GPU is visible (CUDA_VISIBLE_DEVICES
# empty), and its weights load into PyTorch on the CPU equal to the GPU model's. Skips (77)
# without a GPU.
set -uo pipefail
source "$(dirname "$0")/gpu_lib.sh"
"$bin" train "${gpu_job[@]}" --set train.epochs=1 --run-dir "$tmp/run" --quiet >"$tmp/run.out" 2>&1 ||
  { cat "$tmp/run.out"; echo "FAIL: training on the GPU"; exit 1; }
ckpt=$tmp/run/checkpoints/$(cat "$tmp/run/checkpoints/latest")
CUDA_VISIBLE_DEVICES= "$bin" export "$ckpt" "$tmp/cpu.safetensors" >"$tmp/export.out" 2>&1
check "export of a GPU checkpoint with no GPU visible: exit 0" test $? = 0
check "... the run's own export (written on the GPU) has the same weights" \
  same_weights "$tmp/run/model.safetensors" "$tmp/cpu.safetensors" 0
check "... and PyTorch loads them on the CPU" env CUDA_VISIBLE_DEVICES= "$py" -c '
import sys, torch
from safetensors.torch import load_file
sd = load_file(sys.argv[1], device="cpu")
sys.exit(0 if sd and all(t.device.type == "cpu" and torch.isfinite(t).all() for t in sd.values()) else 1)' "$tmp/cpu.safetensors"
exit $fail
