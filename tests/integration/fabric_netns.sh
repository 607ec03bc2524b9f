#!/usr/bin/env bash
# Preflight's pairwise link test names the slow link, and only it: four network-namespace hosts
# (scripts/netns-hosts), every host's eth0 shaped with tc to 400 Mbit/s, and the link between
# hosts 2 and 3 to 40 Mbit/s (an HTB class per direction, selected by destination address,
# on both ends) — a tenth of the others. `trainbox preflight --json` under a 4-node c10d
# `trainbox run` (1 rank per node, Gloo) must list exactly one slow link, between those two
# hosts, about 10× slower than the median; every other link measured and unflagged.
# Root only; skips (77) where namespaces or tc's htb qdisc are not available. ~30-60 s.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/netns_lib.sh"
netns_hosts fab 4
command -v tc >/dev/null || { echo "FAIL: no tc (Debian package iproute2, which scripts/bootstrap installs)"; exit 1; }
addr() { "$hosts" addr "$p" "$1"; }
a1=$(addr 1)
# shape HOST SLOW_PEER: 400 Mbit/s out of HOST's eth0, 40 Mbit/s toward SLOW_PEER (0: none)
shape() {
  local h=$1 slow=$2 ns=$p$1
  ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: htb default 10 || return 1
  ip netns exec "$ns" tc class add dev eth0 parent 1: classid 1:1 htb rate 400mbit || return 1
  ip netns exec "$ns" tc class add dev eth0 parent 1:1 classid 1:10 htb rate 400mbit || return 1
  if ((slow)); then
    ip netns exec "$ns" tc class add dev eth0 parent 1:1 classid 1:20 htb rate 40mbit ceil 40mbit || return 1
    ip netns exec "$ns" tc filter add dev eth0 parent 1: protocol ip u32 match ip dst "$(addr "$slow")/32" flowid 1:20 ||
      return 1
  fi
}
if ! err=$(shape 1 0 2>&1); then echo "SKIPPED: tc cannot shape here (htb): $err"; exit 77; fi
shape 2 3 && shape 3 2 && shape 4 0 || { echo "FAIL: tc shaping failed"; exit 1; }

# --- preflight on the four hosts, one rank each ---
for i in 1 2 3 4; do
  "$hosts" exec "$p" "$i" timeout 120 "$bin" run --nnodes 4 --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-endpoint "$a1:29400" --rdzv-id fab --rdzv-conf join_timeout=60 --no-prefix -- \
    "$bin" preflight --timeout 10 --json >"$tmp/n$i.out" 2>"$tmp/n$i.err" &
  pids[$i]=$!
done
for i in 1 2 3 4; do wait "${pids[$i]}"; rcs[$i]=$?; done
# rank 0 (whichever host it landed on) printed the JSON
out=$(grep -l '"slow_links"' "$tmp"/n*.out | head -1)
check "preflight ran on 4 hosts and printed its JSON (exits ${rcs[*]})" test -n "$out"
[[ -n $out ]] || { tail -n 20 "$tmp"/n*.err; exit 1; }
"$py" - "$out" "${p}2" "${p}3" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
j, _ = json.JSONDecoder().raw_decode(text[text.index('{\n'):])
slow_a, slow_b = sys.argv[2], sys.argv[3]
links = j["links"]
fails = []
if len(links) != 6: fails.append(f"{len(links)} links, wanted all 6 pairs of 4 nodes")
bad = [l for l in links if l["error"]]
if bad: fails.append(f"links not measured: {bad}")
pair = lambda l: {l["host_a"], l["host_b"]}
slow = [l for l in links if pair(l) == {slow_a, slow_b}]
fast = [l for l in links if pair(l) != {slow_a, slow_b}]
if len(j["slow_links"]) != 1: fails.append(f"slow links named: {j['slow_links']}, wanted exactly one")
elif not all(h in j["slow_links"][0] for h in (slow_a, slow_b)):
    fails.append(f"the slow link named is {j['slow_links'][0]}, wanted {slow_a} <-> {slow_b}")
if slow and fast:
    ratio = j["median_link_gbytes_per_s"] / slow[0]["gbytes_per_s"]
    print(f"slow link {slow[0]['gbytes_per_s']:.4f} GB/s, median {j['median_link_gbytes_per_s']:.4f} GB/s: {ratio:.1f}x")
    if not 5 <= ratio <= 20: fails.append(f"the shaped link is {ratio:.1f}x slower than the median, wanted about 10x")
if len(j["nodes"]) != 4 or any(n["transport_summary"] == "" for n in j["nodes"]):
    fails.append("want 4 nodes, each with a transport line")
for f in fails: print("FAIL", f)
if j["slow_links"]: print("named:", j["slow_links"][0])
sys.exit(1 if fails else 0)
PY
check "exactly the shaped link is named, about 10x slower than the median; the other 5 are not" test $? = 0
check "... and preflight still passes (a slow link is a warning): exit codes ${rcs[*]}" test "${rcs[*]}" = "0 0 0 0"
exit $fail
