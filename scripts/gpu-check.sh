#!/usr/bin/env bash
# The one prepared script for the GPU test machine (one H200, torch 2.11+cu130 in its own
# Python, nvcc 13, CMake, ninja; none of our Debian packages, no network). One sure shot:
# builds trainbox against that machine's torch with the carried deps (.carry/, made here by
# scripts/prepare-carry), then checks the CUDA paths and measures the box, each step with its
# own time limit inside one overall budget, and writes every output under $OUT:
#   $OUT/summary.txt    one line per step: PASS / FAIL / SKIP, seconds, and its figure
#   $OUT/<step>.txt     the step's whole output
#   device run: carry [".carry"], command "bash scripts/gpu-check.sh", timeout_s 600
#
# Bounded: GPU_CHECK_BUDGET_S (default 540 = 9 minutes, build included) is the whole run;
# each step runs under `timeout` with min(its own limit, what is left of the budget less a
# 20 s reserve for the summary), a step that runs out says so (FAIL "timed out after N s")
# and the script moves on; a step with under 5 s left is skipped, saying so. Steps run in
# order of importance, so a slow build costs the least useful figures. The limits below are
# caps, not expectations (expected on an H200 with 16 cores in brackets).
#
# Without a GPU (e.g. the 2-core build box) every GPU step is a SKIP with the reason, the
# script reuses the `make` build tree ($root/build) when there is one, and it exits 0 when
# nothing FAILed — so it never fails for a reason unrelated to the GPU. With
# GPU_CHECK_REHEARSE=1 the GPU steps run there too, on the CPU, as a dress rehearsal.
# GPU_CHECK_ONLY="zero2-nccl compress-nccl …" runs only the steps named (a rerun of failed ones).
# Exit: 1 if any step FAILed, else 0.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-check-out}
mkdir -p "$out"
: >"$out/summary.txt"
t_begin=$(date +%s)
budget=${GPU_CHECK_BUDGET_S:-540}
deadline=$((t_begin + budget - 20))
any_fail=0

has_gpu=0
nvidia-smi -L >/dev/null 2>&1 && has_gpu=1
# GPU_CHECK_REHEARSE=1 on a machine without a GPU: run the GPU steps anyway on the CPU
# (device cpu), to prove the commands and the figure extraction before GPU minutes are spent.
rehearse=${GPU_CHECK_REHEARSE:-0}
dev=cuda
scale=1  # rehearsal on a small CPU box: every step's cap x4 (the GPU steps are slow on CPU)
((has_gpu == 0 && rehearse == 1)) && dev=cpu && scale=4
if [[ -n ${PYTHON:-} ]]; then py=$PYTHON
elif python3 -c 'import torch' 2>/dev/null; then py=$(command -v python3)
else py=$root/.venv/bin/python; fi
if [[ -n ${BUILD:-} ]]; then build=$BUILD
elif ((has_gpu == 0)) && [[ -f $root/build/build.ninja ]]; then build=$root/build  # rehearsal: the make tree
else build=/tmp/trainbox-gpu-build; fi
bin=$build/bin/trainbox
[[ -d $root/.carry/datasets/fashion-mnist ]] && export TRAINBOX_FASHION_DIR=$root/.carry/datasets/fashion-mnist
fashion=${TRAINBOX_FASHION_DIR:-/usr/share/datasets/fashion-mnist}
export PYTHONUNBUFFERED=1

