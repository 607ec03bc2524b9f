#!/usr/bin/env bash
# A stall across two network-namespace hosts (scripts/netns-hosts): rank 3, on node 1, is
# SIGSTOPped during training. Node 1 runs with a stall timeout too long to fire, so only node
# 0 can name it, and only from the process states node 1 sends over the control channel:
#   - node 0's headline names rank 3 on node 1's host as stopped (not one of its own waiting
#     ranks);
#   - both launchers exit 124 and both summaries name rank 3;
#   - nothing is left in either namespace (node 1's stopped worker was continued and ended).
# Root only; skips (77) with the reason where namespaces are not permitted.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/netns_lib.sh"
marker=trainbox-netns-stall-test-$$
netns_hosts stl 2 "$marker"
a1=$("$hosts" addr "$p" 1)
on() { local i=$1; shift; "$hosts" exec "$p" "$i" "$@"; }
left_in() { ip netns pids "$p$1" 2>/dev/null | wc -l; }
# launch HOST STALL_TIMEOUT LOG: one trainbox run of a 2 x 2 job on that host
launch() {
  on "$1" timeout 120 "$bin" run --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "$a1:29400" \
    --rdzv-id stall --rdzv-conf join_timeout=60 --grace-period 3 --stall-timeout "$2" --log-dir "$tmp/logs.n$1" -- \
    "$bin" train "${small[@]}" --set data.path="$marker" --set train.epochs=1000 --set train.log_every=5 \
    --run-dir "$tmp/run" >"$3" 2>&1
}
worker_pid() {  # worker_pid HOST RANK: pid of that rank's worker in that host
  local pid
  for pid in $(ip netns pids "$p$1"); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "RANK=$2" &&
      [[ $(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -1) == */trainbox-torch ]] && { echo "$pid"; return; }
  done
}

launch 1 5 "$tmp/n1.out" &
l1=$!
launch 2 60 "$tmp/n2.out" &
l2=$!
hb=$tmp/logs.n2/attempt_0/3/heartbeat
victim=""
for _ in $(seq 1500); do  # rank 3 in its allreduce of step 3 or later
  if grep -qE '^([3-9]|[1-9][0-9]+) allreduce ' "$hb" 2>/dev/null; then
    victim=$(worker_pid 2 3)
    [[ -n $victim ]] && kill -STOP "$victim"
    break
  fi
  sleep 0.02
done
check "rank 3 on node 1 stopped during training (pid ${victim:-none})" test -n "$victim"
wait $l1; r1=$?
wait $l2; r2=$?
check "both launchers exit 124 ($r1, $r2)" test "$r1$r2" = 124124 || tail -n 25 "$tmp/n1.out" "$tmp/n2.out"
check "node 0's headline names rank 3 on node 1's host as stopped" \
  grep -qE "stalled: rank 3 \(pid $victim on ${p}2\) is stopped \(state T: SIGSTOP, a debugger or a freezer\)" "$tmp/n1.out"
check "... and none of its own ranks" bash -c "! grep -qE 'stalled: rank [01] ' '$tmp/n1.out'"
check "... with rank 3's line among the stacks" grep -qE "^  rank 3 \(pid $victim on ${p}2, .*<-- stalled" "$tmp/n1.out"
check "node 0's summary has rank 3's stall as the root cause" grep -qE 'message +: stalled: rank 3 ' "$tmp/n1.out"
check "node 1's summary too" grep -qE 'message +: stalled: rank 3 ' "$tmp/n2.out"
sleep 0.5
check "nothing left in either namespace" test "$(left_in 1)$(left_in 2)" = 00
exit $fail
