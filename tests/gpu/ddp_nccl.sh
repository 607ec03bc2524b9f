#!/usr/bin/env bash
# GPU: data parallelism over NCCL. A world of 1 under trainbox run (store, NCCL group, DDP's
# bucketed allreduce) gives the single-process run's per-step losses; 2 ranks on one GPU run
# when NCCL allows it (same losses as 1 rank with the combined batch), else the test says
# why NCCL refused and skips that case. Skips (77) without a GPU.
set -uo pipefail
source "$(dirname "$0")/gpu_lib.sh"
job=("${gpu_job[@]}" --set train.epochs=1)
"$bin" train "${job[@]}" --run-dir "$tmp/one" --quiet >"$tmp/one.out" 2>&1 || { cat "$tmp/one.out"; exit 1; }
timeout 300 "$bin" run --standalone --nproc-per-node 1 -- "$bin" train "${job[@]}" --run-dir "$tmp/w1" --json \
  >"$tmp/w1.json" 2>"$tmp/w1.out"
check "NCCL world of 1: exit 0" test $? = 0
check "... ran on NCCL" grep -q 'rank 0 of 1, nccl' "$tmp/w1.out"
check "... per-step losses equal the single-process run's (within 1e-5)" same_losses "$tmp/one/metrics.jsonl" "$tmp/w1/metrics.jsonl" 1e-5

# 2 ranks sharing cuda:0 (an explicit index: "auto" would fall back to the CPU)
"$bin" train "${job[@]}" --set train.batch_size=64 --run-dir "$tmp/b64" --quiet >/dev/null 2>&1
timeout 300 "$bin" run --standalone --nproc-per-node 2 -- "$bin" train "${job[@]}" --device cuda:0 --run-dir "$tmp/w2" \
  --quiet >"$tmp/w2.out" 2>&1
rc=$?
if ((rc != 0)) && grep -qiE 'duplicate GPU|same (CUDA )?device|invalid usage' "$tmp/w2.out"; then
  echo "SKIP 2 ranks on one GPU: NCCL refuses it: $(grep -iE 'duplicate GPU|same (CUDA )?device|invalid usage' "$tmp/w2.out" | head -1 | cut -c1-200)"
else
  check "2 ranks on one GPU: exit 0 (got $rc)" test $rc = 0 || tail -20 "$tmp/w2.out"
  check "... per-step losses equal 1 rank with batch 64 (within 1e-4)" same_losses "$tmp/b64/metrics.jsonl" "$tmp/w2/metrics.jsonl" 1e-4
fi
exit $fail
