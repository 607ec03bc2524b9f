# Sourced first by every bench script: the paths they share, and the timing helper.
#   source "$(dirname "$0")/common.sh" "${1:-}"
# sets
#   root      the checkout
#   build     the build folder: the script's first argument, default $root/build
#   bin       $build/bin/trainbox
#   py        PYTHON, default the checkout's venv (.venv, scripts/bootstrap)
#   torchrun  the torchrun beside $py
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
bin=$build/bin/trainbox
py=${PYTHON:-$root/.venv/bin/python}
torchrun=$(dirname "$py")/torchrun

# wall_ms_stats RUNS CMD…: "median min max" wall milliseconds of CMD over RUNS runs, after
# one warm-up run; output discarded, exit codes ignored (check correctness separately).
wall_ms_stats() {
  local runs=$1 times=() i t0
  shift
  "$@" >/dev/null 2>&1 || true
  for ((i = 0; i < runs; i++)); do
    t0=$(date +%s%N)
    "$@" >/dev/null 2>&1 || true
    times+=($((($(date +%s%N) - t0) / 1000)))
  done
  printf '%s\n' "${times[@]}" | sort -n |
    awk '{a[NR] = $1} END {printf "%.1f %.1f %.1f", a[int((NR + 1) / 2)] / 1000, a[1] / 1000, a[NR] / 1000}'
}