line() { echo "$*" | tee -a "$out/summary.txt"; }
# step NAME LIMIT_S NEEDS FIGURE_FN -- command…
#   NEEDS: any; gpu (skipped without a GPU unless rehearsing); nvml (a real GPU only)
#   Runs the command with its output in $out/NAME.txt; FIGURE_FN (or "-") prints the figure
#   from that file. rc 77 = SKIP (the command's own last line says why).
step() {
  local name=$1 limit=$2 needs=$3 figure=$4; shift 5
  local left=$((deadline - $(date +%s)))
  # GPU_CHECK_ONLY="step …": only those steps (and configure/build), e.g. a rerun of the failed ones
  if [[ -n ${GPU_CHECK_ONLY:-} && " $GPU_CHECK_ONLY configure build " != *" $name "* ]]; then return 0; fi
  if { [[ $needs == gpu ]] && ((has_gpu == 0 && rehearse == 0)); } || { [[ $needs == nvml ]] && ((has_gpu == 0)); }; then
    line "$(printf '%-16s SKIP %6s  %s' "$name" "-" "no GPU on this machine")"; return 0
  fi
  if ((left < 5)); then
    line "$(printf '%-16s SKIP %6s  %s' "$name" "-" "out of budget (${budget} s) before it started")"; return 0
  fi
  limit=$((limit * scale))
  ((limit > left)) && limit=$left
  local t0=$(date +%s.%N)
  timeout -k 5 "$limit" "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  local dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  local fig=""
  [[ $figure != - ]] && fig=$($figure "$out/$name.txt" 2>/dev/null | head -1)
  local verdict=PASS
  if ((rc == 124 || rc == 137)); then verdict=FAIL; fig="timed out after ${limit} s${fig:+; $fig}"
  elif ((rc == 77)); then verdict=SKIP; fig=$(grep -v '^\s*$' "$out/$name.txt" | tail -1 | cut -c1-150)
  elif ((rc != 0)); then verdict=FAIL; fig="exit $rc: $(grep -iE 'error|fail' "$out/$name.txt" | head -1 | cut -c1-150)"
  fi
  [[ $verdict == FAIL ]] && any_fail=1
  line "$(printf '%-16s %s %6ss  %s' "$name" "$verdict" "$dt" "$fig")"
  return $rc
}

# --- figures: one short line from each step's output ---
jq_py() { "$py" -c "import json,sys; $1" "$2"; }
fig_json_train() {  # the train summary JSON (last JSON object in the file)
  "$py" - "$1" <<'PY'
import json, sys
txt = open(sys.argv[1]).read()
d = json.loads(txt[txt.rindex('\n{') + 1 if '\n{' in txt else txt.index('{'):])
print(f"{d['samples_per_s']:.0f} samples/s, test accuracy {100 * d['test_accuracy']:.2f}%, {d['device']}")
PY
}
fig_smoke() {
  "$py" - "$1" <<'PY'
import json, sys
txt = open(sys.argv[1]).read(); d = json.loads(txt[txt.index('{'):])["smoke"]
print(f"{d['device']}: start-up {d.get('startup_ms', 0):.0f} ms; " +
      "; ".join(f"{c['name']} {'ok' if c['ok'] else 'FAIL'}" for c in d["checks"]))
PY
}
fig_doctor() { grep -E '^doctor: [0-9]+ errors' "$1" | cut -d' ' -f2-; }
fig_ctest() {
  local skipped; skipped=$(grep -c '\*\*\*Skipped' "$1")
  echo "$(grep -E 'tests passed|tests failed' "$1" | tail -1)${skipped:+, $skipped skipped}"
}
fig_bench_all() {
  "$py" - "$1" <<'PY'
import json, sys
txt = open(sys.argv[1]).read(); reps = json.loads(txt[txt.index('['):])
f = []
for r in reps:
    rows = r["rows"]
    if r["bench"] == "gemm":
        best = max(rows, key=lambda x: x["tflops"]); f.append(f"gemm {best['dtype']} {best['tflops']:.3g} TFLOP/s")
    elif r["bench"] == "memcpy":
        f += [f"{x['direction']} {x['gbps']:.3g} GB/s" for x in rows if x["direction"] in ("h2d pinned", "host->host")][-1:]
    elif r["bench"] == "allreduce":
        f.append(f"allreduce busbw {max(x['ip_busbw'] for x in rows):.3g} GB/s ({r['header'].get('transport', 'transport ?')})")
    elif r["bench"] == "train":
        best = max(rows, key=lambda x: x.get("samples_per_s", 0)); f.append(f"train {best.get('samples_per_s', 0):.0f} samples/s")
print("; ".join(f))
PY
}
fig_ratio() { grep -E '^median ratio' "$1"; }
fig_zero() { grep -m1 -E "^stage [23] vs stage 0" "$1"; }
fig_comp() { grep -m1 "^compression on NCCL" "$1"; }
fig_preflight() { grep -m1 -E '^transport node 0 ' "$1" | cut -d' ' -f4-; }
fig_train_vs() { grep -vE '^#|^row' "$1" | awk '{printf "%s %s eager%s; ", $1, $4, ($8 != "-" && $8 != "") ? ", " $8 " compile" : ""}'; }

