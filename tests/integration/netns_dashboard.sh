#!/usr/bin/env bash
# trainbox run --dashboard across two network-namespace hosts (scripts/netns-hosts): a 2 x 2 job
# with --rdzv-backend c10d of torch-free heartbeat workers; node 0's dashboard (on its own
# loopback, queried from inside its namespace with `ip netns exec`) lists all 4 ranks, node 1's
# two with node_rank 1, node 1's host name and advancing steps — relayed over the control channel.
# Both launchers then exit 0 and nothing is left in either namespace. Traffic: the namespaces'
# loopbacks and their bridge (198.18.0.0/15) only.
# Root only; skips (77) with the reason where namespaces are not permitted.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/netns_lib.sh"
marker=trainbox-netns-dash-test-$$
netns_hosts dsh 2 "$marker"
a1=$("$hosts" addr "$p" 1)
worker=$root/tests/integration/python/heartbeat_worker.py
port=28265
on() { local i=$1; shift; "$hosts" exec "$p" "$i" "$@"; }
left_in() { ip netns pids "$p$1" 2>/dev/null | wc -l; }
# launch HOST LOG EXTRA…: one trainbox run of a 2 x 2 job on that host, 15 s of heartbeats
launch() {
  local host=$1 log=$2; shift 2
  on "$host" timeout 90 "$bin" run --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "$a1:29400" \
    --rdzv-id dash --rdzv-conf join_timeout=60 --no-instrument --grace-period 3 "$@" -- \
    "$py" "$worker" --seconds 15 --marker "$marker" >"$log" 2>&1
}
launch 1 "$tmp/n1.out" --dashboard "127.0.0.1:$port" &
l1=$!
launch 2 "$tmp/n2.out" &
l2=$!
# From inside node 0's namespace: its loopback is its own.
ip netns exec "${p}1" "$py" - "$port" "${p}2" >"$tmp/state.out" 2>&1 <<'PY'
import json, sys, time, urllib.request
port, host2 = sys.argv[1], sys.argv[2]
def state():
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/state", timeout=3) as r:
        return json.load(r)
first = None
end = time.time() + 40
while time.time() < end:
    try:
        s = state()
        remote = [r for r in s["ranks"] if r["node_rank"] == 1]
        if len(s["ranks"]) == 4 and len(remote) == 2 and all(r["step"] > 0 for r in remote):
            if first is None:
                first = {r["rank"]: r["step"] for r in remote}
            elif all(r["step"] > first[r["rank"]] for r in remote):
                print("ranks", sorted(r["rank"] for r in s["ranks"]), "remote", [(r["rank"], r["host"], r["step"]) for r in remote])
                ok = sorted(r["rank"] for r in remote) == [2, 3] and all(r["host"] == host2 for r in remote)
                print("node 1's ranks 2 and 3 on", host2, "with advancing steps:", ok)
                sys.exit(0 if ok else 1)
    except (OSError, ValueError, KeyError):
        pass
    time.sleep(0.3)
print("timed out; last state:", json.dumps(s)[:600] if "s" in dir() else "none")
sys.exit(1)
PY
qrc=$?
cat "$tmp/state.out"
check "node 0's /api/state lists node 1's ranks (2, 3) with node 1's host and advancing steps" test "$qrc" = 0
wait $l1; r1=$?
wait $l2; r2=$?
check "both launchers exit 0 ($r1, $r2)" test "$r1$r2" = 00 || tail -n 15 "$tmp/n1.out" "$tmp/n2.out"
sleep 0.5
check "nothing left in either namespace" test "$(left_in 1)$(left_in 2)" = 00
exit $fail
