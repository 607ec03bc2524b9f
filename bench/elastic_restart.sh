#!/usr/bin/env bash
# Benchmark: an elastic restart after a node loss, on 3 network-namespace hosts (root), the
# seeds' MLP widened to 1024x1024 (steps long enough to kill a host mid-epoch), one rank a host,
# a global batch of 60 (train.global_batch_size), checkpoints every 10 steps.
#   trainbox: tests/integration/netns_elastic.sh (`trainbox run --nnodes 2:3`, heartbeat_timeout
#             3 s): from host 3's SIGKILL (its whole namespace) to the first optimizer step at world 2.
#   torchrun: the venv's torchrun --nnodes 2:3 --rdzv-backend c10d --max-restarts 3 (last_call_timeout
#             2 s, as ours) with the same trainbox train workers: the same interval.
# Prints both and one JSON line. Goal (issue 26): <= heartbeat timeout + checkpoint load + 2 s.
#   bench/elastic_restart.sh [BUILD_DIR]      TORCHRUN_TIMEOUT=120 (0 skips torchrun)
set -uo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
[[ $(id -u) == 0 ]] || { echo "needs root (network namespaces)" >&2; exit 2; }
out=$(TRAINBOX_BIN=$bin TRAINBOX_PYTHON=$py TRAINBOX_SOURCE_DIR=$root bash "$root/tests/integration/netns_elastic.sh" 2>&1)
ours=$(grep -o 'first step at world 2: [0-9.]*' <<<"$out" | awk '{print $NF}')
grep -q '^FAIL' <<<"$out" && { echo "the namespace test failed:"; grep '^FAIL' <<<"$out"; }
echo "trainbox run --nnodes 2:3: loss of host 3 -> first step at world 2: ${ours:-?} s"

theirs=null
if [[ ${TORCHRUN_TIMEOUT:-120} != 0 && -x $torchrun ]]; then
  hosts=$root/scripts/netns-hosts
  p=tbtr$$; p=${p:0:8}
  tmp=$(mktemp -d)
  trap '"$hosts" down "$p" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
  "$hosts" up "$p" 3 >/dev/null
  a1=$("$hosts" addr "$p" 1)
  job=(--set data.dataset=synthetic --set data.synthetic_samples=6000 --set train.global_batch_size=60
       --set model.hidden=[1024,1024] --set train.deterministic=true --set train.threads=1 --set train.log_every=1
       --set output.progress=off --set checkpoint.every_epochs=0 --set checkpoint.every_steps=10
       --set train.device=cpu --set train.epochs=4 --run-dir "$tmp/run")
  for h in 1 2 3; do
    "$hosts" exec "$p" "$h" timeout "${TORCHRUN_TIMEOUT:-120}" "$torchrun" --nnodes 2:3 --nproc-per-node 1 \
      --rdzv-backend c10d --rdzv-endpoint "$a1:29500" --rdzv-id tr --max-restarts 3 \
      --rdzv-conf last_call_timeout=2,join_timeout=60 --no-python -- "$bin" train "${job[@]}" >"$tmp/h$h" 2>&1 &
    disown  # killed below: no job-control notices
  done
  for _ in $(seq 600); do (($(grep -c '"train"' "$tmp/run/metrics.jsonl" 2>/dev/null || echo 0) >= 40)) && break; sleep 0.1; done
  t0=$(date +%s.%N)
  kill -KILL $(ip netns pids "$p"3) 2>/dev/null
  t1=""
  for _ in $(seq $((${TORCHRUN_TIMEOUT:-120} * 20))); do
    if grep -q '"resize"' "$tmp/run/metrics.jsonl" 2>/dev/null && tail -n 1 "$tmp/run/metrics.jsonl" | grep -q '"train"'; then
      t1=$(date +%s.%N); break
    fi
    sleep 0.05
  done
  [[ -n $t1 ]] && theirs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  echo "torchrun --nnodes 2:3:          loss of host 3 -> first step at world 2: $theirs s"
  pkill -KILL -f "rdzv-id tr" 2>/dev/null
fi
printf '{"bench":"elastic_restart","trainbox_s":%s,"torchrun_s":%s,"heartbeat_timeout_s":3}\n' "${ours:-null}" "$theirs"
