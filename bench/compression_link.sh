#!/usr/bin/env bash
# Benchmark: gradient compression over a throttled link (issue 36; docs/distributed.md,
# "Reading the communication figures"). Two network-namespace hosts (scripts/netns-hosts), one
# rank each, Gloo, 1 thread a rank; the link shaped with tc tbf on both hosts' eth0.
# The model: a GPT of 4 layers of 512 (12.7M parameters, 51 MB of fp32 gradient), vocab 256,
# context 32, batch 1 a rank — few tokens a step, so that at RATE (default 150 Mbit/s) the
# uncompressed exchange (51 MB a step each way) takes about 8x the step's compute, as a 10 GbE
# link is for a GPU step. Runs, interleaved REPEAT times (default 2):
#   trainbox train, dist.grad_compression = none | bf16 | powersgd (rank 4, start_step 2)
#   Python DDP (bench/peers/compress_peer.py) with no hook | bf16_compress_hook | powerSGD_hook
#   (rank 4, start_powerSGD_iter 2), the same model, link and steps;
#   trainbox train none | bf16 | powersgd on the unthrottled link (what compression costs where
#   it does not help).
# Figures: the median step time after the first WARMUP steps (trainbox: metrics.jsonl's
# per-step rate; Python: its own clock around each step), as ratios; the test loss after STEPS
# steps (trainbox) and the last steps' mean train loss (both); the bytes on the wire per step
# (/proc/net/dev of both eth0: over the job, divided by the steps, and over the steady steps
# alone, between rank 0's logging of step WARMUP and of the last) and the run's own report.
# Root only (network namespaces). Prints a table and one `#json` line.
#   sudo bench/compression_link.sh [BUILD_DIR]     RATE=150mbit STEPS=10 REPEAT=2 (OURS=…, THEIRS=…: subsets)
set -uo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
rate=${RATE:-150mbit}; steps=${STEPS:-10}; repeat=${REPEAT:-2}; warmup=${WARMUP:-3}
hosts=$root/scripts/netns-hosts
why=$("$hosts" check) || { echo "compression_link: $why"; exit 77; }
p=cl$$; p=${p:0:8}
tmp=$(mktemp -d)
trap '"$hosts" down "$p" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
"$hosts" up "$p" 2
a1=$("$hosts" addr "$p" 1)
shape() {
  local i
  for i in 1 2; do
    ip netns exec "$p$i" tc qdisc del dev eth0 root 2>/dev/null
    [[ $1 == none ]] || ip netns exec "$p$i" tc qdisc add dev eth0 root tbf rate "$1" burst 256kb latency 1s
  done
}
tx() { local i s=0; for i in 1 2; do s=$((s + $(ip netns exec "$p$i" awk -F'[: ]+' '$2 == "eth0" {print $11}' /proc/net/dev))); done; echo $s; }
"$py" -c 'import random; random.seed(1); w = "the cat sat on a mat and ran far from home to the sea".split()
open("'"$tmp"'/t.txt", "w").write(" ".join(random.choice(w) for _ in range(8000)))'
gpt=(--set model.name=gpt --set data.dataset=text --set data.path="$tmp/t.txt" --set model.n_layer=4
     --set model.n_head=8 --set model.n_embd=512 --set model.block_size=32 --set train.batch_size=1
     --set optim.name=adamw --set optim.lr=1e-3 --set train.device=cpu --set train.threads=1
     --set output.progress=off --set train.max_steps=$((warmup + steps)) --set train.log_every=1
     --set checkpoint.every_epochs=0 --set output.tensorboard=false)
