#!/usr/bin/env bash
# Gradient compression over a throttled link between two network-namespace hosts
# (scripts/netns-hosts; issue 36 item 3; docs/distributed.md, "Reading the communication figures"):
#   A. the GPT (2 layers of 64, 125k parameters) with the link at 20 Mbit/s and resnet18 (32 px
#      synthetic images, 11.2M parameters) at 1 Gbit/s, each with dist.grad_compression = none,
#      bf16 and powersgd rank 4 (start_step 2), 6 steps, 1 rank per host: bf16 and PowerSGD end
#      within the tolerances of tests/claims.toml (compression.netns_*) of the uncompressed run's
#      test loss after the same steps;
#   B. the bytes the two veth ends sent (/proc/net/dev, both hosts' eth0) match what the run
#      reports (the summary's bytes sent per step per rank x steps, plus the DDP's start-up
#      broadcast of the parameters, which no window counts): wire / reported within the
#      claimed bounds — TCP/IP headers and ACKs (about 7 % of a bulk transfer at MTU 1500), the
#      rendezvous, the store, the launchers' control channel and the evaluation collectives are
#      the difference, so the reported ratio is the wire's;
#   C. `trainbox preflight --config` on the GPT: with the link at 2 Mbit/s the finding names
#      dist.grad_compression = "powersgd" with its ratio for this model; unthrottled it says
#      to leave dist.grad_compression = "none".
# Throttling: tc tbf on each host's eth0 (so each direction of the one link is shaped once).
# Root only; skips (77) where namespaces or tc's tbf are not available.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/netns_lib.sh"
marker=trainbox-compress-netns-$$
netns_hosts cmp 2 "$marker"
command -v tc >/dev/null || { echo "FAIL: no tc (Debian package iproute2, which scripts/bootstrap installs)"; exit 1; }
src=${TRAINBOX_SOURCE_DIR:?}
a1=$("$hosts" addr "$p" 1)
bound() { "$src/tests/claims.py" bound "$1"; }

# shape RATE: both hosts' eth0 at RATE (none: unshaped). A large queue (1 s) so nothing is dropped:
# a retransmission would count on the wire and not in the report.
shape() {
  local i
  for i in 1 2; do
    ip netns exec "$p$i" tc qdisc del dev eth0 root 2>/dev/null
    [[ $1 == none ]] && continue
    ip netns exec "$p$i" tc qdisc add dev eth0 root tbf rate "$1" burst 256kb latency 1s || return 1
  done
}
tx() {  # the bytes both hosts' eth0 have sent
  local i sum=0 b
  for i in 1 2; do
    b=$(ip netns exec "$p$i" awk -F'[: ]+' '$2 == "eth0" {print $11}' /proc/net/dev)
    sum=$((sum + b))
  done
  echo "$sum"
}

"$py" -c 'import random; random.seed(1); w = ["the", "cat", "sat", "on", "a", "mat", "and", "ran", "far", "home"]
open("'"$tmp"'/t.txt", "w").write(" ".join(random.choice(w) for _ in range(6000)))'
common=(--set train.device=cpu --set train.threads=1 --set output.progress=off --set train.deterministic=true
        --set train.max_steps=6 --set train.log_every=1 --set checkpoint.every_epochs=0 --set output.tensorboard=false)
gpt=(--set model.name=gpt --set data.dataset=text --set data.path="$tmp/t.txt" --set model.n_layer=2
     --set model.n_head=2 --set model.n_embd=64 --set model.block_size=32 --set train.batch_size=8
     --set optim.name=adamw --set optim.lr=3e-3)
rn=(--set model.name=resnet18 --set data.dataset=synthetic --set data.synthetic_shape=[3,32,32]
    --set data.synthetic_samples=96 --set train.batch_size=4 --set optim.lr=1e-3)