line "gpu-check on $(hostname): $(nproc) CPUs, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo 'no GPU')"
line "torch $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?') ($py); build $build; budget ${budget} s"

# --- build [configure ~15 s, build ~150 s] ---
prefix=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
deps=()
[[ -d $root/.carry ]] && deps=(-DTRAINBOX_DEPS_PREFIX="$root/.carry" -DTRAINBOX_GTEST_SOURCE="$root/.carry/src/googletest")
step configure 90 any - -- cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DTRAINBOX_PYTHON="$py" "${deps[@]}" ${GPU_CHECK_CMAKE_ARGS:-} &&
  step build 300 any - -- cmake --build "$build" -j "$(nproc)"
if [[ ! -x $bin ]]; then
  line "no trainbox binary: nothing else can run"; tail -30 "$out/build.txt" "$out/configure.txt" 2>/dev/null
  exit 1
fi
if ((has_gpu == 1)); then
  n=$("$bin" doctor --json 2>/dev/null | "$py" -c 'import json,sys; d=json.load(sys.stdin); d=d.get("report", d); print(d["driver"]["cuda_device_count"])' 2>/dev/null)
  ((${n:-0} > 0)) || { line "nvidia-smi sees a GPU but the CUDA driver reports ${n:-?} devices: GPU steps will fail"; }
fi

# --- the stack [doctor ~1 s each, smoke ~5 s] ---
step doctor 20 any fig_doctor -- "$bin" doctor --no-color
step doctor-json 20 any - -- "$bin" doctor --json
step doctor-smoke 60 gpu fig_smoke -- "$bin" doctor --smoke --json

# --- correctness on the GPU: CUDA graphs vs eager, export without a GPU, NCCL DDP vs one
#     process, doctor's smoke [ctest -L gpu ~60 s] ---
step tests-gpu 180 gpu fig_ctest -- ctest --test-dir "$build" -L gpu --output-on-failure --timeout 150

# --- hang forensics on NCCL: a collective forced to time out (the rank's GPU stream hangs
#     before it, debug.stall_phase=gpu_collective, dist.timeout_s=10) must leave a flight-recorder
#     dump in the attempt's folder and a named error [~30 s] ---
runs=$(mktemp -d /tmp/gpu-check-runs.XXXXXX)  # fresh run dirs: a rerun never meets old checkpoints
amp=fp16; [[ $dev == cpu ]] && amp=bf16  # a rehearsal: CPU autocast is bf16
export bin dev runs fashion py amp  # for the steps' `bash -c`
fig_fr() { grep -E '^dumps: ' "$1" | head -1; }
step flight-recorder 90 nvml fig_fr -- bash -c '
  "$0" run --standalone --nproc-per-node 1 --log-dir "$1/fr" -- "$0" train --device '"$dev"' --set data.dataset=synthetic \
    --set train.epochs=100 --set train.log_every=5 --set dist.timeout_s=10 --set debug.stall_rank=0 \
    --set debug.stall_step=5 --set debug.stall_phase=gpu_collective --run-dir "$1/fr-run" --quiet
  echo "job exit code: $? (a timed-out collective: non-zero expected)"
  n=$(ls "$1"/fr/attempt_0/nccl_trace_rank_* 2>/dev/null | wc -l)
  echo "dumps: $n flight-recorder file(s) in $1/fr/attempt_0"
  ((n > 0))' "$bin" "$runs"

