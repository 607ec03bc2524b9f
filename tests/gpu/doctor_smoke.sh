#!/usr/bin/env bash
# GPU: doctor finds the GPU with no errors, and --smoke passes every check on CUDA
# (alloc, GEMM vs CPU, H2D/D2H, single-rank NCCL allreduce). Skips (77) without a GPU.
set -uo pipefail
bin=${TRAINBOX_BIN:?}
json=$("$bin" doctor --json)
count=$(printf '%s' "$json" | grep -o '"cuda_device_count": *-\?[0-9]*' | grep -o -- '-\?[0-9]*$')
if [[ -z $count || $count -le 0 ]]; then echo "SKIPPED: no CUDA GPU visible (cuda_device_count=${count:-?})"; exit 77; fi
"$bin" doctor || { echo "FAIL: doctor reports errors on a GPU machine"; exit 1; }
out=$("$bin" doctor --smoke --json) || { echo "$out"; echo "FAIL: smoke"; exit 1; }
printf '%s\n' "$out" | grep -q '"device": "cuda:0"' || { echo "$out"; echo "FAIL: smoke did not run on cuda:0"; exit 1; }
printf '%s\n' "$out" | grep -q 'nccl world of 1' || { echo "$out"; echo "FAIL: no NCCL allreduce"; exit 1; }
echo "ok: doctor clean, smoke passed on cuda:0"