methods=(${COMPRESSION_NETNS_METHODS:-none bf16 powersgd})  # a subset: a quicker look while debugging
comp() {  # the keys of method $1
  case $1 in
    none) ;;  # the default: runs without the key too
    bf16) echo "--set dist.grad_compression=bf16" ;;
    powersgd) echo "--set dist.grad_compression=powersgd --set dist.powersgd.rank=4 --set dist.powersgd.start_step=2" ;;
  esac
}

# job NAME ARGS…: `trainbox run` on both hosts (1 rank each, c10d rendezvous), trainbox train ARGS;
# the wire bytes of the job in $tmp/NAME.wire.
job() {
  local name=$1 i; shift
  local before; before=$(tx)
  for i in 1 2; do
    "$hosts" exec "$p" "$i" timeout 120 "$bin" run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
      --rdzv-endpoint "$a1:29400" --rdzv-id "$name" --rdzv-conf join_timeout=60 --no-prefix \
      --log-dir "$tmp/$marker-$name-$i" -- "$bin" train "$@" --run-dir "$tmp/$name" --json \
      >"$tmp/$name.$i.out" 2>"$tmp/$name.$i.err" &
    pids[$i]=$!
  done
  local rc=0
  for i in 1 2; do wait "${pids[$i]}" || rc=$?; done
  echo $(($(tx) - before)) >"$tmp/$name.wire"
  check "$name: both hosts trained (exit $rc)" test "$rc" = 0
  ((rc == 0)) || tail -n 5 "$tmp/$name".?.err
}

if ! err=$(shape 20mbit 2>&1); then echo "SKIPPED: tc cannot shape here (tbf): $err"; exit 77; fi
for m in "${methods[@]}"; do job "gpt-$m" "${common[@]}" "${gpt[@]}" $(comp "$m"); done
shape 1gbit || { echo "FAIL: tc shaping failed"; exit 1; }
for m in "${methods[@]}"; do job "rn-$m" "${common[@]}" "${rn[@]}" $(comp "$m"); done

# --- A and B: loss against the uncompressed run; the wire against the report ---
"$py" - "$tmp" "$(bound compression.netns_loss_bf16)" "$(bound compression.netns_loss_powersgd)" \
  "$(bound compression.netns_wire_over_reported)" <<'PY'