# --- training on CUDA [~10 s each] ---
tj=(--device $dev --set output.progress=lines --set data.path="$fashion" --json)
step train-graphs 60 gpu fig_json_train -- "$bin" train --run-dir "$runs/tb-graphs" --set train.epochs=1 \
  --set train.cuda_graphs=true --set data.device_resident=true "${tj[@]}"
step train-bf16 60 gpu fig_json_train -- "$bin" train --run-dir "$runs/tb-bf16" --set train.epochs=1 --set train.amp=bf16 "${tj[@]}"
step train-cnn 60 gpu fig_json_train -- "$bin" train "$root/configs/fashion_cnn.toml" --run-dir "$runs/tb-cnn" \
  --set train.epochs=1 "${tj[@]}"
# Your own images on CUDA (docs/datasets.md): resnet18 at 128 px, bf16, channels_last, the
# decode threads feeding pinned batches copied non-blocking; the tree is made with the venv's PIL
# (bench/peers/image_peer.py --gen: 640 JPEGs, 10 classes).
step image-train 120 gpu fig_json_train -- bash -c '"$1" "$2/bench/peers/image_peer.py" "$3/imgs" --gen 640 &&
  "$4" train "$2/configs/imagefolder_resnet18.toml" --device "$5" --run-dir "$3/tb-img" --json \
    --set data.path="$3/imgs" --set data.val_path= --set data.val_fraction=0.1 --set data.image_size=128 \
    --set train.epochs=1 --set data.channels_last=true --set output.progress=lines' _ "$py" "$root" "$runs" "$bin" "$dev"
# model.sync_batchnorm on the device: BatchNorm's float64 sums through the process group (NCCL
# on CUDA) in forward and backward, under bf16 autocast (one rank: the path, not the exchange).
step syncbn 60 gpu - -- "$bin" run --standalone -n 1 -- "$bin" train "$root/configs/imagefolder_resnet18.toml" \
  --device "$dev" --run-dir "$runs/tb-syncbn" --set data.path="$runs/imgs" --set data.val_path= \
  --set data.val_fraction=0.1 --set data.image_size=64 --set train.max_steps=10 --set train.amp=bf16 \
  --set model.sync_batchnorm=true --set output.progress=lines
# The sharding and compression steps compare 40-step runs on one GPU (one rank: the paths,
# not the exchange): fashion-MNIST, AdamW, fp16 AMP + GradScaler + clipping (bf16 in a rehearsal).
# nccl_runs NAME KEY VALUES… -- extra keys: one run per value of KEY into $runs/NAME-VALUE.
nccl_runs() {
  local name=$1 key=$2 v; shift 2; local values=()
  while [[ $1 != -- ]]; do values+=("$1"); shift; done; shift
  for v in "${values[@]}"; do
    "$bin" run --standalone -n 1 -- "$bin" train --device "$dev" --run-dir "$runs/$name-$v" --set data.path="$fashion" \
      --set train.max_steps=40 --set train.log_every=1 --set optim.name=adamw --set train.amp="$amp" \
      --set train.clip_grad_norm=1.0 --set train.deterministic=true --set output.progress=off --quiet \
      --set "$key=$v" "$@" || return 1
  done
}
# same_losses LABEL A B: per-step losses of run dirs A and B within 1e-5 (40 steps each).
same_losses() {
  "$py" - "$@" <<'PY'
import json, sys
label, a, b = sys.argv[1], *(f"{p}/metrics.jsonl" for p in sys.argv[2:4])
def losses(p): return [e["loss"] for e in map(json.loads, open(p)) if e["event"] == "train"]
a, b = losses(a), losses(b)
worst = max(abs(x - y) / max(1, abs(x)) for x, y in zip(a, b))
print(f"{label} on NCCL: {len(a)} steps, largest loss difference {worst:.2e} (tolerance 1e-5)")
sys.exit(0 if len(a) == len(b) == 40 and worst <= 1e-5 else 1)
PY
}
# dist.zero_stage = 2 on NCCL (docs/distributed.md, "Sharding (ZeRO)"): the bucket
# reduce-scatter (_reduce_scatter_base, AVG) from the backward hooks, the all-gather after the
# optimizer, the clip's norm and the scaler's found_inf through NCCL; per-step losses against
# stage 0 within 1e-5.
step zero2-nccl 90 gpu fig_zero -- bash -c "$(declare -f nccl_runs same_losses); "'
  nccl_runs zero dist.zero_stage 0 2 -- && same_losses "stage 2 vs stage 0" "$runs/zero-0" "$runs/zero-2"'
