#!/usr/bin/env bash
# trainbox train --plan against the run it plans (docs/trainer.md, "Memory plan"; issue 43: the
# plan measured the training step alone and said "fits" for a job whose evaluation needed 2.2x
# as much). For each configuration — ZeRO stages 0-3, PowerSGD and bf16 compression, evaluation
# batches that do and do not dominate, activation checkpointing — the plan's total (its largest
# phase) over the largest rank_peak_allocated_bytes the same job's run records in metrics.jsonl
# (the counting CPU allocator: every tensor byte of the process) must lie within the bound of
# claim memory.plan_vs_peak. A tiny GPT on a few KB of text: seconds per run.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
claims="$(dirname "$0")/../claims.py"
read -r lo hi < <("$claims" bound memory.plan_vs_peak)

"$py" -c 'import random; random.seed(1); w = ["the", "cat", "sat", "on", "a", "mat", "and", "ran"]
open("'"$tmp"'/t.txt", "w").write(" ".join(random.choice(w) for _ in range(20000)))'
gpt=(--set model.name=gpt --set data.dataset=text --set data.path="$tmp/t.txt" --set model.n_layer=3
     --set model.n_head=2 --set model.n_embd=64 --set model.block_size=64 --set train.batch_size=8
     --set optim.name=adamw --set train.device=cpu --set train.threads=1 --set output.progress=off
     --set output.tensorboard=false --set train.deterministic=true --set train.epochs=1 --set train.max_steps=6
     --set train.log_every=1)

# NAME WORLD SETTINGS…: the plan at WORLD ranks, then the job at WORLD ranks, then the ratio.
n=0
compare() {
  local name=$1 world=$2; shift 2
  local -a launch=()
  [[ $world -gt 1 ]] && launch=(--nproc-per-node "$world")
  n=$((n + 1))
  if ! "$bin" train "${gpt[@]}" "$@" --plan --world "$world" --json >"$tmp/plan-$n.json" 2>"$tmp/plan-$n.err"; then
    echo "FAIL $name: --plan exited $?"; tail -n 5 "$tmp/plan-$n.err"; fail=1; return
  fi
  if ! timeout 300 "$bin" train "${launch[@]}" "${gpt[@]}" "$@" --run-dir "$tmp/run-$n" >"$tmp/run-$n.out" 2>&1; then
    echo "FAIL $name: the run exited $?"; tail -n 5 "$tmp/run-$n.out"; fail=1; return
  fi
  check "$name: plan / measured peak within [$lo, $hi]" "$py" - "$tmp/plan-$n.json" "$tmp/run-$n/metrics.jsonl" \
    "$lo" "$hi" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))["per_rank"]
s = [e for e in map(json.loads, open(sys.argv[2])) if e["event"] == "summary"][-1]["memory"]
assert s["counter"] == "cpu_allocator", s
peak = max(s["rank_peak_allocated_bytes"])
ratio = plan["total_bytes"] / peak
phase = plan.get("peak_phase", "training step (the only phase)")
print(f"#    plan {plan['total_bytes']:>10} B (peak: {phase}), measured {peak:>10} B "
      f"(ranks {s['rank_peak_allocated_bytes']}), plan / measured {ratio:.3f}")
sys.exit(0 if float(sys.argv[3]) <= ratio <= float(sys.argv[4]) else 1)
PY
}

# One process: the evaluation dominates (128 sequences of 64 tokens), or the step does.
compare "stage 0, eval batch 128" 1 --set train.eval_batch_size=128
compare "stage 0, eval batch 4" 1 --set train.eval_batch_size=4
compare "activation checkpointing, eval batch 4" 1 --set model.activation_checkpointing=blocks \
  --set train.eval_batch_size=4
# Two ranks: each ZeRO stage, PowerSGD (compressing from step 2) and bf16.
compare "2 ranks, stage 1" 2 --set dist.zero_stage=1 --set train.eval_batch_size=4
compare "2 ranks, stage 2" 2 --set dist.zero_stage=2 --set train.eval_batch_size=4
compare "2 ranks, stage 3, eval batch 64" 2 --set dist.zero_stage=3 --set train.eval_batch_size=64
compare "2 ranks, powersgd" 2 --set dist.grad_compression=powersgd --set dist.powersgd.start_step=2 \
  --set train.eval_batch_size=4
compare "2 ranks, stage 2 + bf16" 2 --set dist.zero_stage=2 --set dist.grad_compression=bf16 \
  --set train.eval_batch_size=4
exit $fail
