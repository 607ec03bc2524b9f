#!/usr/bin/env bash
# The communication figures a user compares runs by (docs/distributed.md, "Reading the
# communication figures", "With ZeRO"), through `trainbox train`, 2 Gloo ranks on CPU:
#   1. bf16 at dist.zero_stage = 1 reduce-scatters in 16 bits as stage 2 does: the same losses
#      bit for bit as stage 2, and about 1.33x fewer bytes than fp32 DDP (it sent exactly fp32
#      DDP's bytes before: a 16-bit all-reduce plus the fp32 all-gather); the start-up names the
#      stage and the compression and the all-gather that caps the ratio;
#   2. a PowerSGD checkpoint's gather of the error feedback is not counted in the window after
#      it: every window of compressed steps sends the same bytes per step;
#   3. the default dist.powersgd.start_step (1000) on a 20-step run is said at start-up;
#   4. stage 3 sends more than fp32 DDP and the summary says so ("… sent (fp32 DDP: …, 1.xx
#      more"), never "0.8x fewer bytes";
#   5. a single process refuses dist.powersgd.rank = 100000 as 2 ranks do (exit 2, one line);
#   6. `trainbox dash` over a none run and a PowerSGD run shows each one's bytes sent, ratio
#      and time waiting.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
claims="$(dirname "$0")/../claims.py"
# 1280 samples, 64 per step over the whole job: 20 steps.
job=("${small[@]}" --set data.synthetic_samples=1280 --set train.epochs=1 --set train.global_batch_size=64
     --set optim.name=adamw --set output.tensorboard=false)
two() { timeout 120 "$bin" train "${job[@]}" --nproc-per-node 2 "$@"; }
# summary_comm RUN_DIR KEY: rank 0's figure of the whole run (metrics.jsonl's summary line).
summary_comm() {
  "$py" -c '
import json, sys
s = [e for e in map(json.loads, open(sys.argv[1] + "/metrics.jsonl")) if e["event"] == "summary"][-1]["comm"]
v = s[sys.argv[2]]
print(v[0] if isinstance(v, list) else v)' "$1" "$2"
}
in_range() { "$py" -c 'import sys; v, lo, hi = map(float, sys.argv[1:]); sys.exit(0 if lo <= v <= hi else 1)' "$@"; }

# --- 1. bf16 at stage 1 = bf16 at stage 2: a 16-bit reduce-scatter ---
for s in 1 2; do
  two --set dist.grad_compression=bf16 --set dist.zero_stage=$s --run-dir "$tmp/b$s" >"$tmp/b$s.out" 2>"$tmp/b$s.err"
  check "2 ranks, bf16, dist.zero_stage = $s: exit 0" test $? = 0 || tail -n 5 "$tmp/b$s.err"
done
check "1. bf16 at stage 1 has stage 2's losses bit for bit (both reduce-scatter in 16 bits)" \
  diff <(losses "$tmp/b1/metrics.jsonl") <(losses "$tmp/b2/metrics.jsonl")
read -r lo hi < <("$claims" bound compression.zero1_bf16_ratio)
r1=$(summary_comm "$tmp/b1" compression_ratio)
echo "#    stage 1 bf16: ${r1}x fewer bytes than fp32 DDP (bound $lo-$hi)"
check "... stage 1 bf16 sends $lo-${hi}x fewer bytes than fp32 DDP (was 1.00x)" in_range "$r1" "$lo" "$hi"
check "... the start-up line names the stage and the compression" \
  grep -q "gradient exchange: 2 ranks, dist.zero_stage = 1, dist.grad_compression = bf16" "$tmp/b1.out" "$tmp/b1.err"
check "... and notes the fp32 all-gather that caps the ratio" \
  grep -q "note: dist.zero_stage = 1 all-gathers the updated fp32 parameters after every step" "$tmp/b1.out" "$tmp/b1.err"

# --- 2. a checkpoint's collectives are not the next window's ---
two --set dist.grad_compression=powersgd --set dist.powersgd.rank=2 --set dist.powersgd.start_step=2 \
  --set train.log_every=5 --set checkpoint.every_steps=10 --run-dir "$tmp/p" >"$tmp/p.out" 2>"$tmp/p.err"
check "2 ranks, powersgd from step 2, a checkpoint every 10 steps: exit 0" test $? = 0 || tail -n 5 "$tmp/p.err"
# Windows 6-10 and 16-20 follow no checkpoint, 11-15 follows step 10's: all the same bytes.
check "2. every window of compressed steps (6-10, 11-15 after a checkpoint, 16-20) sends the same bytes per step" \
  "$py" - "$tmp/p/metrics.jsonl" <<'PY'
import json, sys
w = [(e["step"], e["comm"]["sent_bytes_per_step"][0]) for e in map(json.loads, open(sys.argv[1]))
     if e["event"] == "train" and e["step"] > 5]
print(f"#    windows (step, bytes per step): {w}")
sys.exit(0 if len(w) == 3 and max(b for _, b in w) == min(b for _, b in w) > 0 else 1)
PY
check "... no note about start_step (2 < 20)" bash -c "! grep -q 'PowerSGD never starts' '$tmp/p.out' '$tmp/p.err'"

