#!/usr/bin/env bash
# dist.zero_stage through `trainbox train` on CPU (Gloo), 2 ranks: stages 1, 2 and 3 follow plain
# DDP step for step (also with accumulation and clipping); the summary's model-state bytes
# per rank match the formula; a stage-2 and a stage-3 checkpoint resume as 1 process with
# stage 0, and a stage-0 one as 2 ranks with stage 2, on the uninterrupted runs' losses; bad
# values exit 2. (The MLP marks no units: stage 3 gathers it for the whole step and says so;
# the units' gathering is zero_check's.)
# Sharded checkpoints (docs/distributed.md, "Sharded checkpoints"): written at world 4 with
# stage 3, resumed at 4 (bit-identical losses), then 4 -> 2 -> 3 -> 1 (stage 3 -> 2, 1, 0) on the
# uninterrupted run's losses; `trainbox export` of a sharded checkpoint equals plain DDP's;
# a damaged or missing shard, a manifest that doesn't match its shards, and shards from two
# steps are each named and skipped for the previous checkpoint. Peak memory per rank (tensor
# bytes and RSS) falls from stage 0 to stage 2 to stage 3.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
# 1280 samples, 64 per step over the whole job: 20 steps; AdamW (the state ZeRO shards).
job=("${small[@]}" --set data.synthetic_samples=1280 --set train.epochs=1 --set train.global_batch_size=64
     --set optim.name=adamw --set checkpoint.every_steps=10 --set checkpoint.keep=5)
two() { timeout 120 "$bin" train "${job[@]}" --nproc-per-node 2 --json "$@"; }
# same_steps A B TOL [MIN]: the train losses of the steps both logged (at least MIN, default 10), within TOL relative.
same_steps() {
  "$py" - "$@" <<'PY'
import json, sys
def losses(p): return {e["step"]: e["loss"] for e in map(json.loads, open(p)) if e["event"] == "train"}
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
common = sorted(set(a) & set(b))
worst = max((abs(a[s] - b[s]) / max(1, abs(a[s])) for s in common), default=float("nan"))
print(f"#    {len(common)} common steps ({common[0] if common else '-'}..{common[-1] if common else '-'}), largest difference {worst:.2e} (tolerance {tol:g})")
sys.exit(0 if len(common) >= int(sys.argv[4] if len(sys.argv) > 4 else 10) and worst <= tol else 1)
PY
}
# The bounds, from the claims table (tests/claims.toml): per-step losses (zero.parity_losses) and
# the model-state formula (zero.model_state_formula).
claims="$(dirname "$0")/../claims.py"
loss_tol=$("$py" "$claims" bound zero.parity_losses) state_tol=$("$py" "$claims" bound zero.model_state_formula)
for s in 0 1 2 3; do
  two --set dist.zero_stage=$s --run-dir "$tmp/z$s" >"$tmp/z$s.json" 2>"$tmp/z$s.err"
  check "2 ranks, dist.zero_stage = $s: exit 0" test $? = 0 || tail -n 5 "$tmp/z$s.err"
done
# 1e-6: Gloo reduces the same buckets in both (docs/distributed.md "Sharding (ZeRO)"); measured 0
check "stage 3 on a model without units says so" grep -q 'dist.zero_stage = 3 found no units' "$tmp/z3.err"
for s in 1 2 3; do
  check "stage $s follows plain DDP (per-step loss within $loss_tol)" same_losses "$tmp/z0/metrics.jsonl" "$tmp/z$s/metrics.jsonl" "$loss_tol"
done
acc=(--set train.accumulate=2 --set train.clip_grad_norm=0.5)
two "${acc[@]}" --set dist.zero_stage=0 --run-dir "$tmp/a0" >/dev/null 2>"$tmp/a0.err"
two "${acc[@]}" --set dist.zero_stage=2 --run-dir "$tmp/a2" >/dev/null 2>"$tmp/a2.err"
check "stage 2 with accumulate = 2 and clipping follows plain DDP (within $loss_tol)" \
  same_losses "$tmp/a0/metrics.jsonl" "$tmp/a2/metrics.jsonl" "$loss_tol"