import json, os, sys
tmp = sys.argv[1]
loss_tol = {"bf16": float(sys.argv[2]), "powersgd": float(sys.argv[3])}
lo, hi = (float(x) for x in sys.argv[4].split())
fails = []
def summary(name):
    for i in (1, 2):
        try:
            return json.loads(open(os.path.join(tmp, f"{name}.{i}.out")).read().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            pass
    return None
for model in ("gpt", "rn"):
    base = summary(f"{model}-none")
    wire = {}
    for m in ("none", "bf16", "powersgd"):
        s = summary(f"{model}-{m}")
        if not s or "comm" not in s:
            fails.append(f"{model}-{m}: no summary with communication figures"); continue
        c = s["comm"]
        reported = sum(c["sent_bytes_per_step"]) * c["steps"] + s["model_state"]["params"]  # + the start-up broadcast
        if m == "powersgd":  # + the final checkpoint's gather of every rank's error feedback (one gradient a rank)
            reported += len(c["sent_bytes_per_step"]) * s["model_state"]["params"]
        w = int(open(os.path.join(tmp, f"{model}-{m}.wire")).read())
        wire[m] = w
        lines = [json.loads(l) for l in open(os.path.join(tmp, f"{model}-{m}", "metrics.jsonl"))]
        last = [l["comm"] for l in lines if l.get("event") == "train"][-1]
        print(f"{model:3} {m:8}: test loss {s['test_loss']:.5f}, {c['steps']} steps, sent/step/rank "
              f"{c['sent_bytes_per_step'][0]:.0f} B (last step ratio {last['compression_ratio'][0]:.1f}x), "
              f"wait {c['wait_s_per_step'][0]:.3f} s/step; wire {w} B vs reported {reported:.0f} B: {w / reported:.3f}")
        if c["compression"] != m: fails.append(f"{model}-{m}: the summary says compression {c['compression']}")
        if not lo <= w / reported <= hi:
            fails.append(f"{model}-{m}: wire / reported = {w / reported:.3f}, outside [{lo}, {hi}]")
        if m != "none" and base:
            d = abs(s["test_loss"] - base["test_loss"]) / abs(base["test_loss"])
            print(f"        {m} vs none: test loss {d * 100:.2f} % apart (tolerance {loss_tol[m] * 100:g} %)")
            if d > loss_tol[m]: fails.append(f"{model}-{m}: test loss {d * 100:.2f} % from uncompressed")
    if len(wire) == 3:
        print(f"{model:3} wire ratios: none/bf16 {wire['none'] / wire['bf16']:.2f}x, none/powersgd "
              f"{wire['none'] / wire['powersgd']:.1f}x")
for f in fails: print("FAIL", f)
sys.exit(1 if fails else 0)
PY
check "A+B: bf16 and powersgd r4 within tolerance of uncompressed; wire bytes match the reported bytes" test $? = 0

# --- C. preflight's finding on the GPT: throttled, then not ---
preflight() {  # preflight NAME: under trainbox run on both hosts; the JSON in $tmp/NAME.json
  local name=$1 i
  for i in 1 2; do
    "$hosts" exec "$p" "$i" timeout 120 "$bin" run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
      --rdzv-endpoint "$a1:29400" --rdzv-id "$name" --rdzv-conf join_timeout=60 --no-prefix \
      --log-dir "$tmp/$marker-$name-$i" -- "$bin" preflight --timeout 10 --json --config "$tmp/gpt.toml" \
      >"$tmp/$name.$i.json" 2>"$tmp/$name.$i.err" &
    pids[$i]=$!
  done
  for i in 1 2; do wait "${pids[$i]}"; done
  cp "$(grep -l '"compression_advice"' "$tmp/$name".?.json | head -1 || echo /dev/null)" "$tmp/$name.json"
}
"$bin" train "${common[@]}" "${gpt[@]}" --print-config >"$tmp/gpt.toml" 2>/dev/null
shape 2mbit && preflight pf-slow  # 2 s of exchange: slow even when a loaded machine stretches the step's compute
shape none && preflight pf-fast
"$py" - "$tmp/pf-slow.json" "$tmp/pf-fast.json" <<'PY'
import json, sys
fails = []
def advice(path):
    try:
        return json.load(open(path))["compression_advice"]
    except (OSError, ValueError, KeyError):
        return None
slow, fast = advice(sys.argv[1]), advice(sys.argv[2])
if not slow: fails.append("throttled: no compression_advice in preflight's JSON")
else:
    print("throttled:", slow["line"])
    ps = slow["choices"][0]
    if slow["verdict"] != "slow": fails.append(f"throttled: verdict {slow['verdict']}, wanted slow")
    if "dist.grad_compression = \"powersgd\"" not in slow["line"] or f"{ps['ratio']:.0f}x" not in slow["line"]:
        fails.append("throttled: the line does not name powersgd with its ratio")
    if not 5 < ps["ratio"] < 50: fails.append(f"powersgd r4 ratio for this GPT {ps['ratio']:.1f}, wanted 5..50")
if not fast: fails.append("unthrottled: no compression_advice in preflight's JSON")
else:
    print("unthrottled:", fast["line"])
    if fast["verdict"] != "fast" or "leave dist.grad_compression = \"none\"" not in fast["line"]:
        fails.append(f"unthrottled: verdict {fast['verdict']}, wanted fast and the advice to leave it off")
for f in fails: print("FAIL", f)
sys.exit(1 if fails else 0)
PY
check "C: preflight --config names powersgd and its ratio on the slow link, says to leave it off on the fast one" test $? = 0
exit $fail
