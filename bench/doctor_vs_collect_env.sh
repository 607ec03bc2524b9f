#!/usr/bin/env bash
# Benchmark: `trainbox doctor --json` against `python -m torch.utils.collect_env`, both
# from the same venv and torch wheel, 5 runs each (after one warm-up each), in one run.
# Prints the medians, the ratio, how many facts each reports, and one JSON line.
#   bench/doctor_vs_collect_env.sh [BUILD_DIR]
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
doctor=$bin
runs=${RUNS:-5}
[[ -x $doctor ]] || { echo "build first: make build" >&2; exit 2; }

read -r ours _ _ <<<"$(wall_ms_stats "$runs" "$doctor" doctor --json)"
read -r theirs _ _ <<<"$(wall_ms_stats "$runs" "$py" -m torch.utils.collect_env)"
# Facts: non-empty leaf values in doctor's JSON report vs "key: value" lines collect_env prints.
our_facts=$("$doctor" doctor --json | "$py" -c '
import json, sys
def leaves(x):
    if isinstance(x, dict): return sum(leaves(v) for v in x.values())
    if isinstance(x, list): return sum(leaves(v) for v in x) if x else 0
    return 0 if x in ("", -1, None) else 1
print(leaves(json.load(sys.stdin)["report"]))')
their_facts=$("$py" -m torch.utils.collect_env 2>/dev/null | grep -cE '^[^ ].*: .+' || true)
ratio=$(awk -v a="$theirs" -v b="$ours" 'BEGIN {printf "%.1f", a / b}')
echo "# doctor vs collect_env — $(uname -n), $(nproc) CPUs, torch $("$py" -c 'import torch; print(torch.__version__)'), $runs runs each (median)"
printf '%-40s %10s %8s\n' "command" "median_ms" "facts"
printf '%-40s %10s %8s\n' "trainbox doctor --json" "$ours" "$our_facts"
printf '%-40s %10s %8s\n' "python -m torch.utils.collect_env" "$theirs" "$their_facts"
echo "speedup: ${ratio}x (goal >= 10x)"
echo "{\"bench\":\"doctor_vs_collect_env\",\"runs\":$runs,\"doctor_ms\":$ours,\"collect_env_ms\":$theirs,\"speedup\":$ratio,\"doctor_facts\":$our_facts,\"collect_env_facts\":$their_facts}"
