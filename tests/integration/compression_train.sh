#!/usr/bin/env bash
# dist.grad_compression through `trainbox train` on CPU (Gloo), 2 ranks: a PowerSGD run
# (rank 2, from step 3) resumed from its step-10 checkpoint continues bit-identically (the
# checkpoint's grad_compression.pt carries each rank's error feedback and Q); resumed at a
# world of 1 it resets that state and says so in one line; bf16 with dist.zero_stage = 2
# follows bf16 at stage 0; bad values exit 2 with one line.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
# 1280 samples, 64 per step over the whole job: 20 steps.
job=("${small[@]}" --set data.synthetic_samples=1280 --set train.epochs=1 --set train.global_batch_size=64
     --set optim.name=adamw --set checkpoint.every_steps=10 --set checkpoint.keep=5)
ps=(--set dist.grad_compression=powersgd --set dist.powersgd.rank=2 --set dist.powersgd.start_step=3)
two() { timeout 120 "$bin" train "${job[@]}" --nproc-per-node 2 "$@"; }
# The losses of steps 11-20 of both runs, as printed (repr): bit for bit.
tail_equal() { diff <(losses "$1" | awk '$1 > 10') <(losses "$2" | awk '$1 > 10') >/dev/null &&
  [[ $(losses "$2" | awk '$1 > 10' | wc -l) == 10 ]]; }
tail_differs() { [[ -s $2 ]] && ! tail_equal "$1" "$2"; }

two "${ps[@]}" --run-dir "$tmp/p" >/dev/null 2>"$tmp/p.err"
rc=$?; check "2 ranks, powersgd rank 2 from step 3: exit 0" test $rc = 0; ((rc == 0)) || tail -n 5 "$tmp/p.err"
check "... the checkpoint holds grad_compression.pt, in its manifest" \
  grep -q '"grad_compression.pt"' "$tmp/p/checkpoints/step_10/MANIFEST.json"
two "${ps[@]}" --resume "$tmp/p/checkpoints/step_10" --run-dir "$tmp/r" >/dev/null 2>"$tmp/r.err"
rc=$?; check "resumed from step 10 at 2 ranks: exit 0" test $rc = 0; ((rc == 0)) || grep -m 3 'error' "$tmp/r.err"
check "... steps 11-20 bit-identical to the uninterrupted run" tail_equal "$tmp/p/metrics.jsonl" "$tmp/r/metrics.jsonl"
# Without the state (the file removed from a copy), the same resume must differ: the check can fail.
cp -r "$tmp/p/checkpoints/step_10" "$tmp/nostate" && rm "$tmp/nostate/grad_compression.pt"
"$py" -c '
import hashlib, json, sys
d = sys.argv[1]; m = json.load(open(f"{d}/MANIFEST.json"))
m["files"] = [f for f in m["files"] if f["path"] != "grad_compression.pt"]
text = json.dumps(m); open(f"{d}/MANIFEST.json", "w").write(text)
step = m["step"]
open(f"{d}/COMPLETE", "w").write(f"{step}\nMANIFEST.json sha256 {hashlib.sha256(text.encode()).hexdigest()}\n")' "$tmp/nostate"
two "${ps[@]}" --resume "$tmp/nostate" --run-dir "$tmp/n" >/dev/null 2>"$tmp/n.err"
rc=$?; check "... resumed without grad_compression.pt: exit 0" test $rc = 0; ((rc == 0)) || tail -n 5 "$tmp/n.err"
check "... without grad_compression.pt (removed from a copy) the resume says the state starts afresh" \
  grep -q "holds no gradient compression state" "$tmp/n.err"
check "... and does not match the uninterrupted run (the state matters)" \
  tail_differs "$tmp/p/metrics.jsonl" "$tmp/n/metrics.jsonl"
timeout 120 "$bin" run --standalone -n 1 -- "$bin" train "${job[@]}" "${ps[@]}" \
  --resume "$tmp/p/checkpoints/step_10" --run-dir "$tmp/w1" >"$tmp/w1.out" 2>&1
rc=$?; check "resumed at a world of 1: exit 0 (got $rc)" test $rc = 0
check "... one line saying the state is reset" \
  grep -q "is for 2 ranks, this job has 1: PowerSGD's error feedback and warm-start Q start afresh" "$tmp/w1.out" ||
  tail -n 5 "$tmp/w1.out"

# --- bf16 with the reduce-scatter (stage 2) follows bf16 at stage 0 ---
for s in 0 2; do
  two --set dist.grad_compression=bf16 --set dist.zero_stage=$s --run-dir "$tmp/b$s" >/dev/null 2>"$tmp/b$s.err"
  check "2 ranks, bf16, dist.zero_stage = $s: exit 0" test $? = 0 || tail -n 5 "$tmp/b$s.err"
done
check "bf16 at stage 2 follows bf16 at stage 0 (per-step loss within 1e-6)" \
  same_losses "$tmp/b0/metrics.jsonl" "$tmp/b2/metrics.jsonl" 1e-6

# --- bad input: one line, exit 2 ---
expect "an unknown method: exit 2" 2 'dist.grad_compression = "int8" is not allowed' -- \
  "$bin" train "${job[@]}" --set dist.grad_compression=int8 --run-dir "$tmp/bad1"
expect "dist.powersgd.rank = 0: exit 2" 2 'dist.powersgd.rank = 0 is not allowed' -- \
  "$bin" train "${job[@]}" "${ps[@]}" --set dist.powersgd.rank=0 --run-dir "$tmp/bad2"
expect "dist.powersgd.start_step = 1: exit 2" 2 'dist.powersgd.start_step = 1 is not allowed' -- \
  "$bin" train "${job[@]}" "${ps[@]}" --set dist.powersgd.start_step=1 --run-dir "$tmp/bad3"
expect "powersgd with dist.zero_stage = 2: exit 2" 2 'does not combine with dist.zero_stage = 2' -- \
  "$bin" train "${job[@]}" "${ps[@]}" --set dist.zero_stage=2 --run-dir "$tmp/bad4"
expect "a rank larger than every matrix's smaller side (64 of the MLP's [64, 784]): exit 2" 2 \
  'dist.powersgd.rank = 65 is larger than the smaller side of every matrix' -- \
  two "${ps[@]}" --set dist.powersgd.rank=65 --run-dir "$tmp/bad5"
exit $fail
