#!/usr/bin/env bash
# Benchmark: the c10d control plane at scale — N launchers' control channels (tests/tools/rdzv_swarm:
# the real ControlClient, N-1 of them, and one that can go silent, against the real
# RendezvousServer, hosted in the same process as node 0's launcher hosts it, on loopback) for
# N = 16, 128, 512, 1024: formation, node 0's server-thread CPU per heartbeat interval once
# formed, fail-together, restart and lost-node latency to every node. Anchor: torch's TCPStore
# (libuv server, N clients on threads of one Python process: set own key, add to a counter, the
# last sets "all", everyone waits for it and reads every key), then its server thread's CPU
# while every node sets a heartbeat key once a second, and fail-together (every node in
# store.wait on one key, one set of it, until the last wait returns).
# Prints a table and one JSON line.
#   bench/rendezvous_scale.sh [BUILD_DIR]
#   NODES="16 128 512 1024" CPU_SECONDS=10 TORCH_TIMEOUT=180 (per N; 0 skips the anchor) PYTHON=…
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
swarm=$build/bin/rdzv_swarm
nodes=${NODES:-16 128 512 1024}
cpu_s=${CPU_SECONDS:-10}
torch_timeout=${TORCH_TIMEOUT:-180}
[[ -x $swarm ]] || { echo "build first: cmake --build $build --target rdzv_swarm" >&2; exit 2; }

field() { grep -o "\"$1\":[^,}]*" <<<"$2" | head -1 | cut -d: -f2 | tr -d '"'; }

ours=() theirs=() theirs_cpu=() theirs_fail=()
for n in $nodes; do
  ours+=("$("$swarm" --nodes "$n" --cpu-seconds "$cpu_s" --json)")
  t="null" tc="null" tf="null"
  if [[ $torch_timeout != 0 && -x $py ]]; then
    out=$(timeout "$((torch_timeout + cpu_s + 10))" "$py" "$root/bench/peers/tcpstore_swarm.py" "$n" "$torch_timeout" \
      "$cpu_s" 2>/dev/null) || true
    t=$(field formation_ms "$out"); tc=$(field hb_cpu_pct "$out"); tf=$(field fail_all_ms "$out")
    [[ -n $t ]] || t="null"  # did not finish within TORCH_TIMEOUT (or failed)
    [[ -n $tc ]] || tc="null"
    [[ -n $tf ]] || tf="null"
  fi
  theirs+=("$t") theirs_cpu+=("$tc") theirs_fail+=("$tf")
done

torch_version=$([[ -x $py ]] && "$py" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)
echo "# rendezvous at scale — $(uname -n), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), ulimit -n $(ulimit -n)"
echo "# rdzv_swarm: N simulated launchers in one process, real ControlClient + RendezvousServer on 127.0.0.1;"
echo "#   heartbeat interval 1 s, timeout 5 s; hb_cpu over ${cpu_s} s of the server thread (% of one core)"
echo "# anchor: torch $torch_version TCPStore, N client threads in one process (null: not within ${torch_timeout} s)"
printf '%6s %13s %10s %14s %12s %15s %12s %18s %15s %14s %14s\n' nodes formation_ms hb_cpu_pct hb_cpu_ms/intv \
  fail_all_ms restart_all_ms lost_all_ms lost_over_timeout tcpstore_form_ms tcpstore_hb_cpu tcpstore_fail
rows=()
i=0
for n in $nodes; do
  j=${ours[$i]}
  printf '%6s %13s %10s %14s %12s %15s %12s %18s %15s %14s %14s\n' "$n" "$(field formation_ms "$j")" \
    "$(field hb_cpu_pct "$j")" "$(field hb_cpu_ms_per_interval "$j")" "$(field fail_all_ms "$j")" \
    "$(field restart_all_ms "$j")" "$(field lost_all_ms "$j")" "$(field lost_over_timeout_ms "$j")" "${theirs[$i]}" \
    "${theirs_cpu[$i]}" "${theirs_fail[$i]}"
  rows+=("${j%\}},\"tcpstore_formation_ms\":${theirs[$i]},\"tcpstore_hb_cpu_pct\":${theirs_cpu[$i]},\"tcpstore_fail_all_ms\":${theirs_fail[$i]}}")
  i=$((i + 1))
done
echo "{\"bench\":\"rendezvous_scale\",\"cpus\":$(nproc),\"torch\":\"$torch_version\",\"rows\":[$(IFS=,; echo "${rows[*]}")]}"
