#!/usr/bin/env bash
# trainbox train --plan (docs/trainer.md, "Memory plan") and activation checkpointing end to end:
#   - the plan's parameter count is Python torch's for the same nanoGPT (bench/peers/models.py),
#     its model state the fp32 AdamW formula (16 B/param), its total the sum of its rows;
#   - nothing is trained and no run dir is written; --budget names a change or says none fits
#     (exit 1), a fitting budget exits 0; bad values are one line, exit 2;
#   - a run with model.activation_checkpointing = "blocks" and dropout logs the losses of the run
#     without it, bit for bit, and records each rank's measured peak next to the plan's model state.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
src=${TRAINBOX_SOURCE_DIR:?}

"$py" -c 'import random; random.seed(1); w = ["the", "cat", "sat", "on", "a", "mat", "and", "ran"]
open("'"$tmp"'/t.txt", "w").write(" ".join(random.choice(w) for _ in range(6000)))'
gpt=(--set model.name=gpt --set data.dataset=text --set data.path="$tmp/t.txt" --set model.n_layer=3
     --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32 --set train.batch_size=8
     --set optim.name=adamw --set train.device=cpu --set train.threads=1 --set output.progress=off
     --set train.deterministic=true)

# --- the plan, as JSON ---
expect plan-json 0 '"per_rank"' -- "$bin" train "${gpt[@]}" --plan --json --run-dir "$tmp/never"
cp "$tmp/out" "$tmp/plan.json"
check "no run dir written by --plan" test ! -e "$tmp/never"
check "the plan's figures: torch's parameter count, 16 B/param of model state, total = sum of rows" \
  "$py" - "$tmp/plan.json" "$src/bench/peers" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
j = json.load(open(sys.argv[1])); r = j["per_rank"]
from models import GPT  # bench/peers/models.py: nanoGPT's shape, as trainbox's gpt
import torch
m = GPT(vocab_size=256, block_size=32, n_layer=3, n_head=2, n_embd=32, dropout=0.0, bias=True)
n = sum(p.numel() for p in m.parameters())
print(f"#    plan: {j['parameters']} parameters, torch: {n}; activations {r['activations_bytes']} B")
assert j["parameters"] == n, (j["parameters"], n)
assert r["parameters_bytes"] == 4 * n and r["gradients_bytes"] == 4 * n and r["optimizer_state_bytes"] == 8 * n
assert r["activations_bytes"] > 0
held = sum(r[k] for k in ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "compression_state_bytes",
                          "buffers_bytes", "data_bytes"))
assert r["persistent_bytes"] == held, (r["persistent_bytes"], held)
# every phase: what is held throughout plus its own; the total is the largest (issue 43)
names = [p["name"] for p in r["phases"]]
assert names == ["training step", "evaluation", "checkpoint save"], names
assert all(p["bytes"] == held + p["own_bytes"] for p in r["phases"])
assert r["phases"][0]["own_bytes"] >= r["activations_bytes"]
assert r["total_bytes"] == max(p["bytes"] for p in r["phases"])
assert r["peak_phase"] == max(r["phases"], key=lambda p: p["bytes"])["name"]
PY

# --- the text form, budgets ---
expect plan-text 0 'activations .*measured: one forward/backward at micro-batch 8 on cpu' -- \
  "$bin" train "${gpt[@]}" --plan
expect plan-budget-fits 0 'fits the budget of 1.0 GiB \(1073741824 bytes\) per rank \(.* left at its peak, the ' -- \
  "$bin" train "${gpt[@]}" --plan --budget 1GiB
expect plan-phases 0 '^  evaluation .*forward at train.eval_batch_size' -- "$bin" train "${gpt[@]}" --plan
expect plan-budget-decimal 0 'budget of 1.5 GiB \(1610612736 bytes\)' -- "$bin" train "${gpt[@]}" --plan --budget 1.5GiB
expect plan-budget-gb-is-gib 0 'budget of 8.0 GiB \(8589934592 bytes\)' -- "$bin" train "${gpt[@]}" --plan --budget 8gb
expect plan-budget-fraction-needs-unit 2 '--budget: must be a byte count .*got .1\.5.' -- \
  "$bin" train "${gpt[@]}" --plan --budget 1.5