keys() {
  case $1 in
    none) ;;  # the default: runs without the key too
    bf16) echo "--set dist.grad_compression=bf16" ;;
    powersgd) echo "--set dist.grad_compression=powersgd --set dist.powersgd.rank=4 --set dist.powersgd.start_step=2" ;;
  esac
}
n=0
# window RUN_DIR FROM TO: the bytes on both veths between rank 0's logging of step FROM and of
# step TO (polled every 20 ms): the steady steps alone, without the start-up broadcast, the
# fp32 warm-up steps, the evaluation and the checkpoint's gathers. Prints "BYTES STEPS".
window() {
  local f=$1/metrics.jsonl from=$2 to=$3 a="" k
  for ((k = 0; k < 30000; k++)); do
    if [[ -z $a ]] && grep -q "\"event\":\"train\".*\"step\":$from[,}]" "$f" 2>/dev/null; then a=$(tx); fi
    if [[ -n $a ]] && grep -q "\"event\":\"train\".*\"step\":$to[,}]" "$f" 2>/dev/null; then
      echo "$(($(tx) - a)) $((to - from))"; return; fi
    sleep 0.02
  done
  echo "0 0"
}
ours() {  # ours LINK METHOD: one trainbox job; a JSON line of its figures on stdout
  local link=$1 m=$2 i before
  n=$((n + 1))
  before=$(tx)
  for i in 1 2; do
    "$hosts" exec "$p" "$i" timeout 600 "$bin" run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
      --rdzv-endpoint "$a1:29400" --rdzv-id "j$n" --no-prefix --log-dir "$tmp/logs$n-$i" -- \
      "$bin" train "${gpt[@]}" $(keys "$m") --run-dir "$tmp/run$n" --json >"$tmp/o$n.$i" 2>"$tmp/e$n.$i" &
  done
  window "$tmp/run$n" "$warmup" "$((warmup + steps))" >"$tmp/w$n" &
  wait
  local wire=$(($(tx) - before))
  "$py" - "$tmp/run$n/metrics.jsonl" "$warmup" "$wire" "$link" "$m" $(cat "$tmp/w$n") <<'PY'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
train = [l for l in lines if l["event"] == "train"]
s = [l for l in lines if l["event"] == "summary"][-1]
w = int(sys.argv[2])
step_s = [l["global_batch"] / l["samples_per_s"] for l in train[w:]]
steady_bytes, steady_steps = int(sys.argv[6]), int(sys.argv[7])
print(json.dumps({"impl": "trainbox", "link": sys.argv[4], "method": sys.argv[5], "median_step_s": statistics.median(step_s),
                  "test_loss": s["test_loss"], "train_loss": statistics.mean(l["loss"] for l in train[-4:]),
                  "wire_bytes_per_step": int(sys.argv[3]) / s["steps"],
                  "steady_wire_bytes_per_step": steady_bytes / steady_steps if steady_steps else float("nan"),
                  "sent_bytes_per_step_rank0": train[-1]["comm"]["sent_bytes_per_step"][0],
                  "ratio_last_step": train[-1]["comm"]["compression_ratio"][0],
                  "wait_s_per_step": s["comm"]["wait_s_per_step"][0], "steps": s["steps"]}))
PY
}
theirs() {  # theirs METHOD: the Python peer; its JSON line
  local m=$1 i cap=25
  # torch 2.11's powerSGD_hook hangs on Gloo with more than one 25 MiB bucket (its P and Q
  # allreduces are issued from the futures' callbacks, in whatever order each rank's buckets
  # finish): one bucket for PyTorch's PowerSGD, DDP's default for the rest.
  [[ $m == powersgd ]] && cap=1000
  n=$((n + 1))
  local port=$((29500 + n))
  for i in 1 2; do
    "$hosts" exec "$p" "$i" env OMP_NUM_THREADS=1 timeout 600 "$torchrun" --nnodes 2 --nproc-per-node 1 \
      --node-rank $((i - 1)) --master-addr "$a1" --master-port "$port" "$root/bench/peers/compress_peer.py" \
      --data "$tmp/t.txt" --hook "$m" --rank 4 --powersgd-start 2 --steps "$steps" --warmup "$warmup" \
      --n-layer 4 --n-head 8 --n-embd 512 --block-size 32 --bucket-cap-mb "$cap" >"$tmp/o$n.$i" 2>"$tmp/e$n.$i" &
  done
  wait
  tail -n 1 "$tmp/o$n.1"
}
: >"$tmp/rows"
ours_methods=(${OURS:-none bf16 powersgd}); their_methods=(${THEIRS:-none bf16 powersgd})  # subsets: OURS=none …
for ((r = 0; r < repeat; r++)); do
  shape "$rate"
  for m in none bf16 powersgd; do
    [[ " ${ours_methods[*]} " == *" $m "* ]] && ours "$rate" "$m" >>"$tmp/rows"
    [[ " ${their_methods[*]} " == *" $m "* ]] || continue
    theirs "$m" >"$tmp/theirs.json"  # not in a pipeline: a subshell would not count the job in $n
    "$py" -c 'import json,sys; d=json.loads(sys.stdin.read()); d.update(link=sys.argv[1], method=sys.argv[2]); print(json.dumps(d))' \
      "$rate" "$m" <"$tmp/theirs.json" >>"$tmp/rows" || { echo "compression_link: PyTorch's $m run failed:"; tail -n 5 "$tmp/e$n.1"; }
  done
  shape none
  for m in "${ours_methods[@]}"; do ours none "$m" >>"$tmp/rows"; done
done
"$py" - "$tmp/rows" "$rate" "$steps" "$repeat" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
rate, steps, repeat = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def med(impl, link, m, key):
    v = [r[key] for r in rows if r["impl"].startswith(impl) and r["link"] == link and r["method"] == m and key in r]
    return statistics.median(v) if v else float("nan")