# --- model-state bytes per rank: the trainer's accounting against the formula (fp32 AdamW) ---
state_formula() {
  "$py" - "$1" "$state_tol" <<'PY'
import json, sys
tol = float(sys.argv[2])
d = [json.load(open(f"{sys.argv[1]}/z{s}.json")) for s in range(4)]
psi = d[0]["model_state"]["params"] / 4
ok = True
for s, per in enumerate((16, 12, 10, 8)):
    got, want, parts = d[s]["model_state_bytes"], per * psi, d[s]["model_state"]
    print(f"#    stage {s}: {got} B/rank {parts}, formula {want:.0f} ({100 * (got - want) / want:+.2f} %)")
    ok &= abs(got - want) <= tol * want and parts["zero_stage"] == s
sys.exit(0 if ok else 1)
PY
}
check "model_state_bytes: stage 0 = 16, stage 1 = 4+4+8/2, stage 2 = 4+12/2, stage 3 = 16/2 bytes per parameter (within $state_tol)" \
  state_formula "$tmp"

# --- peak memory per rank falls with the stage (a GPT of 12 blocks, its units, 2 ranks, 2 steps) ---
# The trainer's exact count of live tensor bytes (the counting CPU allocator) and the process's
# peak RSS: stage 3 must save at least half of what its model state saves, in both (the rest is
# the transient: two units gathered, at most three whole gradient buckets, activations).
"$py" -c 'import random; random.seed(1); w = "the cat sat on a mat and ran far".split()
open("'"$tmp"'/t.txt", "w").write(" ".join(random.choice(w) for _ in range(20000)))'
gpt=(--set model.name=gpt --set data.dataset=text --set data.path="$tmp/t.txt" --set data.text_holdout=0.05
     --set model.n_layer=12 --set model.n_head=8 --set model.n_embd=384 --set model.block_size=64
     --set train.batch_size=2 --set train.eval_batch_size=2 --set train.max_steps=2 --set optim.name=adamw
     --set train.threads=1 --set train.device=cpu --set output.progress=off --set output.tensorboard=false)
# RSS under one malloc policy: trainbox maps blocks of 2 MiB or more on their own at stages 2 and 3
# and keeps them in the heap at 0 and 1 (process_setup.cpp); the user's own setting wins, so the
# same MALLOC_MMAP_THRESHOLD_ for every stage compares the stages, not the policies.
for s in 0 2 3; do
  MALLOC_MMAP_THRESHOLD_=2097152 \
  timeout 120 "$bin" train "${gpt[@]}" --set dist.zero_stage=$s --nproc-per-node 2 --json --run-dir "$tmp/m$s" \
    >"$tmp/m$s.json" 2>"$tmp/m$s.err" || { echo "FAIL memory run, stage $s"; tail -n 5 "$tmp/m$s.err"; fail=1; }
done
check "peak memory per rank: stage 3 < stage 2 < stage 0 in tensor bytes; stage 3 saves at least half its model-state saving in tensor bytes and in RSS" \
  "$py" - "$tmp" <<'PY'
import json, sys
d = {s: json.load(open(f"{sys.argv[1]}/m{s}.json")) for s in (0, 2, 3)}
state = {s: d[s]["model_state_bytes"] for s in d}
alloc = {s: max(d[s]["memory"]["rank_peak_allocated_bytes"]) for s in d}
rss = {s: max(d[s]["memory"]["rank_peak_rss_bytes"]) for s in d}
for s in d:
    print(f"#    stage {s}: model state {state[s] / 2**20:.0f} MiB, peak tensors {alloc[s] / 2**20:.0f} MiB, "
          f"peak RSS {rss[s] / 2**20:.0f} MiB")
half = 0.5 * (state[0] - state[3])
sys.exit(0 if alloc[3] < alloc[2] < alloc[0] and alloc[3] <= alloc[0] - half and rss[3] <= rss[0] - half else 1)
PY