expect plan-budget-help 0 '8GB = 8GiB = 8 x 2\^30 bytes' -- "$bin" train --help
total=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["per_rank"]["total_bytes"])' "$tmp/plan.json")
state=$("$py" -c 'import json,sys; r=json.load(open(sys.argv[1]))["per_rank"]; print(r["parameters_bytes"]+r["gradients_bytes"]+r["optimizer_state_bytes"])' "$tmp/plan.json")
# the evaluation (train.eval_batch_size: its default of 1000, the 67 sequences of the test split) is
# the peak here: the cheapest change is a smaller evaluation batch; with a batch of 1 the step is
# the peak, and the change is one of the step's
expect plan-budget-eval-change 1 'the evaluation needs .*the cheapest change that fits: train.eval_batch_size = ' -- \
  "$bin" train "${gpt[@]}" --plan --budget $((total - 1))
"$bin" train "${gpt[@]}" --set train.eval_batch_size=1 --plan --json >"$tmp/plan1.json"
total1=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["per_rank"]["total_bytes"])' "$tmp/plan1.json")
expect plan-budget-change 1 'the training step needs .*cheapest change that fits: (model.activation_checkpointing|train.batch_size)' -- \
  "$bin" train "${gpt[@]}" --set train.eval_batch_size=1 --plan --budget $((total1 - 1))
expect plan-budget-none 1 'no change here fits; the smallest is' -- "$bin" train "${gpt[@]}" --plan --budget $((state / 2))
expect plan-world-4 0 'world 4' -- "$bin" train "${gpt[@]}" --plan --world 4
expect plan-bad-budget 2 'budget.*8XB|8XB' -- "$bin" train "${gpt[@]}" --plan --budget 8XB
expect plan-bad-world 2 'world' -- "$bin" train "${gpt[@]}" --plan --world 0
expect budget-without-plan 2 '--budget applies to --plan only' -- "$bin" train "${gpt[@]}" --budget 1G
expect bad-policy 2 'model.activation_checkpointing = "layers" is not allowed: one of: none, blocks, every_k' -- \
  "$bin" train "${gpt[@]}" --set model.activation_checkpointing=layers --plan
lines=$(wc -l <"$tmp/err")
check "a bad policy is one line (got $lines)" test "$lines" -le 2

# --- training with checkpointing = the losses without it, bit for bit; the memory record ---
run=(--set model.dropout=0.1 --set train.max_steps=6 --set train.log_every=1 --set train.epochs=1)
expect train-plain 0 '' -- "$bin" train "${gpt[@]}" "${run[@]}" --run-dir "$tmp/plain"
expect train-blocks 0 '' -- "$bin" train "${gpt[@]}" "${run[@]}" --set model.activation_checkpointing=blocks \
  --run-dir "$tmp/blocks"
check "checkpointed losses equal the plain run's bit for bit" same_losses "$tmp/plain/metrics.jsonl" \
  "$tmp/blocks/metrics.jsonl" 0
check "the summary records the measured peak next to the plan's model state" "$py" - "$tmp/blocks/metrics.jsonl" \
  "$state" <<'PY'
import json, sys
s = [e for e in map(json.loads, open(sys.argv[1])) if e["event"] == "summary"][-1]["memory"]
print(f"#    {s}")
assert s["counter"] == "cpu_allocator" and s["plan_model_state_bytes_per_rank"] == int(sys.argv[2])
assert len(s["rank_peak_allocated_bytes"]) == 1 and s["rank_peak_allocated_bytes"][0] >= int(sys.argv[2])
assert s["rank_peak_rss_bytes"][0] > s["rank_peak_allocated_bytes"][0] > 0
PY
exit $fail