# dist.zero_stage = 3 on NCCL: each unit (the ResNet's stages) all-gathered (_allgather_base)
# into its re-allocated flat storage before its forward and its backward and freed after, the
# prefetch on NCCL's stream, reduce-scatter from the hooks; per-step losses against stage 0.
step zero3-nccl 90 gpu fig_zero -- bash -c "$(declare -f nccl_runs same_losses); "'
  nccl_runs zero3 dist.zero_stage 0 3 -- --set model.name=resnet &&
  same_losses "stage 3 vs stage 0" "$runs/zero3-0" "$runs/zero3-3"'
# Gradient compression on NCCL (docs/distributed.md, "Gradient compression"): bf16 and PowerSGD
# rank 4 (from step 2, so 38 compressed steps) through the bucket hooks; the last 5 steps' mean
# loss against uncompressed.
step compress-nccl 120 gpu fig_comp -- bash -c "$(declare -f nccl_runs); "'
  nccl_runs comp dist.grad_compression none bf16 powersgd -- --set dist.powersgd.rank=4 --set dist.powersgd.start_step=2 &&
  "$py" - "$runs"/comp-{none,bf16,powersgd} <<'"'PY'"'
import json, math, sys
def losses(p): return [e["loss"] for e in map(json.loads, open(f"{p}/metrics.jsonl")) if e["event"] == "train"]
ref, bf, ps = (losses(p) for p in sys.argv[1:4])
last = lambda l: sum(l[-5:]) / 5
db, dp = abs(last(bf) - last(ref)) / last(ref), abs(last(ps) - last(ref)) / last(ref)
print(f"compression on NCCL: 40 steps, last-5 mean loss none {last(ref):.4f}, bf16 {last(bf):.4f} ({db:.1%}), powersgd r4 {last(ps):.4f} ({dp:.1%}); tolerance 2 % / 10 %")
ok = len(ref) == len(bf) == len(ps) == 40 and all(map(math.isfinite, bf + ps)) and db <= 0.02 and dp <= 0.10
sys.exit(0 if ok else 1)
PY'

# Memory on CUDA (docs/trainer.md, "Memory plan"): --plan measures a GPT's activations with the
# caching allocator's peak, and a batch far too large for the device is one line, exit 1, naming
# the rank, the allocation, the plan's breakdown and the fix (not the allocator's dump alone).
"$py" -c 'import random; random.seed(1); w = ["the", "cat", "sat", "on", "a", "mat"]
open("'"$runs"'/t.txt", "w").write(" ".join(random.choice(w) for _ in range(600000)))'
gptc=(--device $dev --set model.name=gpt --set data.dataset=text --set data.path="$runs/t.txt" --set model.n_layer=2
      --set model.n_head=8 --set model.block_size=256 --set output.progress=lines)
# The plan's phases on CUDA: the training step and the evaluation at train.eval_batch_size, the peak gated.
fig_plan() { grep -E '^  (activations|training step|evaluation|total) ' "$1" | awk '{printf "%s %s %s %s; ", $1, $2, $3, $4}'; }
step plan-cuda 60 gpu fig_plan -- "$bin" train "${gptc[@]}" --set model.n_embd=512 --set train.batch_size=32 \
  --set model.activation_checkpointing=none --plan --budget 1GiB