# --- resume at another world size and stage: the uninterrupted run's losses ---
timeout 120 "$bin" train "${job[@]}" --resume "$tmp/z2/checkpoints/step_10" --run-dir "$tmp/r1" >"$tmp/r1.out" 2>&1
check "stage 2 x 2 ranks, step 10 -> 1 process, stage 0: resumes (exit 0)" test $? = 0 || tail -n 5 "$tmp/r1.out"
check "... on the uninterrupted run's losses (steps 11-20, within 1e-6)" same_steps "$tmp/z2/metrics.jsonl" "$tmp/r1/metrics.jsonl" 1e-6
timeout 120 "$bin" train "${job[@]}" --resume "$tmp/z3/checkpoints/step_10" --run-dir "$tmp/r3" >"$tmp/r3.out" 2>&1
check "stage 3 x 2 ranks, step 10 -> 1 process, stage 0: resumes (exit 0)" test $? = 0 || tail -n 5 "$tmp/r3.out"
check "... on the uninterrupted run's losses (steps 11-20, within 1e-6)" same_steps "$tmp/z3/metrics.jsonl" "$tmp/r3/metrics.jsonl" 1e-6
two --set dist.zero_stage=2 --resume "$tmp/z0/checkpoints/step_10" --run-dir "$tmp/r2" >/dev/null 2>"$tmp/r2.err"
check "stage 0 step 10 -> 2 ranks, stage 2: resumes (exit 0)" test $? = 0 || tail -n 5 "$tmp/r2.err"
check "... on the uninterrupted run's losses (within 1e-6)" same_steps "$tmp/z0/metrics.jsonl" "$tmp/r2/metrics.jsonl" 1e-6

# --- sharded checkpoints: world 4, stage 2, resumed at 4, then 4 -> 2 -> 3 -> 1 ---
# 960 samples, 48 a step (splits over 4, 3, 2 and 1 ranks): 20 steps; buckets of 0.001 MiB, so
# the MLP's 4 parameters fall in 2 buckets whose shards split parameters at other places at
# every world size.
sj=("${small[@]}" --set data.synthetic_samples=960 --set train.epochs=1 --set train.global_batch_size=48
    --set optim.name=adamw --set checkpoint.every_steps=5 --set checkpoint.keep=5
    --set dist.first_bucket_mb=0.001 --set dist.bucket_cap_mb=0.001)
at() { local n=$1; shift; timeout 120 "$bin" train "${sj[@]}" --nproc-per-node "$n" "$@"; }
# The chain starts at stage 3 (the MLP marks no units: all of it is the rest, one more bucket):
# its shards are the same BucketShard layout as stages 1 and 2, so they reshard the same way.
at 4 --set dist.zero_stage=3 --run-dir "$tmp/s4" >/dev/null 2>"$tmp/s4.err"
check "4 ranks, stage 3, checkpoints every 5 steps: exit 0" test $? = 0 || tail -n 5 "$tmp/s4.err"
c=$tmp/s4/checkpoints/step_10
check "... step_10 holds rank_0..3.{params.pt,optim.pt,json} and buffers.pt, no model.pt/optimizer.pt" \
  bash -c "ls $c/rank_{0,1,2,3}.{params.pt,optim.pt,json} $c/buffers.pt >/dev/null && ! ls $c/model.pt $c/optimizer.pt 2>/dev/null"
check "... its manifest records the layout: world 4, stage 3, its buckets, every file's sha256" "$py" -c '
import json, sys
m = json.load(open(sys.argv[1] + "/MANIFEST.json")); sh = m["sharding"]
files = {f["path"] for f in m["files"]}
print("#    world", sh["world_size"], "stage", sh["zero_stage"], "buckets", [(b["numel"], b["padded"], [p["name"] for p in b["params"]]) for b in sh["buckets"]])
sys.exit(0 if sh["world_size"] == 4 and sh["zero_stage"] == 3 and len(sh["buckets"]) >= 1 and sh["step"] == 10
         and {f"rank_{r}.{k}" for r in range(4) for k in ("params.pt", "optim.pt", "json")} <= files else 1)' "$c"
