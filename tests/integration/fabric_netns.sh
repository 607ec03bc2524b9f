#!/usr/bin/env bash
# Preflight's pairwise link test names the slow node and the slow link, each for what it is
# (env/preflight.h judge_links), on network-namespace hosts (scripts/netns-hosts) shaped with tc
# (an HTB class per direction, selected by destination address) to 400 Mbit/s, so every
# transfer stays small (the 0.5 s window moves at most 25 MB):
#   A. three hosts, host 3 at 40 Mbit/s both ways (its NIC): host 3 is in two of the three
#      links, so the median link is the slow rate; exactly host 3 must be named, as a node, and
#      no link on its own;
#   B. four hosts, the link between hosts 2 and 3 at 40 Mbit/s (on both ends): exactly that
#      link is named, about 10x slower than the median, and no node.
# `trainbox preflight --json` runs under a c10d `trainbox run` per host (1 rank per node, Gloo);
# the launcher of node rank 0 prints the document (one line) on its stdout. A slow node or link
# is a warning: every host exits 0.
# Root only; skips (77) where namespaces or tc's htb qdisc are not available. About 10 s on an
# idle 2-core VM (each preflight about 4 s).
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/netns_lib.sh"
netns_hosts fab 4
command -v tc >/dev/null || { echo "FAIL: no tc (Debian package iproute2, which scripts/bootstrap installs)"; exit 1; }
addr() { "$hosts" addr "$p" "$1"; }
a1=$(addr 1)
# shape HOST SLOW_PEER [RATE]: RATE (400mbit) out of HOST's eth0, 40 Mbit/s toward SLOW_PEER (0: none)
shape() {
  local h=$1 slow=$2 rate=${3:-400mbit} ns=$p$1
  ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: htb default 10 || return 1
  ip netns exec "$ns" tc class add dev eth0 parent 1: classid 1:1 htb rate "$rate" || return 1
  ip netns exec "$ns" tc class add dev eth0 parent 1:1 classid 1:10 htb rate "$rate" ceil "$rate" || return 1
  if ((slow)); then
    ip netns exec "$ns" tc class add dev eth0 parent 1:1 classid 1:20 htb rate 40mbit ceil 40mbit || return 1
    ip netns exec "$ns" tc filter add dev eth0 parent 1: protocol ip u32 match ip dst "$(addr "$slow")/32" flowid 1:20 ||
      return 1
  fi
}
all_zero() { local r; for r in "$@"; do [[ $r == 0 ]] || return 1; done; }
unshape() { local h; for h in "$@"; do ip netns exec "$p$h" tc qdisc del dev eth0 root 2>/dev/null; done; }

# preflight PHASE N: preflight on hosts 1..N (one rank each); $out is the file with the document.
preflight() {
  local phase=$1 n=$2 i
  for i in $(seq 1 "$n"); do
    "$hosts" exec "$p" "$i" timeout 120 "$bin" run --nnodes "$n" --nproc-per-node 1 --rdzv-backend c10d \
      --rdzv-endpoint "$a1:29400" --rdzv-id "fab$phase" --rdzv-conf join_timeout=60 --no-prefix \
      --log-dir "$tmp/logs-$phase-$i" -- "$bin" preflight --timeout 10 --json >"$tmp/$phase$i.out" 2>"$tmp/$phase$i.err" &
    pids[$i]=$!
  done
  rcs=()
  for i in $(seq 1 "$n"); do wait "${pids[$i]}"; rcs+=($?); done
  out=$(grep -l '"slow_links"' "$tmp/$phase"?.out | head -1)
  check "$phase: preflight ran on $n hosts and printed its JSON (exits ${rcs[*]})" test -n "$out"
  [[ -n $out ]] || { tail -n 20 "$tmp/$phase"?.err; exit 1; }
  check "$phase: ... and passes (a slow node or link is a warning): exit codes ${rcs[*]}" all_zero "${rcs[@]}"
}

# --- A. three hosts, host 3's NIC at 40 Mbit/s both ways ---
if ! err=$(shape 1 3 2>&1); then echo "SKIPPED: tc cannot shape here (htb): $err"; exit 77; fi
shape 2 3 && shape 3 0 40mbit || { echo "FAIL: tc shaping failed"; exit 1; }
preflight A 3
"$py" - "$out" "${p}3" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))  # the launcher printed one document
j.setdefault("slow_nodes", [])  # a preflight that does not judge nodes fails below, not with a KeyError
slow_host = sys.argv[2]
fails = []
links = j["links"]
if len(links) != 3 or any(l["error"] for l in links): fails.append(f"want 3 measured links: {links}")
if len(j["slow_nodes"]) != 1: fails.append(f"slow nodes named: {j['slow_nodes']}, wanted exactly one")
elif f"({slow_host})" not in j["slow_nodes"][0]: fails.append(f"the slow node named is not {slow_host}: {j['slow_nodes'][0]}")
if j["slow_links"]: fails.append(f"links named on their own: {j['slow_links']}, wanted none (they are the node's)")
flagged = [n["host"] for n in j["nodes"] if n.get("warnings")]
if flagged != [slow_host]: fails.append(f"nodes carrying a warning: {flagged}, wanted [{slow_host}]")
print(f"median link {j['median_link_gbytes_per_s']:.4f} GB/s, reference {j.get('link_reference_gbytes_per_s', -1):.4f} GB/s")
for f in fails: print("FAIL", f)
if j["slow_nodes"]: print("named:", j["slow_nodes"][0])
sys.exit(1 if fails else 0)
PY
check "A: 3 hosts, one slow NIC: exactly that host is named, as a node, and no link alone" test $? = 0

# --- B. four hosts, the link between hosts 2 and 3 at 40 Mbit/s ---
unshape 1 2 3
shape 1 0 && shape 2 3 && shape 3 2 && shape 4 0 || { echo "FAIL: tc shaping failed"; exit 1; }
preflight B 4
"$py" - "$out" "${p}2" "${p}3" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j.setdefault("slow_nodes", [])
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
if j["slow_nodes"]: fails.append(f"nodes named: {j['slow_nodes']}, wanted none (both are fast on their other links)")
if slow and fast:
    ratio = j["median_link_gbytes_per_s"] / slow[0]["gbytes_per_s"]
    print(f"slow link {slow[0]['gbytes_per_s']:.4f} GB/s, median {j['median_link_gbytes_per_s']:.4f} GB/s: {ratio:.1f}x")
    if not 5 <= ratio <= 20: fails.append(f"the shaped link is {ratio:.1f}x slower than the median, wanted about 10x")  # claim: fabric.slow_link
if len(j["nodes"]) != 4 or any(n["transport_summary"] == "" for n in j["nodes"]):
    fails.append("want 4 nodes, each with a transport line")
for f in fails: print("FAIL", f)
if j["slow_links"]: print("named:", j["slow_links"][0])
sys.exit(1 if fails else 0)
PY
check "B: 4 hosts, one slow link: exactly that link is named, about 10x slower than the median; no node" test $? = 0
exit $fail