step oom-line 90 gpu - -- bash -c '"$@" --run-dir "'"$runs"'/tb-oom" 2>"'"$runs"'/oom.err"; rc=$?
  cat "'"$runs"'/oom.err"; echo "exit code: $rc (1 wanted)"
  tail -1 "'"$runs"'/oom.err" | grep -E "error: rank 0: CUDA out of memory allocating [0-9.]+ [KMGT]?i?B; the plan per rank: parameters .*; fix: " \
    && ! grep -qE "^  fix:|Traceback|CUDACachingAllocator" "'"$runs"'/oom.err" && ((rc == 1))' _ "$bin" train "${gptc[@]}" --set model.n_embd=2048 \
  --set model.vocab_size=50304 --set train.batch_size=2048 --set train.max_steps=1 --set train.amp=off
# The llama family on CUDA (issue 44): a from-scratch Llama-3-shaped decoder (GQA 8/2, RoPE θ 500000)
# trained 40 steps in bf16 through SDPA's flash / efficient kernels, then greedy decoding with the
# KV cache (sample's last line: tokens/s) and its ONNX export.
llamac=(--device $dev --set model.name=llama --set data.dataset=text --set data.path="$runs/t.txt" --set model.n_layer=4
        --set model.n_head=8 --set model.n_kv_head=2 --set model.n_embd=512 --set model.block_size=256
        --set model.vocab_size=256 --set model.rope_theta=500000 --set train.amp=bf16 --set output.progress=lines)
fig_sample() { grep -oE "[0-9]+ tokens in [0-9.]+ s: [0-9.]+ tokens/s.*" "$1" | tail -1; }
step llama-bf16 90 gpu fig_json_train -- "$bin" train "${llamac[@]}" --run-dir "$runs/llama" --set train.max_steps=40 \
  --set train.batch_size=16 --json
step llama-generate 60 gpu fig_sample -- "$bin" sample "$runs/llama" --prompt "the " --tokens 256 --temperature 0 \
  --device $dev
step llama-export 60 gpu - -- "$bin" export "$runs/llama" "$runs/llama_hf" --format hf
# LoRA on CUDA (issue 47): that folder as a frozen bf16 base, r 16 on the seven projections, 40 steps under
# bf16 autocast; the adapters exported as PEFT's folder and the merged model sampled.
step lora-bf16 90 gpu fig_json_train -- "$bin" train "${llamac[@]}" --run-dir "$runs/lora" \
  --set model.init_from="$runs/llama_hf" --set model.lora.r=16 --set model.base_dtype=bf16 \
  --set 'model.lora.target_modules=["q_proj","k_proj","v_proj","o_proj","gate_proj","up_proj","down_proj"]' \
  --set train.max_steps=40 --set train.batch_size=16 --json
step lora-export 30 gpu - -- "$bin" export "$runs/lora" "$runs/lora_adapter" --adapter
step lora-sample 60 gpu fig_sample -- "$bin" sample "$runs/lora" --prompt "the " --tokens 128 --temperature 0 --device $dev
# A mixture of experts on CUDA (issue 48): 8 SwiGLU experts, top-2, in every layer of that decoder (Mixtral's
# layout), 40 steps under bf16 autocast with the load-balancing loss; its tokens per expert in metrics.jsonl;
# exported per expert as a MixtralForCausalLM folder. (Expert parallelism is not built: no all-to-all step.)
fig_moe() { grep -oE '"imbalance_max": ?[0-9.]+' "$runs/moe/metrics.jsonl" | tail -1; fig_json_train "$1"; }
step moe-bf16 90 gpu fig_moe -- "$bin" train "${llamac[@]}" --run-dir "$runs/moe" --set model.moe.experts=8 \
  --set model.moe.top_k=2 --set model.intermediate_size=512 --set train.max_steps=40 --set train.batch_size=16 --json