print(f"# compression_link — 2 namespace hosts x 1 rank, Gloo, 1 thread a rank; GPT 4x512 (12.7M params), "
      f"batch 1 x 32 tokens; link {rate} (tc tbf); {steps} steps after the warm-up; median of {repeat} interleaved runs")
print(f"{'impl':<10} {'link':<9} {'method':<9} {'step_s':>8} {'test_loss':>9} {'train_loss':>10} {'wire_B/step':>12} "
      f"{'ratio':>7} {'wait_s':>7}")
for r in rows:
    print(f"{r['impl'][:10]:<10} {r['link']:<9} {r['method']:<9} {r['median_step_s']:8.3f} {r.get('test_loss', float('nan')):9.4f} "
          f"{r.get('train_loss', r.get('loss', float('nan'))):10.4f} {r.get('wire_bytes_per_step', float('nan')):12.0f} "
          f"{r.get('ratio_last_step', float('nan')):7.1f} {r.get('wait_s_per_step', float('nan')):7.3f}")
fig = {}
none_s = med("trainbox", rate, "none", "median_step_s")
fig["speedup_powersgd_vs_none"] = none_s / med("trainbox", rate, "powersgd", "median_step_s")
fig["speedup_bf16_vs_none"] = none_s / med("trainbox", rate, "bf16", "median_step_s")
fig["test_loss_powersgd_over_none"] = med("trainbox", rate, "powersgd", "test_loss") / med("trainbox", rate, "none", "test_loss")
fig["test_loss_bf16_over_none"] = med("trainbox", rate, "bf16", "test_loss") / med("trainbox", rate, "none", "test_loss")
params = 12_700_000
fp32_wire = med("trainbox", rate, "none", "wire_bytes_per_step")
fig["wire_fewer_powersgd_vs_none"] = fp32_wire / med("trainbox", rate, "powersgd", "wire_bytes_per_step")
fig["steady_wire_fewer_powersgd_vs_none"] = (med("trainbox", rate, "none", "steady_wire_bytes_per_step") /
                                             med("trainbox", rate, "powersgd", "steady_wire_bytes_per_step"))
fig["steady_wire_fewer_bf16_vs_none"] = (med("trainbox", rate, "none", "steady_wire_bytes_per_step") /
                                         med("trainbox", rate, "bf16", "steady_wire_bytes_per_step"))
fig["reported_ratio_powersgd"] = med("trainbox", rate, "powersgd", "ratio_last_step")
py_none = med("pytorch", rate, "none", "median_step_s")
fig["pytorch_speedup_powersgd_vs_none"] = py_none / med("pytorch", rate, "powersgd", "median_step_s")
fig["pytorch_speedup_bf16_vs_none"] = py_none / med("pytorch", rate, "bf16", "median_step_s")
fig["pytorch_loss_powersgd_over_none"] = med("pytorch", rate, "powersgd", "loss") / med("pytorch", rate, "none", "loss")
for m in ("none", "bf16", "powersgd"):
    fig[f"step_rate_vs_pytorch_{m}"] = med("pytorch", rate, m, "median_step_s") / med("trainbox", rate, m, "median_step_s")
    fig[f"train_loss_vs_pytorch_{m}"] = med("trainbox", rate, m, "train_loss") / med("pytorch", rate, m, "loss")
for m in ("bf16", "powersgd"):
    fig[f"unthrottled_cost_{m}"] = med("trainbox", "none", m, "median_step_s") / med("trainbox", "none", "none", "median_step_s") - 1
goals = {"speedup_powersgd_vs_none": ">= 5", "speedup_bf16_vs_none": ">= 1.8", "test_loss_powersgd_over_none": "within 2 %",
         "wire_fewer_powersgd_vs_none": "(the whole job on the wire: start-up, fp32 warm-up, evaluation, checkpoint)",
         "steady_wire_fewer_powersgd_vs_none": ">= 50 (on the wire, the compressed steps)",
         "step_rate_vs_pytorch_powersgd": ">= 1.0", "step_rate_vs_pytorch_bf16": ">= 1.0",
         "unthrottled_cost_bf16": "<= 0.05", "unthrottled_cost_powersgd": "<= 0.05"}
for k, v in fig.items():
    print(f"{k:<34} {v:8.3f}  {('goal ' + goals[k]) if k in goals else ''}")
print("#json " + json.dumps({"bench": "compression_link", "rate": rate, "steps": steps, "repeat": repeat,
                             "figures": fig, "rows": rows}))
PY
