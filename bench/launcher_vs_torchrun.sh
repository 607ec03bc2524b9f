#!/usr/bin/env bash
# Benchmark: a whole 2-worker job that does nothing (`true`) under `trainbox run` and under
# torchrun from the same venv — launcher start, spawn, wait, teardown — 10 runs each (after one
# warm-up each and a correctness pass), in one run. Prints median/min/max, the ratio of the
# medians, and one JSON line.
#   bench/launcher_vs_torchrun.sh [BUILD_DIR]      (RUNS=N to change the count)
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
trainbox=$bin
runs=${RUNS:-10}
[[ -x $trainbox ]] || { echo "build first: make build (or pass the build folder)" >&2; exit 2; }
[[ -x $torchrun ]] || { echo "no torchrun in $root/.venv: run scripts/bootstrap" >&2; exit 2; }

ours_cmd=("$trainbox" run --standalone --nproc-per-node 2 -- true)
theirs_cmd=("$torchrun" --standalone --nproc-per-node 2 --no-python true)

# --- correctness, apart from timing: both must run the job and succeed ---
for cmd in ours_cmd theirs_cmd; do
  declare -n c=$cmd
  "${c[@]}" >/dev/null 2>&1 || { echo "'${c[*]}' failed; not timing it" >&2; exit 1; }
done

read -r ours ours_min ours_max <<<"$(wall_ms_stats "$runs" "${ours_cmd[@]}")"
read -r theirs theirs_min theirs_max <<<"$(wall_ms_stats "$runs" "${theirs_cmd[@]}")"
ratio=$(awk -v a="$theirs" -v b="$ours" 'BEGIN {printf "%.1f", a / b}')
torch_version=$("$root/.venv/bin/python" -c 'import torch; print(torch.__version__)')

echo "# trainbox run vs torchrun — $(uname -n), $(nproc) CPUs, torch $torch_version, $runs runs each after 1 warm-up"
echo "# job: 2 workers running \`true\`, --standalone; wall time of the whole launcher process"
printf '%-58s %10s %8s %8s\n' "command" "median_ms" "min_ms" "max_ms"
printf '%-58s %10s %8s %8s\n' "trainbox run --standalone --nproc-per-node 2 -- true" "$ours" "$ours_min" "$ours_max"
printf '%-58s %10s %8s %8s\n' "torchrun --standalone --nproc-per-node 2 --no-python true" "$theirs" "$theirs_min" "$theirs_max"
echo "speedup: ${ratio}x (torchrun median / trainbox run median)"
echo "{\"bench\":\"launcher_vs_torchrun\",\"runs\":$runs,\"nproc_per_node\":2,\"trainbox_run_ms\":$ours,\"trainbox_run_min_ms\":$ours_min,\"trainbox_run_max_ms\":$ours_max,\"torchrun_ms\":$theirs,\"torchrun_min_ms\":$theirs_min,\"torchrun_max_ms\":$theirs_max,\"speedup\":$ratio}"