step moe-export 30 gpu - -- "$bin" export "$runs/moe" "$runs/moe_hf" --format hf
# The dashboard's GPU rows (NVML, dcgm-exporter names) while a job runs.
step dashboard-gpu 40 nvml - -- bash -c 'p=$("$1" -c "import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); print(s.getsockname()[1])")
  "$2" run --standalone -n 1 --dashboard 127.0.0.1:$p -- sleep 8 & l=$!; sleep 3
  m=$("$1" -c "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())" http://127.0.0.1:$p/metrics)
  kill $l 2>/dev/null; wait $l 2>/dev/null; printf "%s\n" "$m" | grep -E "^DCGM_FI_DEV_(GPU_UTIL|FB_USED|GPU_TEMP|POWER_USAGE)"' _ "$py" "$bin"
step ddp-example 40 gpu - -- "$bin" run --standalone --nproc-per-node 1 -- "$build/bin/ddp_train"
# Preflight's transport line (NCCL's INIT/NET log of the smoke allreduce, parsed): it must be
# there. On this one-GPU machine it is never NET: a single rank connects no peer, and ranks of
# one node use P2P/SHM — NET (IB or Socket) only appears between nodes.
step preflight 60 gpu fig_preflight -- bash -c 'o=$("$1" preflight --timeout 30 2>&1); rc=$?; printf "%s\n" "$o"
  ((rc == 0)) || exit $rc
  grep -qE "^transport node 0 \([^)]*\): (one rank|P2P/SHM|Gloo)" <<<"$o" ||
    { echo "FAIL: no single-node transport line (one rank or P2P/SHM, never NET) above"; exit 1; }' _ "$bin"

# --- how fast is this box, and against torch on the same GPU [~40 s, ~30 s, ~60 s] ---
step bench-all 90 gpu fig_bench_all -- "$bin" bench all --quick --json --device $dev
step bench-vs-torch 90 gpu fig_ratio -- env DEVICE=$dev PYTHON="$py" bash "$root/bench/gemm_memcpy_vs_pytorch.sh" "$build"
step train-vs-torch 150 gpu fig_train_vs -- env DEVICE=$dev PYTHON="$py" REPEAT=1 THREADS=$(($(nproc) < 8 ? $(nproc) : 8)) COMPILE=1 \
  ROWS="mlp-b64 mlp-b64-graphs" bash "$root/bench/train_vs_pytorch.sh" "$build"
# The GPT (configs/text_gpt.toml's model, batch 16, bf16) with and without CUDA graphs, against
# PyTorch eager and torch.compile on the same GPU. Needs the fortunes text: carried in .carry/text
# when the machine has no /usr/share/games/fortunes (scripts/prepare-carry).
gpt_text=/usr/share/games/fortunes; [[ -d $gpt_text ]] || gpt_text=$root/.carry/text
step gpt-vs-torch 150 gpu fig_train_vs -- env DEVICE=$dev PYTHON="$py" REPEAT=1 THREADS=$(($(nproc) < 8 ? $(nproc) : 8)) COMPILE=1 \
  TRAINBOX_TEXT_DIR="$gpt_text" ROWS="gpt-b16-bf16 gpt-b16-bf16-graphs" bash "$root/bench/train_vs_pytorch.sh" "$build"
step smi 20 nvml - -- "$bin" smi
step entrypoint 30 nvml - -- env TRAINBOX_IMAGE="gpu-check (no container)" "$bin" entrypoint -- true

# --- the rest of the suite on a GPU machine: whatever budget is left [~4 min on 16 cores] ---
step tests-all 400 gpu fig_ctest -- ctest --test-dir "$build" -LE gpu -j 8 --output-on-failure --timeout 200

# Later issues add their GPU steps above tests-all.
rm -rf "$runs"
line "done in $(($(date +%s) - t_begin)) s; outputs in $out"
exit $any_fail