at 4 --set dist.zero_stage=3 --resume "$tmp/s4/checkpoints/step_10" --run-dir "$tmp/s4r" >/dev/null 2>"$tmp/s4r.err"
check "step_10 -> 4 ranks, stage 3 (exit 0): steps 11-20 bit-identical to the uninterrupted run's" \
  same_steps "$tmp/s4/metrics.jsonl" "$tmp/s4r/metrics.jsonl" 0
# 1e-6: the resharded state is a copy, bit for bit; what differs is the float sum of the
# gradients over 2 or 3 ranks instead of 4 (another order; the same bound as 2 ranks -> 1 above)
at 2 --set dist.zero_stage=2 --resume "$tmp/s4/checkpoints/step_5" --run-dir "$tmp/c2" >/dev/null 2>"$tmp/c2.err"
check "step_5 (world 4, stage 3) -> 2 ranks, stage 2: exit 0, steps 6-20 on the uninterrupted run's losses (1e-6)" \
  same_steps "$tmp/s4/metrics.jsonl" "$tmp/c2/metrics.jsonl" 1e-6
at 3 --set dist.zero_stage=1 --resume "$tmp/c2/checkpoints/step_10" --run-dir "$tmp/c3" >/dev/null 2>"$tmp/c3.err"
check "... its step_10 (world 2) -> 3 ranks, stage 1: steps 11-20 on the uninterrupted run's losses (1e-6)" \
  same_steps "$tmp/s4/metrics.jsonl" "$tmp/c3/metrics.jsonl" 1e-6
# (a resumed run does not save the step it resumed at again: c3 has step_15 and step_20)
timeout 120 "$bin" train "${sj[@]}" --resume "$tmp/c3/checkpoints/step_15" --run-dir "$tmp/c1" >/dev/null 2>"$tmp/c1.err"
check "... its step_15 (world 3, stage 1) -> 1 process, stage 0: steps 16-20 on the uninterrupted run's losses (1e-6)" \
  same_steps "$tmp/s4/metrics.jsonl" "$tmp/c1/metrics.jsonl" 1e-6 5

# --- trainbox export consolidates a sharded checkpoint: the weights of plain DDP's ---
"$bin" export "$tmp/z2/checkpoints/step_20" "$tmp/z2.safetensors" >"$tmp/ex2.out" 2>&1
ex2=$?
"$bin" export "$tmp/z0/checkpoints/step_20" "$tmp/z0.safetensors" >"$tmp/ex0.out" 2>&1
check "trainbox export of a sharded checkpoint (stage 2 x 2 ranks): exit 0" test "$ex2" = 0 || tail -n 3 "$tmp/ex2.out"
# stage 2 and plain DDP train the same weights (losses measured equal above): within 1e-6
check "... its tensors equal the plain DDP run's export (within 1e-6)" "$py" - "$tmp/z0.safetensors" "$tmp/z2.safetensors" <<'PY'
import json, struct, sys
from array import array
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        lo, hi = v["data_offsets"]; a = array("f"); a.frombytes(b[8 + n + lo:8 + n + hi]); out[k] = a
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
worst = max(max((abs(x - y) for x, y in zip(a[k], b[k])), default=0) for k in a) if a.keys() == b.keys() else float("inf")
print(f"#    {len(a)} tensors, largest difference {worst:.2e}")
sys.exit(0 if a.keys() == b.keys() and worst <= 1e-6 else 1)
PY

