#!/usr/bin/env bash
# Benchmark: trainbox run vs torchrun, both with --rdzv-backend c10d, across two network-
# namespace hosts (scripts/netns-hosts; root), the same `trainbox train` job of 2 nodes x 2
# workers (Gloo), median of REPEAT (5) runs each:
#   worker-death: a worker on node 1 is SIGKILLed → seconds until node 0's launcher exits;
#   link-cut:     node 1's link goes down mid-training (no RST) → seconds until node 0's
#                 launcher exits (capped at CAP s, 90: torchrun waits for the collective
#                 timeout, train's dist.timeout_s, set to 60 s here so the cap can see it);
#   start-up:     both launchers started at once with a worker that exits at once → seconds
#                 until both have exited (the launchers' own overhead, rendezvous included).
# Prints a table, the ratios, and one JSON line.
#   bench/multinode_vs_torchrun.sh [BUILD_DIR]     REPEAT=5 CAP=90
set -uo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
repeat=${REPEAT:-5}
cap=${CAP:-90}
hosts=$root/scripts/netns-hosts
p=tbbm$$
p=${p:0:8}
tmp=$(mktemp -d)
marker=trainbox-bench-mn-$$
cleanup() { pkill -KILL -f "$marker" 2>/dev/null; "$hosts" down "$p" >/dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT
why=$("$hosts" check) || { echo "# multinode_vs_torchrun: skipped: $why"; exit 0; }
[[ -x $torchrun ]] || { echo "# multinode_vs_torchrun: no torchrun next to $py"; exit 1; }
"$hosts" up "$p" 2
a1=$("$hosts" addr "$p" 1)
job=(--set data.dataset=synthetic --set data.synthetic_samples=2000 --set model.hidden=[64] --set train.threads=1
     --set output.progress=off --set train.device=cpu --set train.epochs=1000 --set train.log_every=5
     --set dist.timeout_s=60 --set data.path="$marker")
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# start LAUNCHER NODE ID PORT RUN_DIR -- WORKER…: a launcher on host NODE in the background
start() {
  local which=$1 node=$2 id=$3 port=$4 dir=$5; shift 6
  if [[ $which == trainbox ]]; then
    "$hosts" exec "$p" "$node" "$bin" run --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "$a1:$port" \
      --rdzv-id "$id" --grace-period 3 -- "$@" >"$dir.n$node.log" 2>&1 &
  else
    "$hosts" exec "$p" "$node" "$torchrun" --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "$a1:$port" \
      --rdzv-id "$id" --no-python "$@" >"$dir.n$node.log" 2>&1 &
  fi
}
wait_training() { for _ in $(seq 600); do [[ -e $1/rank_3.log ]] && grep -q step "$1/rank_3.log" 2>/dev/null && return 0; sleep 0.05; done; return 1; }
worker3() {
  local pid
  for pid in $(ip netns pids "$p"2); do
    # the worker itself: RANK=3 in its environment, trainbox-torch as its program
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx RANK=3 &&
      [[ $(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -1) == */trainbox-torch ]] && { echo "$pid"; return; }
  done
}
# bounded wait for a pid: echoes seconds since t0, or "cap" after CAP seconds
wait_exit() {
  local pid=$1 t0=$2
  while kill -0 "$pid" 2>/dev/null; do
    awk -v a="$t0" -v b="$(now)" -v c="$cap" 'BEGIN { exit !(b - a > c) }' && { echo cap; return; }
    sleep 0.02
  done
  since "$t0"
}
reset_hosts() {
  { pkill -KILL -f "$marker"; for h in 1 2; do kill -KILL $(ip netns pids "$p$h"); done; } 2>/dev/null
  "$hosts" heal "$p" 2; sleep 0.5
  wait 2>/dev/null  # reap the killed launchers quietly
}

# summarize VALUE…: "median capped failed raw" (median inf when most runs hit the cap or failed)
summarize() {
  "$py" - "$@" <<'PY'
import math, statistics, sys
v = sys.argv[1:]
num = [float(x) for x in v if x not in ("cap", "fail")]
med = statistics.median(num) if len(num) > len(v) // 2 else math.inf
print(f"{med:.2f} {v.count('cap')} {v.count('fail')} {','.join(v)}")
PY
}

declare -A res
port=29600
for case in worker-death link-cut start-up; do
  for which in trainbox torchrun; do
    vals=()
    for r in $(seq "$repeat"); do
      port=$((port + 1)); dir=$tmp/$which-$case-$r
      if [[ $case == start-up ]]; then
        t0=$(now)
        start "$which" 1 "s$r$which" "$port" "$dir" -- /bin/true; l1=$!
        start "$which" 2 "s$r$which" "$port" "$dir" -- /bin/true; l2=$!
        wait $l1 $l2
        vals+=("$(since "$t0")")
        continue
      fi
      start "$which" 1 "j$r$which" "$port" "$dir" -- "$bin" train "${job[@]}" --run-dir "$dir"; l1=$!
      start "$which" 2 "j$r$which" "$port" "$dir" -- "$bin" train "${job[@]}" --run-dir "$dir"; l2=$!
      if ! wait_training "$dir"; then vals+=(fail); reset_hosts; continue; fi
      t0=$(now)
      if [[ $case == worker-death ]]; then kill -9 "$(worker3)"; else "$hosts" cut "$p" 2; fi
      vals+=("$(wait_exit $l1 "$t0")")
      reset_hosts
      wait 2>/dev/null
    done
    res[$case,$which]=$(summarize "${vals[@]}")
  done
done

echo "# multinode_vs_torchrun — $(uname -n), 2 namespace hosts x 2 workers, c10d rendezvous, median of $repeat, cap ${cap}s"
printf '%-14s %12s %12s %8s   %s\n' case trainbox_s torchrun_s ratio "runs (trainbox | torchrun)"
json="{\"bench\": \"multinode_vs_torchrun\", \"repeat\": $repeat, \"cap_s\": $cap"
for case in worker-death link-cut start-up; do
  read -r a ac af araw <<<"${res[$case,trainbox]}"
  read -r b bc bf braw <<<"${res[$case,torchrun]}"
  ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0 && b != "inf") printf "%.1fx", b / a; else print "-" }')
  [[ $b == inf ]] && ratio=">$(awk -v a="$a" -v c="$cap" 'BEGIN { printf "%.0f", c / a }')x"
  printf '%-14s %12s %12s %8s   %s | %s\n' "$case" "$a" "$b" "$ratio" "$araw" "$braw"
  json+=", \"${case//-/_}\": {\"trainbox_s\": \"$a\", \"torchrun_s\": \"$b\", \"trainbox_runs\": \"$araw\", \"torchrun_runs\": \"$braw\"}"
done
echo "#json $json}"
echo "# goals: worker-death and link-cut within 2 s / the heartbeat timeout (5 s); start-up >= 10x less than torchrun"