# --- 3. the default start_step, never reached ---
two --set dist.grad_compression=powersgd --set dist.powersgd.rank=2 --run-dir "$tmp/d" >"$tmp/d.out" 2>"$tmp/d.err"
check "2 ranks, powersgd with the default start_step: exit 0" test $? = 0 || tail -n 5 "$tmp/d.err"
check "3. the start-up says PowerSGD never starts in 20 steps" \
  grep -q "note: dist.powersgd.start_step = 1000 is not before this run's last step (20): PowerSGD never starts" \
  "$tmp/d.out" "$tmp/d.err"

# --- 4. stage 3 sends more than fp32 DDP, and says so ---
"$py" -c 'import random; random.seed(1); w = "the cat sat on a mat and ran far".split()
open("'"$tmp"'/t.txt", "w").write(" ".join(random.choice(w) for _ in range(4000)))'
gpt=(--set model.name=gpt --set data.dataset=text --set data.path="$tmp/t.txt" --set data.text_holdout=0.05
     --set model.n_layer=4 --set model.n_head=2 --set model.n_embd=32 --set model.block_size=16
     --set train.batch_size=2 --set train.eval_batch_size=8 --set train.max_steps=3 --set train.threads=1
     --set train.device=cpu --set output.progress=off --set output.tensorboard=false --set checkpoint.every_epochs=0)
timeout 120 "$bin" train "${gpt[@]}" --set dist.zero_stage=3 --nproc-per-node 2 --run-dir "$tmp/z3" \
  >"$tmp/z3.out" 2>"$tmp/z3.err"
check "2 ranks, GPT at dist.zero_stage = 3: exit 0" test $? = 0 || tail -n 5 "$tmp/z3.err"
r3=$(summary_comm "$tmp/z3" compression_ratio)
grep -h "communication per step" "$tmp/z3.out" | sed 's/^ */#    /'
check "4. stage 3 sent more than fp32 DDP (ratio $r3 < 1)" in_range "$r3" 0 0.99
check "... and the summary line says the bytes and 'more', not a ratio under 1 'fewer'" \
  grep -qE "communication per step \(rank 0\): [0-9.]+ [KMG]?i?B sent \(fp32 DDP: [0-9.]+ [KMG]?i?B, 1\.[0-9]+x more; dist.zero_stage = 3, dist.grad_compression = none\)" \
  "$tmp/z3.out"

# --- 5. the same refusal at every world size ---
expect "5. a single process refuses dist.powersgd.rank = 100000 (exit 2, as 2 ranks do)" 2 \
  'dist.powersgd.rank = 100000 is larger than the smaller side of every matrix' -- \
  timeout 60 "$bin" train "${job[@]}" --set dist.grad_compression=powersgd --set dist.powersgd.rank=100000 \
  --run-dir "$tmp/w1"
check "... in one line and its fix" test "$(wc -l <"$tmp/err")" -le 2

# --- 6. trainbox dash compares the exchange ---
two --run-dir "$tmp/n" >"$tmp/n.out" 2>"$tmp/n.err"
check "2 ranks, no compression: exit 0" test $? = 0 || tail -n 5 "$tmp/n.err"
"$py" - "$bin" "$tmp/n" "$tmp/p" <<'PY'
import http.client, json, subprocess, sys, time
bin_, none_dir, psgd_dir = sys.argv[1:]
p = subprocess.Popen([bin_, "dash", none_dir, psgd_dir, "--port", "0"], stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True, start_new_session=True)
try:
    line = p.stdout.readline()
    if "http://127.0.0.1:" not in line:
        err = p.stderr.read() if p.poll() is not None else ""
        print(f"FAIL 6. trainbox dash printed no URL: {line.strip()} {err[-200:]}")
        sys.exit(1)
    port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
    runs, end = None, time.time() + 15
    while time.time() < end:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/api/state")
        r = c.getresponse()
        body = r.read()
        if r.status != 200:  # 503 until the dashboard's first state (docs/dashboard.md)
            time.sleep(0.2)
            continue
        runs = json.loads(body).get("runs", [])
        if len(runs) == 2 and all(r.get("comm") and r["comm"]["whole_run"] for r in runs):
            break
        time.sleep(0.2)
    comm = [r.get("comm") for r in runs or []]
    print(f"#    dash runs' comm: {comm}")
    ok = (len(comm) == 2 and all(c and c["sent_bytes_per_step"] > 0 and c["wait_s_per_step"] >= 0 for c in comm)
          and comm[0]["compression"] == "none" and comm[1]["compression"] == "powersgd"
          and comm[1]["compression_ratio"] > 2 * comm[0]["compression_ratio"] > 0
          and comm[1]["sent_bytes_per_step"] < comm[0]["sent_bytes_per_step"])
    print(("ok  " if ok else "FAIL") + " 6. trainbox dash shows each run's compression, bytes sent, ratio and time waiting")
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/")
    page = c.getresponse().read().decode()
    shown = "sent/step" in page and "vs fp32 DDP" in page and "waiting/step" in page
    print(("ok  " if shown else "FAIL") + " ... and the page's runs table has those columns")
    sys.exit(0 if ok and shown else 1)
finally:
    p.terminate()
    p.wait(timeout=10)
PY
(($? == 0)) || fail=1
exit $fail