# --- damaged sharded checkpoints: named, skipped for the previous one (step_10), nothing half-loaded ---
# tamper KIND DIR: damage step_20 of run dir DIR; the manifest (and COMPLETE) rewritten where
# the damage is one SHA-256 would not see, so the sharding checks themselves are what finds it.
tamper() {
  "$py" - "$@" <<'PY'
import hashlib, json, os, shutil, sys
kind, run = sys.argv[1], sys.argv[2]
d, old = f"{run}/checkpoints/step_20", f"{run}/checkpoints/step_10"
def rehash(m):
    for f in m["files"]:
        data = open(f"{d}/{f['path']}", "rb").read()
        f["bytes"], f["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    text = json.dumps(m, indent=2) + "\n"
    open(f"{d}/MANIFEST.json", "w").write(text)
    open(f"{d}/COMPLETE", "w").write(f"20\nMANIFEST.json sha256 {hashlib.sha256(text.encode()).hexdigest()}\n")
m = json.load(open(f"{d}/MANIFEST.json"))
if kind == "damaged":  # one flipped byte in rank 1's optimizer shard
    p = f"{d}/rank_1.optim.pt"; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0xFF; open(p, "wb").write(b)
elif kind == "missing":
    os.remove(f"{d}/rank_1.params.pt")
elif kind == "layout":  # the manifest says 3 ranks; the checkpoint has 2 ranks' shards
    sh = m["sharding"]; sh["world_size"] = 3
    for b in sh["buckets"]:
        b["shard_size"] = (b["numel"] + 2) // 3; b["padded"] = 3 * b["shard_size"]
    rehash(m)
elif kind == "steps":  # rank 1's shard from step_10, with a manifest that hashes it
    for k in ("params.pt", "optim.pt", "json"): shutil.copy(f"{old}/rank_1.{k}", f"{d}/rank_1.{k}")
    rehash(m)
PY
}
for case in "damaged|rank_1.optim.pt: contents changed" "missing|rank_1.params.pt: missing" \
    "layout|rank_2.params.pt: missing: the manifest's layout has 3 ranks" \
    "steps|rank_1.json: does not match the manifest: written at step 10, the manifest is step 20 \(shards from two different steps\)"; do
  kind=${case%%|*} pattern=${case#*|}
  cp -a "$tmp/z2" "$tmp/f_$kind"
  tamper "$kind" "$tmp/f_$kind"
  timeout 120 "$bin" train "${job[@]}" --set train.max_steps=12 --resume auto --run-dir "$tmp/f_$kind" >"$tmp/f_$kind.out" 2>&1
  rc=$?
  check "sharded step_20, $kind: resumes (exit 0), naming it: /checkpoint step_20 is damaged: $pattern/" \
    grep -qE "checkpoint step_20 is damaged: .*$pattern" "$tmp/f_$kind.out" || { echo "#    exit $rc"; tail -n 4 "$tmp/f_$kind.out"; }
  check "... falls back to step_10 (1 process, stage 0): steps 11-12 on the uninterrupted run's losses (1e-6)" \
    bash -c "grep -q 'falling back to .*step_10' '$tmp/f_$kind.out' && test $rc = 0" &&
    same_steps "$tmp/z2/metrics.jsonl" "$tmp/f_$kind/metrics.jsonl" 1e-6
  rm -rf "$tmp/f_$kind"
done

# --- bad input: one line, exit 2; a world of 1 says the stage does nothing ---
expect "dist.zero_stage = 7: exit 2" 2 'dist.zero_stage = 7 is not allowed' -- \
  "$bin" train "${job[@]}" --set dist.zero_stage=7 --run-dir "$tmp/bad7"
expect "dist.zero_stage = 3 with train.cuda_graphs: exit 2" 2 'cuda_graphs = true is not supported with dist.zero_stage = 3' -- \
  "$bin" train "${job[@]}" --set dist.zero_stage=3 --set train.cuda_graphs=true --run-dir "$tmp/bad3"
expect "dist.zero_stage = 1 with train.cuda_graphs: exit 2" 2 'cuda_graphs = true is not supported with dist.zero_stage' -- \
  "$bin" train "${job[@]}" --set dist.zero_stage=1 --set train.cuda_graphs=true --run-dir "$tmp/badg"
expect "dist.zero_stage = 2 on a world of 1: trains and says it does nothing" 0 'does nothing with a world of 1' -- \
  "$bin" train "${job[@]}" --set dist.zero_stage=2 --set train.max_steps=2 --run-dir "$tmp/w1"
exit $fail
